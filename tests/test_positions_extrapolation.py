"""Positions for length extrapolation: ALiBi measured between positions, and xPos.

ALiBi (Press et al., 2022) penalizes a score by the distance between the query's and the key's
positions. These tests check it against the formula written out, on a block packed from two
documents whose positions restart (each document gets the logits it has alone), on padding handled
through `position_ids`, with the cache, and that the default (unpacked) behaviour is bit-identical
to the former key-index implementation. xPos (Sun et al., 2022) is checked against its formula
written with complex numbers, with the cache, and its validation.
"""

import math

import pytest
import torch
from conftest import tiny_gpt_config

from hf_lm import (
    HfLmBartConfig,
    HfLmBertConfig,
    HfLmBertModel,
    HfLmGPTConfig,
    HfLmGPTForCausalLM,
    HfLmT5Config,
)
from hf_lm.models.hflm_attention import apply_rotary
from hf_lm.models.hflm_positions import (
    ALiBiPositions,
    XPosPositions,
    alibi_slopes,
)

V = 97


def gpt(**overrides) -> HfLmGPTForCausalLM:
    # a wide init, so that a wrong bias changes the logits visibly
    return HfLmGPTForCausalLM(tiny_gpt_config(initializer_range=0.2, **overrides)).eval()


def ids(batch: int, length: int, low: int = 3) -> torch.Tensor:
    return torch.randint(low, V, (batch, length))


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------- ALiBi


@pytest.mark.parametrize("causal", [True, False])
def test_alibi_bias_is_the_formula_on_positions(causal):
    """bias[b, h, i, j] = -slope_h * (p_i - q_j), clamped at 0 (causal) or absolute (bidirectional)."""
    alibi = ALiBiPositions(tiny_gpt_config(position_embedding_type="alibi"), causal=causal)
    queries = torch.tensor([[0, 1, 2, 0, 1], [4, 5, 0, 1, 2]])
    keys = torch.tensor([[0, 1, 2, 0, 1, 2, 3], [9, 4, 5, 0, 1, 2, 7]])
    bias = alibi.attention_bias(5, 7, 2, "cpu", torch.float32, queries, keys)
    slopes = alibi_slopes(4).tolist()
    expected = torch.empty(2, 4, 5, 7)
    for b in range(2):
        for h in range(4):
            for i in range(5):
                for j in range(7):
                    d = queries[b, i].item() - keys[b, j].item()
                    expected[b, h, i, j] = -slopes[h] * (max(d, 0) if causal else abs(d))
    torch.testing.assert_close(bias, expected)


def test_alibi_packed_documents_match_each_document_alone():
    """Two documents packed into one block, positions restarting, with the loop's document mask:
    each document's logits are those it has alone (in key-index space the second document's
    distances were right, but only by accident of contiguity: with a cache the first token of the
    second document saw distances from the block's start)."""
    model = gpt(position_embedding_type="alibi")
    a, b = ids(1, 6), ids(1, 9)
    packed = torch.cat([a, b], dim=1)
    docs = torch.tensor([[0] * 6 + [1] * 9])
    positions = torch.cat([torch.arange(6), torch.arange(9)])[None]
    with torch.no_grad():
        alone_a, alone_b = model(a).logits, model(b).logits
        for impl in ("sdpa", "eager"):
            model.config._attn_implementation = impl
            out = model(packed, document_ids=docs, position_ids=positions).logits
            close(out[:, :6], alone_a)
            close(out[:, 6:], alone_b)
        # a second document on its own row, packed after a longer first one, in a batch
        c = ids(1, 3)
        batch = torch.cat([packed, torch.cat([c, ids(1, 12)], dim=1)])
        docs2 = torch.cat([docs, torch.tensor([[0] * 3 + [1] * 12])])
        positions2 = torch.cat([positions, torch.cat([torch.arange(3), torch.arange(12)])[None]])
        out = model(batch, document_ids=docs2, position_ids=positions2).logits
        close(out[:1, 6:], alone_b)
        close(out[1:, :3], model(c).logits)


