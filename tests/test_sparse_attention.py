"""Sparse attention patterns (`attention_pattern`): global, band, dilated, random, block-local and their
unions (Longformer's "band+global", BigBird's "band+global+random").

Every check compares against `reference_allowed`, a brute-force mask written here with explicit loops
from the documented rule of each pattern (only the random pattern's 31-bit hash is the documented
formula, retyped in plain Python): the mask the one builder makes, the eager attention weights
(zero exactly outside the pattern, positive inside), and the outputs of a one-layer model (a key
outside a query's pattern can change without changing that query's output). With padding, with the
KV cache (dynamic, sliding-window and static), for GPT, BERT and the T5/BART encoder.
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import tiny_gpt_config
from simulated_device import simulated_device, to_cpu
from transformers import DynamicCache, StaticCache
from transformers.cache_utils import DynamicSlidingWindowLayer

from hf_lm import (
    HfLmBartConfig,
    HfLmBartForConditionalGeneration,
    HfLmBertConfig,
    HfLmBertModel,
    HfLmGPTConfig,
    HfLmGPTForCausalLM,
    HfLmT5Config,
    HfLmT5ForConditionalGeneration,
    kv_cache_bytes,
)
from hf_lm.models.hflm_masks import (
    AttentionPattern,
    build_attention_mask,
)
from hf_lm.testing import SPARSE_SETTINGS

# small settings, so a 12-token row shows every pattern's edges
SETTINGS = SPARSE_SETTINGS
PATTERNS = [
    "global",
    "band",
    "dilated",
    "random",
    "block",
    "band+global",
    "band+global+random",
    "dilated+block",
]
SIZES = dict(vocab_size=97, hidden_size=32, num_attention_heads=4, max_position_embeddings=64)


# ----------------------------------------------------------------------------------------------
# The brute-force reference
# ----------------------------------------------------------------------------------------------


def reference_hash(q: int, k: int, seed: int) -> int:
    """`hflm_masks.position_hash`'s documented formula, in Python integers."""
    m = 2**31 - 1
    x = ((seed & m) ^ q) * 0x2545F491 & m
    x = (x ^ (x >> 13) ^ k) * 0x5BD1E995 & m
    x = (x ^ (x >> 16)) * 0x2545F491 & m
    return x ^ (x >> 15)


def in_pattern(part: str, q: int, k: int, candidates: list[int], s: dict) -> bool:
    """Whether the query at real position q may see the key at real position k under one part."""
    distance = abs(q - k)
    if part == "global":
        return q < s["num_global_tokens"] or k < s["num_global_tokens"]
    if part == "band":
        return distance <= s["attention_window"]
    if part == "dilated":
        d = s["attention_dilation"]
        return distance <= s["attention_window"] * d and distance % d == 0
    if part == "block":
        return q // s["attention_block_size"] == k // s["attention_block_size"]
    assert part == "random"
    ranked = sorted(candidates, key=lambda c: (reference_hash(q, c, s["attention_random_seed"]), c))
    return k in ranked[: s["num_random_keys"]]


def reference_allowed(pattern: str, real: list[int], causal: bool, s: dict = SETTINGS) -> torch.Tensor:
    """(S, S) bool: may the query at index i see the key at index j, for the real tokens of one row
    (`real`: its 0/1 padding mask). Padding queries are left all False (they are not checked)."""
    n = len(real)
    position, count = [0] * n, 0
    for j in range(n):
        position[j] = count
        count += real[j]
    allowed = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        if not real[i]:
            continue
        keys = [j for j in range(n) if real[j] and (j <= i or not causal)]
        candidates = [position[j] for j in keys]
        for j in keys:
            allowed[i, j] = any(
                in_pattern(part, position[i], position[j], candidates, s) for part in pattern.split("+")
            )
    return allowed


# ----------------------------------------------------------------------------------------------
# Models
# ----------------------------------------------------------------------------------------------


