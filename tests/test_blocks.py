"""Unit tests of the shared building blocks against independent references."""

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_gpt_config
from transformers.activations import ACT2FN
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

from hf_lm.models.hflm_attention import Attention, eager_attention_forward
from hf_lm.models.hflm_layers import (
    FEED_FORWARDS,
    GatedMLP,
    LayerNorm,
    RMSNorm,
    build_feed_forward,
)
from hf_lm.models.hflm_masks import (
    build_attention_mask,
)
from hf_lm.models.hflm_positions import (
    RotaryPositions,
    SinusoidalPositions,
    alibi_slopes,
)


def test_rmsnorm_matches_llama():
    ours, ref = RMSNorm(16, eps=1e-6), LlamaRMSNorm(16, eps=1e-6)
    with torch.no_grad():
        ours.weight.normal_()
        ref.weight.copy_(ours.weight)
    x = torch.randn(3, 5, 16)
    torch.testing.assert_close(ours(x), ref(x), rtol=0, atol=1e-6)
    assert ours.bfloat16()(x.bfloat16()).dtype == torch.bfloat16


def test_layernorm_matches_torch_and_keeps_dtype():
    ours, ref = LayerNorm(16, eps=1e-5), torch.nn.LayerNorm(16, eps=1e-5)
    with torch.no_grad():
        ours.weight.normal_()
        ours.bias.normal_()
        ref.weight.copy_(ours.weight)
        ref.bias.copy_(ours.bias)
    x = torch.randn(3, 5, 16)
    torch.testing.assert_close(ours(x), ref(x))
    assert ours.to(torch.float16)(x.half()).dtype == torch.float16


@pytest.mark.parametrize("name", sorted(FEED_FORWARDS))
def test_feed_forward_formulas(name):
    config = tiny_gpt_config(hidden_act=name)
    ff = build_feed_forward(config)
    x = torch.randn(2, 3, config.hidden_size)
    acts = {
        "relu": F.relu,
        "gelu": lambda t: F.gelu(t),
        "gelu_tanh": ACT2FN["gelu_new"],  # GPT-2's Python formula, written independently in transformers
        "swiglu": F.silu,
        "geglu": lambda t: F.gelu(t),
        "reglu": F.relu,
        "geglu_tanh": ACT2FN["gelu_new"],  # T5 v1.1's gated-gelu
    }
    act = acts[name]
    if isinstance(ff, GatedMLP):
        ff_size = config.intermediate_size
        gate = x @ ff.gate_up_proj.weight[:ff_size].T + ff.gate_up_proj.bias[:ff_size]
        up = x @ ff.gate_up_proj.weight[ff_size:].T + ff.gate_up_proj.bias[ff_size:]
        expected = ff.down_proj(act(gate) * up)
    else:
        expected = ff.down_proj(act(ff.up_proj(x)))
    torch.testing.assert_close(ff(x), expected, rtol=1e-5, atol=1e-5)


def test_sinusoidal_matches_paper_formula():
    pos = SinusoidalPositions(tiny_gpt_config(position_embedding_type="sinusoidal"))
    table = pos.embed(torch.arange(50)[None], torch.float32)[0]  # (50, 32)
    d = 32
    for p, i in [(0, 0), (7, 3), (49, 15)]:
        assert math.isclose(table[p, 2 * i].item(), math.sin(p / 10000 ** (2 * i / d)), abs_tol=1e-5)
        assert math.isclose(table[p, 2 * i + 1].item(), math.cos(p / 10000 ** (2 * i / d)), abs_tol=1e-5)


def test_rope_matches_llama_and_is_relative():
    config = tiny_gpt_config(position_embedding_type="rope")
    rope = RotaryPositions(config)
    pos = torch.arange(10)[None]
    cos, sin, key_cos, key_sin = rope.position_embeddings(pos, torch.float32)
    assert key_cos is cos and key_sin is sin  # RoPE rotates keys as queries
    q, k = torch.randn(1, 4, 10, 8), torch.randn(1, 4, 10, 8)
    from hf_lm.models.hflm_attention import apply_rotary

    ref_q, ref_k = apply_rotary_pos_emb(q, k, cos, sin)
    torch.testing.assert_close(apply_rotary(q, cos, sin), ref_q)
    # the score of a rotated pair depends only on the distance between positions
    v = torch.randn(8)

    def rot(t, p):
        cos, sin, _, _ = rope.position_embeddings(torch.tensor([[p]]), torch.float32)
        return apply_rotary(t.view(1, 1, 1, 8), cos, sin)

    s1 = (rot(v, 3) * rot(v + 1, 5)).sum()
    s2 = (rot(v, 13) * rot(v + 1, 15)).sum()
    torch.testing.assert_close(s1, s2, rtol=1e-4, atol=1e-4)