@pytest.mark.parametrize("causal", [True, False])
def test_alibi_distances_follow_positions_through_padding(causal):
    """Tokens spread out by padding in the middle, their positions given, attend as when they are
    adjacent, in GPT (causal) and BERT (bidirectional). In key-index space the padding between
    them counted as distance."""
    if causal:
        model = gpt(position_embedding_type="alibi")
    else:
        model = HfLmBertModel(HfLmBertConfig(
            vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64, position_embedding_type="alibi", initializer_range=0.2,
        )).eval()  # fmt: skip
    x = ids(1, 6)
    spread = torch.cat([x[:, :3], torch.zeros(1, 4, dtype=torch.long), x[:, 3:]], dim=1)  # (1, 10)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0, 0, 1, 1, 1]])
    positions = torch.tensor([[0, 1, 2, 0, 0, 0, 0, 3, 4, 5]])
    with torch.no_grad():
        alone = model(x)[0]
        out = model(spread, attention_mask=mask, position_ids=positions)[0]
    close(out[:, mask[0].bool()], alone)


def test_alibi_left_padding_equals_unpadded():
    """Left padding, default positions and generate()'s positions (padding at 1): the real tokens'
    logits and the greedy continuation are those of each sequence alone."""
    model = gpt(position_embedding_type="alibi")
    short, long = ids(1, 4), ids(1, 9)
    batch = torch.cat([torch.cat([torch.zeros(1, 5, dtype=torch.long), short], dim=1), long])
    mask = torch.cat([torch.tensor([[0] * 5 + [1] * 4]), torch.ones(1, 9, dtype=torch.long)])
    gen_positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    with torch.no_grad():
        for position_ids in (None, gen_positions):
            out = model(batch, attention_mask=mask, position_ids=position_ids).logits
            close(out[:1, 5:], model(short).logits)
            close(out[1:], model(long).logits)
        kwargs = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
        together = model.generate(batch, attention_mask=mask, **kwargs)
        assert together[0, 5:].tolist() == model.generate(short, **kwargs)[0].tolist()
        assert together[1].tolist() == model.generate(long, **kwargs)[0].tolist()


@pytest.mark.parametrize("scheme", ["alibi", "xpos"])
def test_cached_equals_uncached(scheme):
    """Prefill then one token at a time through the cache gives the logits of one full forward,
    left-padded and with explicit positions starting elsewhere than 0; generate() agrees too."""
    model = gpt(position_embedding_type=scheme, xpos_scale_base=8)
    x = ids(2, 12)
    mask = torch.ones_like(x)
    mask[0, :3] = 0  # left padding
    for offset in (0, 5):
        positions = (mask.cumsum(-1) - 1).clamp(min=0) + offset
        with torch.no_grad():
            full = model(x, attention_mask=mask, position_ids=positions).logits
            out = model(x[:, :7], attention_mask=mask[:, :7], position_ids=positions[:, :7], use_cache=True)
            steps, cache = [out.logits], out.past_key_values
            for t in range(7, 12):
                out = model(x[:, t : t + 1], attention_mask=mask[:, : t + 1], position_ids=positions[:, t : t + 1],
                            past_key_values=cache, use_cache=True)  # fmt: skip
                steps.append(out.logits)
        real = mask.bool()
        close(torch.cat(steps, dim=1)[real], full[real])
    kwargs = dict(attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        assert torch.equal(
            model.generate(x, use_cache=True, **kwargs), model.generate(x, use_cache=False, **kwargs)
        )


def _key_index_alibi(self, q_len, kv_len, past_len, device, dtype, position_ids=None, key_position_ids=None):
    """The former ALiBi bias, in key-index space: the reference for the default behaviour."""
    slopes = alibi_slopes(self.num_heads).to(device)
    q_pos = torch.arange(q_len, device=device) + past_len
    k_pos = torch.arange(kv_len, device=device)
    distance = q_pos[:, None] - k_pos[None, :]
    distance = (distance.clamp(min=0) if self.causal else distance.abs()).float()
    return (-slopes[:, None, None] * distance)[None].to(dtype)


def test_alibi_default_unchanged_bit_identical(monkeypatch):
    """Unpacked inputs without explicit positions (with and without cache, causal and
    bidirectional): the logits are bitwise those of the former key-index bias."""
    torch.manual_seed(0)
    model = gpt(position_embedding_type="alibi", num_key_value_heads=2)
    bert = HfLmBertModel(HfLmBertConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        position_embedding_type="alibi", initializer_range=0.2,
    )).eval()  # fmt: skip
    x = ids(2, 10)

    def outputs():
        with torch.no_grad():
            prefill = model(x[:, :6], use_cache=True)
            step = model(x[:, 6:], past_key_values=prefill.past_key_values, use_cache=True).logits
            return model(x).logits, prefill.logits, step, bert(x).last_hidden_state

    new = outputs()
    monkeypatch.setattr(ALiBiPositions, "attention_bias", _key_index_alibi)
    for got, old in zip(new, outputs()):
        assert torch.equal(got, old)