def gpt(pattern: str, layers: int = 2, **kw) -> HfLmGPTForCausalLM:
    config = tiny_gpt_config(attention_pattern=pattern, num_hidden_layers=layers, **{**SETTINGS, **kw})
    return HfLmGPTForCausalLM(config).eval()


def bert(pattern: str, layers: int = 2) -> HfLmBertModel:
    config = HfLmBertConfig(**SIZES, num_hidden_layers=layers, attention_pattern=pattern, **SETTINGS)
    return HfLmBertModel(config).eval()


def seq2seq(kind: str, pattern: str, layers: int = 2):
    cls, config_cls = {
        "t5": (HfLmT5ForConditionalGeneration, HfLmT5Config),
        "bart": (HfLmBartForConditionalGeneration, HfLmBartConfig),
    }[kind]
    config = config_cls(**SIZES, num_hidden_layers=layers, attention_pattern=pattern, **SETTINGS)
    return cls(config).eval()


def self_attention_weights(family: str, model, ids, mask) -> tuple:
    """The eager self-attention weights of every layer, (B, nh, T, S) each, and whether causal."""
    if family == "gpt":
        return model(ids, attention_mask=mask, output_attentions=True).attentions, True
    if family == "bert":
        return model(ids, attention_mask=mask, output_attentions=True).attentions, False
    encoder = model.get_encoder()
    return encoder(ids, attention_mask=mask, output_attentions=True).attentions, False


def last_hidden(family: str, model, ids, mask) -> torch.Tensor:
    if family == "gpt":
        return model.model(ids, attention_mask=mask, use_cache=False).last_hidden_state
    if family == "bert":
        return model(ids, attention_mask=mask).last_hidden_state
    return model.get_encoder()(ids, attention_mask=mask).last_hidden_state


FAMILIES = {
    "gpt": gpt,
    "bert": bert,
    "t5_encoder": lambda pattern, layers=2: seq2seq("t5", pattern, layers),
    "bart_encoder": lambda pattern, layers=2: seq2seq("bart", pattern, layers),
}


def padded_batch(family: str, T: int = 12):
    """Two rows: one full, one padded (left for the decoder, as generate() pads; right for encoders)."""
    ids = torch.randint(3, 97, (2, T))
    mask = torch.ones(2, T, dtype=torch.long)
    if family == "gpt":
        mask[1, :3] = 0
    else:
        mask[1, -3:] = 0
    return ids, mask


# ----------------------------------------------------------------------------------------------
# The mask and the behaviour, against the brute force
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_the_built_mask_is_the_brute_force_mask(pattern, causal):
    config = tiny_gpt_config(attention_pattern=pattern, **SETTINGS)
    rows = [[1] * 13, [0, 0, 0] + [1] * 10, [1] * 9 + [0] * 4]
    mask = torch.tensor(rows)
    built, _ = build_attention_mask(
        mask,
        q_len=13,
        kv_len=13,
        device=mask.device,
        dtype=torch.float32,
        causal=causal,
        pattern=AttentionPattern(config)(mask, 0, 13, 13, causal, mask.device),
    )
    for b, row in enumerate(rows):
        real = torch.tensor(row, dtype=torch.bool)
        expected = reference_allowed(pattern, row, causal)
        assert torch.equal(built[b, 0][real], expected[real]), (pattern, row)


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_attention_weights_are_zero_exactly_outside_the_pattern(family, pattern):
    model = FAMILIES[family](pattern)
    ids, mask = padded_batch(family)
    with torch.no_grad():
        weights, causal = self_attention_weights(family, model, ids, mask)
    for b in range(2):
        real = mask[b].bool()
        expected = reference_allowed(pattern, mask[b].tolist(), causal)[real][:, real]
        for layer in weights:
            seen = layer[b][:, real][:, :, real] > 0  # (nh, T_real, S_real)
            assert torch.equal(seen, expected.expand_as(seen)), (family, pattern, b)


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_key_outside_the_pattern_does_not_change_the_query(family, pattern):
    """One layer: changing every token a query may not see leaves its output as it was; changing
    one it may see does not."""
    model = FAMILIES[family](pattern, layers=1)
    ids, mask = padded_batch(family)
    row, causal = 1, family == "gpt"
    allowed = reference_allowed(pattern, mask[row].tolist(), causal)
    real = [i for i in range(ids.shape[1]) if mask[row, i]]

    def keys(i: int, visible: bool) -> list[int]:  # earlier keys only, for a causal query
        return [j for j in real if j != i and (j < i or not causal) and bool(allowed[i, j]) == visible]

    # the query with the most keys hidden from it, among those that also see another key
    query = max((i for i in real if keys(i, True)), key=lambda i: len(keys(i, False)))
    hidden, seen = keys(query, False), keys(query, True)
    assert hidden, (pattern, query)
    with torch.no_grad():
        before = last_hidden(family, model, ids, mask)[row, query]
        changed = ids.clone()
        changed[row, hidden] = (ids[row, hidden] + 1 - 3) % 94 + 3  # another token id
        after = last_hidden(family, model, changed, mask)[row, query]
        torch.testing.assert_close(after, before, atol=1e-6, rtol=0)
        changed[row, seen[0]] = (ids[row, seen[0]] + 1 - 3) % 94 + 3
        assert not torch.allclose(last_hidden(family, model, changed, mask)[row, query], before, atol=1e-4)