def test_alibi_slopes_follow_paper():
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    # non power of two: the 4 slopes of n=4, then every other slope of n=8
    expected = [2.0 ** (-2 * (i + 1)) for i in range(4)] + [2.0**-1, 2.0**-3]
    torch.testing.assert_close(alibi_slopes(6), torch.tensor(expected))


def test_mask_fast_paths():
    dev, dt = torch.device("cpu"), torch.float32
    assert build_attention_mask(None, q_len=5, kv_len=5, device=dev, dtype=dt) == (None, True)
    assert build_attention_mask(None, q_len=1, kv_len=6, device=dev, dtype=dt) == (None, False)
    assert build_attention_mask(None, q_len=5, kv_len=5, device=dev, dtype=dt, causal=False) == (None, False)


def test_mask_padding_causal_prefix():
    dev, dt = torch.device("cpu"), torch.float32
    am = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    mask, is_causal = build_attention_mask(
        am, q_len=4, kv_len=4, device=dev, dtype=dt, prefix_lengths=torch.tensor([0, 2])
    )
    assert not is_causal and mask.shape == (2, 1, 4, 4)
    expected0 = torch.tensor([[1, 0, 0, 0], [0, 1, 0, 0], [0, 1, 1, 0], [0, 1, 1, 1]], dtype=torch.bool)
    # row 0 is a padding query: it sees only itself, so it is never empty
    expected1 = torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(mask[0, 0], expected0)
    assert torch.equal(mask[1, 0], expected1)
    # with a cache: 2 new queries at absolute positions 2 and 3
    mask, _ = build_attention_mask(torch.tensor([[0, 1, 1, 1]]), q_len=2, kv_len=4, device=dev, dtype=dt)
    assert torch.equal(mask[0, 0], expected0[2:])


def _attention_inputs(nh=4, nkv=4, T=6, S=6):
    q = torch.randn(2, nh, T, 8)
    k = torch.randn(2, nkv, S, 8)
    v = torch.randn(2, nkv, S, 8)
    return q, k, v


@pytest.mark.parametrize("nkv", [4, 2, 1])
def test_sdpa_and_eager_agree_with_masks(nkv):
    q, k, v = _attention_inputs(nkv=nkv)
    am = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    for mask, is_causal in [
        build_attention_mask(None, q_len=6, kv_len=6, device=q.device, dtype=q.dtype),
        build_attention_mask(am, q_len=6, kv_len=6, device=q.device, dtype=q.dtype),
        build_attention_mask(
            am, q_len=6, kv_len=6, device=q.device, dtype=q.dtype, bias=torch.randn(1, 4, 6, 6)
        ),
        build_attention_mask(am, q_len=6, kv_len=6, device=q.device, dtype=q.dtype, causal=False),
    ]:
        # transformers' SDPA function, as the models look it up, against hf_lm's reference
        module = SimpleNamespace(num_key_value_groups=4 // nkv, is_causal=True, training=False)
        sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]
        a, _ = sdpa(module, q, k, v, mask, scaling=8**-0.5, is_causal=is_causal)
        b, probs = eager_attention_forward(module, q, k, v, mask, scaling=8**-0.5, is_causal=is_causal)
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(probs.sum(-1), torch.ones(2, 4, 6))


