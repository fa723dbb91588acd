"""flex_attention for every variant (issue 34, item 2).

The flex mask is a predicate on (batch, query, key) indices that reads per-row tensors (`FlexMask`),
and a `BlockMask` whose blocks are evaluated only where the pattern reaches. The fast tests check
the mask the `BlockMask` implies, element by element, against the dense mask eager and SDPA read
(`build_attention_mask`), for every pattern, causal and bidirectional, with padding, a prefix,
packed documents, a cache, a sliding-window cache and a static cache, and that the blocks evaluated
follow the pattern's density. The slow tests run the flex kernel through transformers'
`ALL_ATTENTION_FUNCTIONS["flex_attention"]` against hf_lm's eager reference for every entry of the
variant grids, forward and cached generation. Backward is not tested: torch 2.13 has no flex
backward on the CPU.
"""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_gpt_config
from test_sparse_attention import PATTERNS as SPARSE_PATTERNS

from hf_lm.models import hflm_masks
from hf_lm.models.hflm_masks import (
    AttentionPattern,
    FlexMask,
    build_attention_mask,
)
from hf_lm.testing import (
    BERT_VARIANTS,
    FAMILY_CASES,
    FEATURE_VARIANTS,
    GPT_VARIANTS,
    SPARSE_SETTINGS,
    VARIANT_CASES,
)

PATTERNS = ["dense", *SPARSE_PATTERNS]
SCENARIOS = ["plain", "left_pad", "right_pad", "prefix", "documents", "cached", "sliding", "static"]


def scenario(name: str, causal: bool, B: int = 2, T: int = 37):
    """Inputs of `build_attention_mask` for one situation: (padding, T, kv_len, past_len, offset,
    prefix_lengths, document_ids)."""
    kv_len, past_len, offset = T, 0, 0
    padding = prefix = docs = None
    if name == "left_pad":
        padding = torch.ones(B, T, dtype=torch.long)
        padding[1, :9] = 0
    elif name == "right_pad":
        padding = torch.ones(B, T, dtype=torch.long)
        padding[1, -11:] = 0
        padding[0, -1:] = 0
    elif name == "prefix":
        prefix = torch.tensor([5, 20])[:B]
    elif name == "documents":
        docs = torch.zeros(B, T, dtype=torch.long)
        docs[:, 12:] = 1
        docs[1, 30:] = 2
    elif name in ("cached", "sliding", "static"):
        # 5 new queries after 32 cached keys (the last 10 dropped by a sliding cache, or a static
        # cache's 8 empty slots after the queries, as padding)
        T, kv_len, past_len = 5, 37, 32
        padding = torch.ones(B, kv_len, dtype=torch.long)
        padding[1, :6] = 0
        if name == "sliding":
            offset = 10
        if name == "static":
            kv_len = 45
            padding = torch.cat([padding, torch.zeros(B, 8, dtype=torch.long)], dim=1)
            past_len = torch.tensor(32)
    return padding, T, kv_len, past_len, offset, prefix, docs


def dense_reference(pattern, padding, T, kv_len, past_len, offset, causal, prefix, docs, B=2):
    """(B, T, S) the mask eager and SDPA read, cut to the keys a sliding cache kept."""
    allowed, _ = build_attention_mask(
        padding,
        q_len=T,
        kv_len=kv_len,
        device=torch.device("cpu"),
        dtype=torch.float32,
        causal=causal,
        prefix_lengths=prefix,
        bias=None,
        past_len=past_len,
        document_ids=docs,
        pattern=pattern(padding, past_len, T, kv_len, causal, torch.device("cpu")),
    )
    if allowed is None:
        allowed = torch.ones(T, kv_len, dtype=torch.bool)
        allowed = allowed.tril(kv_len - T) if causal else allowed
    return allowed.expand(B, 1, T, kv_len)[:, 0, :, offset:]


def implied_mask(block_mask, flex: FlexMask, block: int) -> torch.Tensor:
    """(B, T, S) what flex_attention attends to: the full blocks, and the partial blocks' elements
    where the mask_mod holds; nothing elsewhere."""

    def listed(num, idx):
        nkb = idx.shape[-1]
        chosen = torch.arange(nkb)[None, None, :] < num[:, 0, :, None].long()  # (B, nqb, nkb)
        return torch.zeros_like(chosen).scatter(-1, idx[:, 0].long(), chosen)

    partial = listed(block_mask.kv_num_blocks, block_mask.kv_indices)
    full = listed(block_mask.full_kv_num_blocks, block_mask.full_kv_indices)
    assert not (partial & full).any()

    def elements(x):
        return x.repeat_interleave(block, 1).repeat_interleave(block, 2)  # (B, Tp, Sp)

    B, Tp, Sp = flex.batch, flex.q_key.shape[0], flex.key_real.shape[1]
    b, q, k = torch.arange(B)[:, None, None], torch.arange(Tp)[None, :, None], torch.arange(Sp)[None, None, :]
    mask = elements(full) | (elements(partial) & flex.mask_mod(b, 0, q, k))
    return mask[:, : flex.q_len, : flex.kv_len]