def test_a_pattern_wider_than_the_input_is_dense():
    """A band reaching every key gives the dense model's outputs (through the masked path)."""
    dense, band = gpt("dense"), gpt("band", attention_window=64)
    band.load_state_dict(dense.state_dict())
    ids, mask = padded_batch("gpt")
    with torch.no_grad():
        torch.testing.assert_close(
            band(ids, attention_mask=mask).logits,
            dense(ids, attention_mask=mask).logits,
            atol=1e-5,
            rtol=1e-5,
        )
    assert AttentionPattern(dense.config)(None, 0, 4, 4, True, torch.device("cpu")) is None


def test_the_random_pattern_follows_its_seed():
    config = tiny_gpt_config(attention_pattern="random", **SETTINGS)
    mask = torch.ones(1, 16, dtype=torch.long)
    cpu = torch.device("cpu")
    first = AttentionPattern(config)(mask, 0, 16, 16, False, cpu)
    assert torch.equal(first, AttentionPattern(config)(mask, 0, 16, 16, False, cpu))
    assert (first.sum(-1) == SETTINGS["num_random_keys"]).all()  # exactly r keys per query
    other = tiny_gpt_config(attention_pattern="random", **{**SETTINGS, "attention_random_seed": 8})
    assert not torch.equal(first, AttentionPattern(other)(mask, 0, 16, 16, False, cpu))


# ----------------------------------------------------------------------------------------------
# The KV cache: cached decoding equals recomputing everything, and a local pattern's cache slides
# ----------------------------------------------------------------------------------------------


def recompute_greedy(model, ids, mask, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding that runs the whole sequence again at every step, without a cache: the
    tokens and each step's (B, V) logits."""
    all_logits = []
    for _ in range(steps):
        logits = model(ids, attention_mask=mask, use_cache=False).logits[:, -1]
        all_logits.append(logits)
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
    return ids, torch.stack(all_logits, 1)


def assert_generate_equals_recompute(model, steps: int, **kwargs):
    """Greedy generate() on a left-padded batch gives the tokens, and the logits at every step, of
    `recompute_greedy`; returns generate()'s output."""
    ids, mask = padded_batch("gpt", T=6)
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=steps,
            do_sample=False,
            pad_token_id=0,
            return_dict_in_generate=True,
            output_logits=True,
            **kwargs,
        )
        tokens, logits = recompute_greedy(model, ids, mask, steps)
    assert torch.equal(out.sequences, tokens)
    # the logits too: a tiny random model's argmax hardly depends on attention
    torch.testing.assert_close(torch.stack(out.logits, 1), logits, atol=1e-5, rtol=1e-5)
    return out


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_generate_equals_full_recompute_at_every_step(pattern, cache):
    kwargs = {"cache_implementation": "static"} if cache == "static" else {}
    assert_generate_equals_recompute(gpt(pattern), 14, **kwargs)