@pytest.mark.parametrize("nkv", [4, 2, 1])
def test_grouped_query_attention_equals_mha_with_shared_heads(nkv):
    """GQA/MQA is MHA whose key/value heads are copies within each group."""
    config = tiny_gpt_config(num_key_value_heads=nkv)
    gqa = Attention(config, 0).eval()
    mha = Attention(tiny_gpt_config(), 0).eval()
    hs, nh = config.head_dim, config.num_attention_heads
    sizes = (nh * hs, nkv * hs, nkv * hs)
    stacked = gqa.grouped_order().argsort()  # grouped rows -> [all q; all k; all v]
    wq, wk, wv = gqa.query_key_value.weight.detach()[stacked].split(sizes)
    bq, bk, bv = gqa.query_key_value.bias.detach()[stacked].split(sizes)
    rep = lambda w: w.view(nkv, hs, -1).repeat_interleave(nh // nkv, 0).reshape(nh * hs, -1)  # noqa: E731
    # the stacked layout, as checkpoints from before the grouped one hold it: loading regroups it
    mha.load_state_dict(
        {
            "qkv_proj.weight": torch.cat([wq, rep(wk), rep(wv)]),
            "qkv_proj.bias": torch.cat([bq, rep(bk[:, None])[:, 0], rep(bv[:, None])[:, 0]]),
            **{f"o_proj.{k}": v for k, v in gqa.o_proj.state_dict().items()},
        }
    )
    x = torch.randn(2, 5, config.hidden_size)
    torch.testing.assert_close(gqa(x, is_causal=True)[0], mha(x, is_causal=True)[0], rtol=1e-5, atol=1e-5)
    assert gqa.query_key_value.out_features == (nh + 2 * nkv) * hs


def test_bidirectional_attention_sees_the_future():
    """The blocks serve encoders too: with causal=False a later token changes an earlier output."""
    attn = Attention(tiny_gpt_config(), 0, is_causal=False).eval()
    x = torch.randn(1, 5, 32)
    y = x.clone()
    y[0, -1] += 1.0
    for impl in ("sdpa", "eager"):
        attn.config._attn_implementation = impl
        mask, is_causal = build_attention_mask(
            None, q_len=5, kv_len=5, device=x.device, dtype=x.dtype, causal=False
        )
        assert not torch.allclose(attn(x, mask, is_causal)[0][0, 0], attn(y, mask, is_causal)[0][0, 0])


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(1, 1), (1, 2), (2, 2), (4, 1), (3, 3), (2, 1, 3)])
def test_vocab_projection_equals_linear(shape, bias):
    """The small-row CPU path computes F.linear's values and gradients."""
    from hf_lm.models.hflm_layers import (
        VocabProjection,
    )

    torch.manual_seed(0)
    head = VocabProjection(16, 50, bias=bias)
    if bias:
        torch.nn.init.normal_(head.bias)
    x = torch.randn(*shape, 16, requires_grad=True)
    out = head(x)
    assert out.shape == (*shape, 50)
    assert (
        out.is_contiguous()
    )  # callers `.view()` logits; the small-row path must not return a transposed view
    ref = torch.nn.functional.linear(x, head.weight, head.bias)
    torch.testing.assert_close(out, ref)
    (g_out,) = torch.autograd.grad(out.square().sum(), x)
    (g_ref,) = torch.autograd.grad(ref.square().sum(), x)
    torch.testing.assert_close(g_out, g_ref)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("vocab, pad", [(50, 14), (1001, 23), (64, 64)])
def test_vocab_projection_aligned_product_equals_linear(vocab, pad, bias):
    """The padded product CUDA takes for training-sized inputs (`aligned_linear`: the weight with
    zero rows up to an aligned width, the logits cut back) gives F.linear's logits and gradients,
    contiguous, for the weight and bias too (they are the tied embeddings)."""
    from hf_lm.models.hflm_layers import (
        VocabProjection,
    )

    torch.manual_seed(0)
    head = VocabProjection(16, vocab, bias=bias)
    if bias:
        torch.nn.init.normal_(head.bias)
    results = []
    for project in (lambda h: head.aligned_linear(h, pad), lambda h: F.linear(h, head.weight, head.bias)):
        x = torch.randn(3, 7, 16, generator=torch.Generator().manual_seed(1), requires_grad=True)
        out = project(x)
        params = [x, head.weight] + ([head.bias] if bias else [])
        results.append((out, *torch.autograd.grad(out.square().sum(), params)))
    assert results[0][0].shape == (3, 7, vocab) and results[0][0].is_contiguous()
    for got, expected in zip(*results):
        torch.testing.assert_close(got, expected)