@pytest.mark.parametrize("block", [8, 128])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_the_block_mask_is_the_dense_mask(pattern, causal, block, monkeypatch):
    """Element by element, in every situation; blocks of 8 give several blocks per row."""
    monkeypatch.setattr(hflm_masks, "FLEX_BLOCK", block)
    monkeypatch.setattr(hflm_masks, "FLEX_CHUNK", 3 * block * block)  # several chunks
    config = tiny_gpt_config(attention_pattern=pattern, **SPARSE_SETTINGS)
    attention_pattern = AttentionPattern(config)
    for name in SCENARIOS:
        if name in ("cached", "sliding", "static") and not causal:
            continue  # only a decoder caches
        if name == "sliding" and config.sliding_window is None:
            continue  # a sliding cache is made for a local pattern only (its keys lie within the window)
        padding, T, kv_len, past_len, offset, prefix, docs = scenario(name, causal)
        expected = dense_reference(
            attention_pattern, padding, T, kv_len, past_len, offset, causal, prefix, docs
        )
        flex = FlexMask(
            attention_pattern,
            2,
            padding,
            T,
            kv_len,
            past_len,
            offset,
            causal,
            prefix,
            docs,
            torch.device("cpu"),
        )
        got = implied_mask(flex.block_mask(), flex, block)
        assert torch.equal(got, expected), f"{pattern}, {name}: {(got != expected).nonzero()[:5].tolist()}"


def test_a_query_with_no_key_sees_itself():
    """The global tokens (the first 2) in another document leave the second document nothing: it sees itself, as the dense mask says."""
    config = tiny_gpt_config(attention_pattern="global", **SPARSE_SETTINGS)
    docs = torch.tensor([[0] * 6 + [1] * 6])
    pattern = AttentionPattern(config)
    flex = FlexMask(pattern, 1, None, 12, 12, 0, 0, True, None, docs, torch.device("cpu"))
    block_mask = flex.block_mask()
    assert flex.self_fallback[0, :12].tolist() == [False] * 6 + [True] * 6
    expected = dense_reference(pattern, None, 12, 12, 0, 0, True, None, docs, B=1)
    assert torch.equal(implied_mask(block_mask, flex, 128), expected)


def test_a_band_evaluates_only_the_blocks_it_reaches():
    """At 4,096 tokens a band of 100 reaches 2 key blocks per query block (its own and the one
    before): 32 + 31 of the 32 x 33 / 2 = 528 causal blocks are evaluated, not T x S elements."""
    config = tiny_gpt_config(attention_pattern="band", attention_window=100)
    T = 4096
    flex = FlexMask(AttentionPattern(config), 1, None, T, T, 0, 0, True, None, None, torch.device("cpu"))
    assert int(flex.blocks().sum()) == 32 + 31
    block_mask = flex.block_mask()
    assert int(block_mask.kv_num_blocks.sum() + block_mask.full_kv_num_blocks.sum()) == 32 + 31
    dense = AttentionPattern(tiny_gpt_config())  # a causal mask: every block on and below the diagonal
    causal = FlexMask(dense, 1, None, T, T, 0, 0, True, None, None, torch.device("cpu")).block_mask()
    assert int(causal.full_kv_num_blocks.sum()) == 32 * 31 // 2 and int(causal.kv_num_blocks.sum()) == 32


# ----------------------------------------------------------------------------------------------
# The kernel, through transformers' flex_attention_forward, against eager
# ----------------------------------------------------------------------------------------------


def main_output(out) -> torch.Tensor:
    return next(value for key, value in out.items() if key != "loss" and torch.is_tensor(value))


def run(model, batch, impl: str) -> torch.Tensor:
    model.config._attn_implementation_internal = impl
    with torch.no_grad():
        return main_output(model(**batch))


def grid_names() -> set[str]:
    """The case of every entry of the grids; a grid's default entry is its family's default case."""
    gpt = {*GPT_VARIANTS, *FEATURE_VARIANTS["gpt"]} - {"gpt2"}
    bert = {*BERT_VARIANTS, *FEATURE_VARIANTS["bert"]} - {"bert"}
    names = {f"gpt-causal-lm-{name}" for name in gpt} | {f"bert-mlm-{name}" for name in bert}
    return names | {"gpt-causal-lm", "bert-mlm"}


GRID_CASES = [case for case in FAMILY_CASES + VARIANT_CASES if case.name in grid_names()]


def test_the_grid_cases_are_found():
    assert len(GRID_CASES) == len(grid_names())