@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "rope", "alibi", "none"])
def test_sliding_cache_generation_with_every_position_scheme(positions):
    """ALiBi's bias and the positions are computed over every token, then cut to the kept keys."""
    out = assert_generate_equals_recompute(gpt("band", position_embedding_type=positions), 10)
    assert isinstance(out.past_key_values.layers[0], DynamicSlidingWindowLayer)


@pytest.mark.parametrize("pattern", ["band", "band+global+random"])
def test_beam_search_and_sampling_with_the_cache_equal_them_without(pattern):
    """Beam search reorders the sliding cache; seeded sampling draws the same tokens."""
    model = gpt(pattern)
    ids, mask = padded_batch("gpt", T=6)
    with torch.no_grad():
        for kwargs in ({"num_beams": 3}, {"do_sample": True, "top_k": 20}):
            runs = []
            for use_cache in (True, False):
                torch.manual_seed(0)
                runs.append(
                    model.generate(
                        ids,
                        attention_mask=mask,
                        max_new_tokens=12,
                        pad_token_id=0,
                        use_cache=use_cache,
                        **kwargs,
                    )
                )
            assert torch.equal(*runs), kwargs


@pytest.mark.parametrize("pattern", ["band", "dilated+block", "band+global+random"])
def test_cached_forward_in_chunks_equals_one_uncached_forward(pattern):
    """Prefill, then one token, then a chunk of five (a chunk larger than one step of a sliding
    cache that is already full), then single tokens: the logits of one uncached pass."""
    model = gpt(pattern)
    ids, mask = padded_batch("gpt", T=20)
    with torch.no_grad():
        full = model(ids, attention_mask=mask, use_cache=False).logits
        cache, pieces, start = None, [], 0
        for stop in (8, 9, 14, 15, 16, 20):
            out = model(
                ids[:, start:stop], attention_mask=mask[:, :stop], past_key_values=cache, use_cache=True
            )
            cache, start = out.past_key_values, stop
            pieces.append(out.logits)
    real = mask.bool()
    torch.testing.assert_close(torch.cat(pieces, 1)[real], full[real], atol=1e-5, rtol=1e-5)


def test_band_decoding_keeps_only_the_window():
    """generate()'s cache for a band model is transformers' sliding-window cache: w keys per layer
    (the new token makes w + 1); with global tokens every key stays."""
    band = gpt("band")
    assert band.config.sliding_window == SETTINGS["attention_window"] + 1
    ids = torch.randint(3, 97, (1, 5))
    with torch.no_grad():
        out = band.generate(ids, max_new_tokens=20, do_sample=False, return_dict_in_generate=True)
    cache = out.past_key_values
    assert all(isinstance(layer, DynamicSlidingWindowLayer) for layer in cache.layers)
    assert cache.layers[0].keys.shape[-2] == SETTINGS["attention_window"]
    assert cache.get_seq_length() == 24  # the count still runs from the first token
    assert kv_cache_bytes(band.config, 1, 24, torch.float32) == sum(
        t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values)
    )
    longformer = gpt("band+global")
    assert longformer.config.sliding_window is None
    with torch.no_grad():
        out = longformer.generate(ids, max_new_tokens=20, do_sample=False, return_dict_in_generate=True)
    assert out.past_key_values.layers[0].keys.shape[-2] == 24
    # the static cache made from the config slides too
    static = StaticCache(config=band.config, max_cache_len=64)
    assert static.layers[0].max_cache_len == SETTINGS["attention_window"] + 1
    # forward(use_cache=True) without a cache makes the same sliding cache generate() makes
    assert isinstance(band(ids, use_cache=True).past_key_values.layers[0], DynamicSlidingWindowLayer)
    assert not any(
        isinstance(layer, DynamicSlidingWindowLayer)
        for layer in DynamicCache(config=gpt("dense").config).layers
    )