def test_vocab_projection_keeps_f_linear_off_cuda():
    """The padded product is for CUDA's kernels only: on a CPU, a training-sized input goes
    straight to F.linear (the CUDA path itself is checked by `make gpu-check`'s
    `families/vocab_projection`)."""
    from hf_lm.models.hflm_layers import (
        VocabProjection,
    )

    head = VocabProjection(16, 50, bias=False)
    head.aligned_linear = lambda *args: pytest.fail("padded product on a CPU")
    x = torch.randn(VocabProjection.ALIGN_MIN_ROWS, 16)
    torch.testing.assert_close(head(x), F.linear(x, head.weight))
    from gpu_cases import run_vocab_projection_case

    assert "no (CPU)" in run_vocab_projection_case("cpu", "no")


def test_vocab_projection_pads_only_a_plain_weight_in_eager_mode(monkeypatch):
    """A tensor subclass (a quantized or sharded weight) keeps F.linear, and so does a graph being
    compiled (inductor pads unaligned matmuls itself)."""
    from hf_lm.models.hflm_layers import (
        VocabProjection,
    )

    class Subclass(torch.Tensor):
        pass

    head = VocabProjection(16, 50)
    assert head._plain_weight()
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert not head._plain_weight()
    monkeypatch.undo()
    head.weight = torch.nn.Parameter(head.weight.detach().as_subclass(Subclass))
    assert not head._plain_weight()


def test_init_reaches_every_projection():
    """The role-specific inits apply in a freshly built model (transformers 5 skips `_init_weights` on
    parameter-less containers of remote-code models, so a container-level init would silently not run)."""
    from hf_lm import (
        HfLmBartConfig,
        HfLmBartForConditionalGeneration,
        HfLmGPTConfig,
        HfLmGPTForCausalLM,
        HfLmT5Config,
        HfLmT5ForConditionalGeneration,
    )

    torch.manual_seed(0)
    gpt = HfLmGPTForCausalLM(
        HfLmGPTConfig(vocab_size=100, hidden_size=256, num_hidden_layers=8, num_attention_heads=4)
    )
    block = gpt.model.layers[0]
    scaled = 0.02 / math.sqrt(2 * 8)  # GPT-2's residual projections
    assert block.self_attn.o_proj.weight.std().item() == pytest.approx(scaled, rel=0.05)
    assert block.mlp.down_proj.weight.std().item() == pytest.approx(scaled, rel=0.05)
    assert block.self_attn.query_key_value.weight.std().item() == pytest.approx(0.02, rel=0.05)
    # a post-norm stack is drawn as BERT and BART draw it: no residual scaling (a BART-style model
    # trained from scratch collapsed its encoder with it)
    for post_norm in (
        HfLmGPTForCausalLM(
            HfLmGPTConfig(
                vocab_size=100,
                hidden_size=256,
                num_hidden_layers=8,
                num_attention_heads=4,
                norm_position="post",
            )
        ).model.layers[0],
        HfLmBartForConditionalGeneration(
            HfLmBartConfig(vocab_size=100, hidden_size=256, num_hidden_layers=8, num_attention_heads=4)
        ).model.decoder.layers[0],
    ):
        assert post_norm.self_attn.o_proj.weight.std().item() == pytest.approx(0.02, rel=0.05)
        assert post_norm.mlp.down_proj.weight.std().item() == pytest.approx(0.02, rel=0.05)

    d, heads, ff = 128, 4, 512
    t5 = HfLmT5ForConditionalGeneration(
        HfLmT5Config(
            vocab_size=300,
            hidden_size=d,
            num_hidden_layers=2,
            num_attention_heads=heads,
            intermediate_size=ff,
        )
    )
    attn = t5.model.decoder.layers[0].self_attn
    cross = t5.model.decoder.layers[0].cross_attn
    head_dim = d // heads
    queries = attn.query_rows()  # the rows of the query heads, grouped with their keys and values
    assert attn.query_key_value.weight[queries].std().item() == pytest.approx(
        (d * head_dim) ** -0.5, rel=0.05
    )
    assert attn.query_key_value.weight[~queries].std().item() == pytest.approx(d**-0.5, rel=0.05)
    assert cross.q_proj.weight.std().item() == pytest.approx((d * head_dim) ** -0.5, rel=0.05)
    assert t5.model.decoder.layers[0].mlp.down_proj.weight.std().item() == pytest.approx(ff**-0.5, rel=0.05)
    assert t5.model.embed_tokens.weight.std().item() == pytest.approx(1.0, rel=0.05)
    # T5 decodes from <pad>: its embedding must be trainable, so no frozen padding row
    assert t5.model.embed_tokens.padding_idx is None