@pytest.mark.slow
@pytest.mark.parametrize("case", GRID_CASES, ids=str)
def test_every_variant_on_flex_equals_eager(case):
    """Forward, and for the causal LMs the decoding steps of generate()."""
    model = case.make_model(seed=0)
    batch = case.make_batch()
    torch.testing.assert_close(
        run(model, batch, "flex_attention"), run(model, batch, "eager"), rtol=1e-5, atol=1e-5
    )
    if case.generates:
        prompt = {k: batch[k] for k in ("input_ids", "attention_mask") if k in batch}
        model.config._attn_implementation_internal = "eager"
        expected = model.generate(**prompt, max_new_tokens=3, do_sample=False)
        model.config._attn_implementation_internal = "flex_attention"
        torch.testing.assert_close(model.generate(**prompt, max_new_tokens=3, do_sample=False), expected)


@pytest.mark.slow
@pytest.mark.parametrize("pattern", PATTERNS[1:])
def test_every_pattern_on_flex_equals_eager(pattern):
    """A left-padded GPT batch with packed documents and a prefix, forward; then cached generation."""
    torch.manual_seed(0)
    config = tiny_gpt_config(attention_pattern=pattern, **SPARSE_SETTINGS)
    from hf_lm import HfLmGPTForCausalLM

    model = HfLmGPTForCausalLM(config).eval()
    ids = torch.randint(3, 97, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, :3] = 0
    docs = torch.tensor([[0] * 7 + [1] * 5, [0] * 12])
    for extra in ({}, {"document_ids": docs}, {"prefix_lengths": torch.tensor([4, 6])}):
        batch = dict(input_ids=ids, attention_mask=mask, use_cache=False, **extra)
        torch.testing.assert_close(
            run(model, batch, "flex_attention"),
            run(model, batch, "eager"),
            rtol=1e-5,
            atol=1e-5,
            msg=str(extra),
        )
    model.config._attn_implementation_internal = "eager"
    expected = model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False)
    model.config._attn_implementation_internal = "flex_attention"
    torch.testing.assert_close(
        model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False), expected
    )


# ----------------------------------------------------------------------------------------------
# Score biases computed per score: ALiBi and T5 buckets as flex_attention's score_mod reads them
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("position", ["alibi", "relative_buckets"])
def test_a_score_bias_indexes_as_the_dense_bias(position, causal):
    """`score_bias(...)[b, h, q, k]` is `attention_bias(...)[b, h, q, k]`: left-padded positions, a
    cache (past keys), and a sliding cache's dropped keys (`key_offset`)."""
    from hf_lm.models.hflm_positions import POSITION_ENCODINGS, key_positions, real_token_positions

    config = tiny_gpt_config(position_embedding_type=position, relative_attention_num_buckets=8)
    positions = POSITION_ENCODINGS[position](config, causal=causal)
    torch.nn.init.normal_(getattr(positions, "bias", torch.nn.Embedding(1, 1)).weight)
    B, past, T, offset = 2, 3, 4, 2
    S = past + T
    padding = torch.ones(B, S, dtype=torch.long)
    padding[1, :2] = 0
    q_pos = real_token_positions(padding, past, T, padding.device)
    k_pos = key_positions(q_pos, padding, past, S, padding.device)
    dense = positions.attention_bias(T, S, past, "cpu", torch.float32, q_pos, k_pos)[..., offset:]
    dense = dense.expand(B, -1, -1, -1)
    scores = positions.score_bias(B, past, q_pos, k_pos, offset)
    b, h, q, k = torch.meshgrid(*(torch.arange(n) for n in dense.shape), indexing="ij")
    torch.testing.assert_close(scores[b, h, q, k].float(), dense, rtol=0, atol=1e-6)
    torch.testing.assert_close(
        scores.select_heads(1, 2)[b[:, :2], h[:, :2], q[:, :2], k[:, :2]].float(), dense[:, 1:3]
    )


@pytest.mark.slow
@pytest.mark.parametrize("position", ["alibi", "relative_buckets"])
def test_flex_builds_no_dense_bias(position, monkeypatch):
    """flex_attention gets ALiBi and T5 biases per score: the dense (nh, T, S) table is never built,
    and the logits and generation equal eager's."""
    from hf_lm import HfLmGPTForCausalLM

    torch.manual_seed(0)
    model = HfLmGPTForCausalLM(tiny_gpt_config(position_embedding_type=position)).eval()
    ids = torch.randint(3, 97, (2, 9))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    with torch.no_grad():
        reference = model(ids, attention_mask=mask).logits
        expected = model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False)

    def refuse(*args, **kwargs):
        raise AssertionError("a dense bias was built for flex_attention")

    monkeypatch.setattr(type(model.model.positions), "attention_bias", refuse)
    model.set_attn_implementation("flex_attention")
    with torch.no_grad():
        got = model(ids, attention_mask=mask).logits
        generated = model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False)
    torch.testing.assert_close(got[mask.bool()], reference[mask.bool()], rtol=1e-5, atol=1e-5)
    assert torch.equal(generated, expected)