@pytest.mark.parametrize("kind", ["t5", "bart"])
def test_seq2seq_encoder_is_sparse_and_the_decoder_dense(kind):
    model = seq2seq(kind, "band+global+random")
    assert not hasattr(model.config, "sliding_window")  # the decoder's cache keeps every key
    src, src_mask = padded_batch("encoder")
    tgt = torch.randint(3, 97, (2, 7))
    with torch.no_grad():
        out = model(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt, output_attentions=True)
        causal = torch.ones(7, 7, dtype=torch.bool).tril()
        for layer in out.decoder_attentions:
            assert torch.equal(layer > 0, causal.expand_as(layer))
        # cached generation equals the decoder run again on the whole prefix at each step
        generated = model.generate(src, attention_mask=src_mask, max_new_tokens=8, do_sample=False)
        prefix = generated[:, :1]
        for _ in range(generated.shape[1] - 1):
            logits = model(
                input_ids=src, attention_mask=src_mask, decoder_input_ids=prefix, use_cache=False
            ).logits
            prefix = torch.cat([prefix, logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(generated, prefix)


# ----------------------------------------------------------------------------------------------
# Config, save/load, remote code, devices
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("attention_pattern", "sliding"),
        ("attention_pattern", "band+band"),
        ("attention_pattern", "dense+band"),
        ("attention_pattern", "band+"),
        ("attention_pattern", ""),
        ("attention_pattern", None),
        ("attention_window", 0),
        ("attention_dilation", 1.5),
        ("num_global_tokens", -1),
        ("attention_block_size", True),
        ("num_random_keys", 0),
        ("attention_random_seed", -1),
    ],
)
def test_bad_values_name_the_field(field, value):
    for config_class in (HfLmGPTConfig, HfLmBertConfig, HfLmT5Config):
        with pytest.raises(ValueError, match=f"`{field}`"):
            config_class(**SIZES, **{field: value})


def test_defaults_are_dense():
    for config in (HfLmGPTConfig(**SIZES), HfLmBertConfig(**SIZES), HfLmBartConfig(**SIZES)):
        assert config.attention_pattern == "dense" and getattr(config, "sliding_window", None) is None


def test_save_and_load_keep_the_pattern(tmp_path):
    """In process; the same models as remote code: tests/test_model_properties.py."""
    band = gpt("band+dilated")
    ids, mask = padded_batch("gpt", T=6)
    band.save_pretrained(tmp_path)
    # Mistral's name for the window is stored too, for the tools that read config.json
    assert json.loads((tmp_path / "config.json").read_text())["sliding_window"] == band.config.sliding_window
    assert "| sparse attention pattern | band+dilated |" in (tmp_path / "README.md").read_text()
    reloaded = HfLmGPTForCausalLM.from_pretrained(tmp_path).eval()
    assert reloaded.config.attention_pattern == "band+dilated"
    assert reloaded.config.attention_window == SETTINGS["attention_window"]
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded(ids, attention_mask=mask).logits, band(ids, attention_mask=mask).logits
        )


def test_the_patterns_run_on_an_accelerator_like_on_the_cpu():
    """The pattern's tensors follow the model's device (random keys included: integer hashing, no
    generator): the simulated accelerator's logits and tokens are the CPU's."""
    model = gpt("band+global+random")
    ids, mask = padded_batch("gpt", T=6)
    with torch.no_grad():
        logits = model(ids, attention_mask=mask).logits
        tokens = model.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False, pad_token_id=0)
        with simulated_device() as sim:
            model.to(sim.device)
            moved = model(ids.to(sim.device), attention_mask=mask.to(sim.device)).logits
            torch.testing.assert_close(to_cpu(moved), logits, atol=1e-5, rtol=1e-5)
            out = model.generate(
                ids.to(sim.device),
                attention_mask=mask.to(sim.device),
                max_new_tokens=5,
                do_sample=False,
                pad_token_id=0,
            )
            assert torch.equal(to_cpu(out), tokens)