# ---------------------------------------------------------------------------------------------- xPos


def test_xpos_matches_the_paper_formula():
    """Each pair of dims (j, j + hs/2) is a complex number: the query at position n becomes
    q * e^(i n theta_j) * zeta_j^(n/B), the key at m becomes k * e^(i m theta_j) * zeta_j^(-m/B),
    zeta_j = (2j/hs + 0.4) / 1.4, theta_j = base^(-2j/hs) (Sun et al., 2022, eq. 6-8)."""
    config = tiny_gpt_config(position_embedding_type="xpos", xpos_scale_base=32, head_dim=8)
    xpos = XPosPositions(config)
    hs, base, theta = 8, 32, config.rope_theta
    positions = torch.tensor([[0, 3, 17, 40]])
    cos, sin, key_cos, key_sin = xpos.position_embeddings(positions, torch.float64)
    q, k = torch.randn(1, 2, 4, hs, dtype=torch.float64), torch.randn(1, 2, 4, hs, dtype=torch.float64)
    q_rot, k_rot = apply_rotary(q, cos, sin), apply_rotary(k, key_cos, key_sin)
    for t, n in enumerate(positions[0].tolist()):
        for j in range(hs // 2):
            zeta = (2 * j / hs + 0.4) / 1.4
            turn = complex(math.cos(n * theta ** (-2 * j / hs)), math.sin(n * theta ** (-2 * j / hs)))
            for x, rot, sign in ((q, q_rot, 1), (k, k_rot, -1)):
                z = complex(x[0, 0, t, j], x[0, 0, t, j + hs // 2]) * turn * zeta ** (sign * n / base)
                got = complex(rot[0, 0, t, j], rot[0, 0, t, j + hs // 2])
                assert abs(got - z) < 1e-5 * max(1.0, abs(z))
    # a score depends on the distance only: shifting both positions changes nothing
    shifted = xpos.position_embeddings(positions + 100, torch.float64)
    q2, k2 = apply_rotary(q, *shifted[:2]), apply_rotary(k, *shifted[2:])
    torch.testing.assert_close(
        q_rot @ k_rot.transpose(-1, -2), q2 @ k2.transpose(-1, -2), rtol=1e-5, atol=1e-5
    )


def test_xpos_validation_and_save_load(tmp_path):
    with pytest.raises(ValueError, match="xpos_scale_base"):
        tiny_gpt_config(position_embedding_type="xpos", xpos_scale_base=0)
    with pytest.raises(ValueError, match="head_dim"):
        tiny_gpt_config(position_embedding_type="xpos", hidden_size=36, num_attention_heads=4)
    for config_class in (HfLmBertConfig, HfLmT5Config, HfLmBartConfig):  # a bidirectional encoder
        with pytest.raises(ValueError, match="`position_embedding_type`='xpos' is for causal stacks"):
            config_class(vocab_size=V, hidden_size=32, num_attention_heads=4, position_embedding_type="xpos")
    with pytest.raises(ValueError, match="position_embedding_type='xpos'"):  # the module checks it too
        XPosPositions(tiny_gpt_config(position_embedding_type="xpos"), causal=False)
    model = gpt(position_embedding_type="xpos", xpos_scale_base=24)
    model.save_pretrained(tmp_path)
    loaded = HfLmGPTForCausalLM.from_pretrained(tmp_path).eval()
    assert isinstance(loaded.config, HfLmGPTConfig) and loaded.config.xpos_scale_base == 24
    x = ids(1, 80)  # longer than max_position_embeddings: xPos has no table
    with torch.no_grad():
        torch.testing.assert_close(loaded(x).logits, model(x).logits)
