"""Attention through transformers' `AttentionInterface`, in every Transformer family (issue 34).

Each test is a row of what a user of transformers does with Llama: pick a backend by name, register
a function, override "sdpa", pass a 4D mask, ask for flash-attention where the config cannot use it.
hf_lm's eager path is the reference throughout. flex_attention runs forward only here: torch 2.13
has no flex backward on the CPU.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_gpt_config
from transformers import AttentionInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from hf_lm import HfLmGPTForCausalLM, HfLmGPTModel
from hf_lm.models.hflm_attention import AttentionBackends, AttentionHeads
from hf_lm.testing import FAMILY_CASES, VARIANT_CASES

TRANSFORMER_CASES = [
    case for case in FAMILY_CASES + VARIANT_CASES if issubclass(case.model_class, AttentionBackends)
]
RECURRENT_CASES = [case for case in FAMILY_CASES if not issubclass(case.model_class, AttentionBackends)]


def main_output(out) -> torch.Tensor:
    """The logits, or the hidden states of a bare model (the loss aside)."""
    return next(value for key, value in out.items() if key != "loss" and torch.is_tensor(value))


def outputs(model, batch, impl: str) -> torch.Tensor:
    model.config._attn_implementation_internal = impl  # what set_attn_implementation stores
    with torch.no_grad():
        return main_output(model(**batch))


def attention_calls(model, batch) -> int:
    """How many times a forward runs an attention module (a block shared by layers runs per layer)."""
    calls = []
    hooks = [
        m.register_forward_hook(lambda *_: calls.append(1))
        for m in model.modules()
        if isinstance(m, AttentionHeads)
    ]
    try:
        outputs(model, batch, "eager")
    finally:
        for hook in hooks:
            hook.remove()
    return len(calls)


class Recorder:
    """A user's attention function: transformers' SDPA, counting its calls and keeping the kwargs."""

    def __init__(self, target=ALL_ATTENTION_FUNCTIONS["sdpa"]):
        self.target, self.calls, self.kwargs = target, 0, []

    def __call__(self, module, query, key, value, attention_mask, **kwargs):
        self.calls += 1
        self.kwargs.append(kwargs)
        return self.target(module, query, key, value, attention_mask, **kwargs)


@pytest.fixture
def registered():
    """A function registered under a new name with `AttentionInterface.register`, removed after."""
    recorder = Recorder()
    AttentionInterface.register("hflm_test_recorder", recorder)
    yield recorder
    del ALL_ATTENTION_FUNCTIONS._global_mapping["hflm_test_recorder"]


@pytest.mark.parametrize("case", TRANSFORMER_CASES, ids=str)
def test_every_backend_of_the_interface_equals_eager(case, registered):
    """sdpa, paged|eager and a registered function give eager's outputs, for every family and
    variant; the registered function is called once per attention layer (self and cross)."""
    model = case.make_model(seed=0)
    assert type(model).is_backend_compatible() and model._supports_attention_backend
    batch = case.make_batch()
    reference = outputs(model, batch, "eager")
    for impl in ("sdpa", "paged|eager", "hflm_test_recorder"):
        torch.testing.assert_close(outputs(model, batch, impl), reference, rtol=1e-5, atol=1e-5, msg=impl)
    assert registered.calls == attention_calls(model, batch) > 0


@pytest.mark.parametrize("case", RECURRENT_CASES, ids=str)
def test_models_without_attention_do_not_claim_the_backends(case):
    assert not type(case.make_model(seed=0)).is_backend_compatible()


def test_an_override_of_sdpa_is_used():
    """Replacing "sdpa" in ALL_ATTENTION_FUNCTIONS (as kernel libraries do) changes what runs."""
    torch.manual_seed(0)
    model = HfLmGPTForCausalLM(tiny_gpt_config()).eval()
    ids = torch.randint(3, 97, (2, 6))
    original = ALL_ATTENTION_FUNCTIONS["sdpa"]
    recorder = Recorder(target=original)
    ALL_ATTENTION_FUNCTIONS["sdpa"] = recorder
    try:
        model.set_attn_implementation("sdpa")
        model(ids)
    finally:
        ALL_ATTENTION_FUNCTIONS["sdpa"] = original
    assert recorder.calls == 2


def test_attention_kwargs_reach_the_attention_function(registered):
    """vLLM's and SGLang's Transformers backends pass their own kwargs through the model's forward
    to the attention function they registered: they arrive, from the head and from the base model."""
    torch.manual_seed(0)
    model = HfLmGPTForCausalLM.from_pretrained(_saved_gpt(), attn_implementation="hflm_test_recorder").eval()
    ids = torch.randint(3, 97, (1, 5))
    model(ids, hflm_marker="from the head")
    model.model(ids, hflm_marker="from the base model")
    markers = [kwargs.get("hflm_marker") for kwargs in registered.kwargs]
    assert markers == ["from the head"] * 2 + ["from the base model"] * 2
    assert all("num_items_in_batch" not in kwargs for kwargs in registered.kwargs)


_SAVED = {}


def _saved_gpt(tmp_root="/tmp") -> str:
    import tempfile

    if "gpt" not in _SAVED:
        folder = tempfile.mkdtemp(prefix="hflm-backends-", dir=tmp_root)
        torch.manual_seed(0)
        HfLmGPTForCausalLM(tiny_gpt_config()).save_pretrained(folder)
        _SAVED["gpt"] = folder
    return _SAVED["gpt"]


# ----------------------------------------------------------------------------------------------
# flex_attention: every position scheme and sparse pattern, forward and cached generation
# ----------------------------------------------------------------------------------------------

# tests/test_flex_attention.py runs every GPT and BERT variant on flex; here the encoder-decoders
FLEX_CASES = [case for case in TRANSFORMER_CASES if case.name in {"t5-seq2seq-lm", "bart-seq2seq-lm"}]


@pytest.mark.slow
@pytest.mark.parametrize("case", FLEX_CASES, ids=str)
def test_flex_attention_equals_eager(case):
    model = case.make_model(seed=0)
    batch = case.make_batch()
    reference = outputs(model, batch, "eager")
    torch.testing.assert_close(outputs(model, batch, "flex_attention"), reference, rtol=1e-5, atol=1e-5)
    # generation: BART's (cross-attention's flex mask at every step); T5's per-score buckets under a
    # cache are generated in tests/test_flex_attention.py (the GPT t5bias variant), 40 s cheaper
    if case.name.startswith("bart"):
        prompt = {k: batch[k] for k in ("input_ids", "attention_mask") if k in batch}
        model.config._attn_implementation_internal = "eager"
        expected = model.generate(**prompt, max_new_tokens=3, do_sample=False)
        model.config._attn_implementation_internal = "flex_attention"
        torch.testing.assert_close(model.generate(**prompt, max_new_tokens=3, do_sample=False), expected)


# ----------------------------------------------------------------------------------------------
# flash-attention: the mask it takes, and the configs it cannot run
# ----------------------------------------------------------------------------------------------


def emulated_flash(
    module,
    query,
    key,
    value,
    attention_mask,
    dropout=0.0,
    scaling=None,
    sliding_window=None,
    is_causal=None,
    **kwargs,
):
    """flash-attention's contract on the CPU: a (B, S) padding mask or None, the queries the last T
    keys, causality as a flag, `sliding_window` keys back counting the query; padded tokens unseen."""
    assert attention_mask is None or attention_mask.dim() == 2, "flash takes a 2D padding mask"
    B, nh, T, _ = query.shape
    S = key.shape[2]
    real = torch.ones(B, S, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    k_pos = real.long().cumsum(-1) - 1  # (B, S) index among the real tokens, as flash unpads
    q_pos = k_pos[:, S - T :]
    allowed = real[:, None, :].expand(B, T, S)
    distance = q_pos[:, :, None] - k_pos[:, None, :]  # (B, T, S)
    if is_causal if is_causal is not None else module.is_causal:
        allowed = allowed & (distance >= 0)
    if sliding_window is not None:
        allowed = allowed & (distance.abs() < sliding_window)
    allowed = allowed | ~allowed.any(-1, keepdim=True)  # padded queries: anything finite
    groups = nh // key.shape[1]
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=allowed[:, None], scale=scaling)
    return out.transpose(1, 2), None


@pytest.fixture
def flash_on_cpu():
    original = ALL_ATTENTION_FUNCTIONS["flash_attention_2"]
    ALL_ATTENTION_FUNCTIONS["flash_attention_2"] = emulated_flash
    yield
    ALL_ATTENTION_FUNCTIONS["flash_attention_2"] = original


FLASH_CASES = [
    case
    for case in TRANSFORMER_CASES
    if case.name
    in {
        "gpt-causal-lm",
        "gpt-causal-lm-llama",
        "gpt-causal-lm-xpos_gqa",
        "gpt-causal-lm-rope_headdim",
        "bert-mlm",
        "bart-seq2seq-lm",
        "bart",
    }
]


@pytest.mark.parametrize("case", FLASH_CASES, ids=str)
def test_flash_attention_gets_its_mask_and_equals_eager(case, flash_on_cpu):
    model = case.make_model(seed=0)
    batch = case.make_batch()
    reference = outputs(model, batch, "eager")
    got = outputs(model, batch, "flash_attention_2")
    # outputs at padded tokens are the backend's own: compare the real tokens
    real = batch.get("attention_mask")
    if real is None or got.shape[:2] != real.shape:  # an encoder-decoder's decoder outputs
        real = torch.ones(got.shape[:2])
    torch.testing.assert_close(got[real.bool()], reference[real.bool()], rtol=1e-5, atol=1e-5)


def test_flash_attention_runs_a_band_as_its_sliding_window(flash_on_cpu):
    torch.manual_seed(0)
    model = HfLmGPTForCausalLM(tiny_gpt_config(attention_pattern="band", attention_window=2)).eval()
    ids = torch.randint(3, 97, (2, 9))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    batch = {"input_ids": ids, "attention_mask": mask}
    reference = outputs(model, batch, "eager")
    got = outputs(model, batch, "flash_attention_2")
    torch.testing.assert_close(got[mask.bool()], reference[mask.bool()], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(position_embedding_type="alibi"), "position_embedding_type='alibi'"),
        (dict(position_embedding_type="relative_buckets"), "position_embedding_type='relative_buckets'"),
        (dict(attention_pattern="band+global", attention_window=2, num_global_tokens=1), "attention_pattern"),
    ],
)
@pytest.mark.parametrize("impl", ["flash_attention_2", "kernels-community/flash-attn2"])
def test_flash_attention_is_refused_at_load_time_where_the_config_needs_more(
    overrides, field, impl, tmp_path
):
    torch.manual_seed(0)
    HfLmGPTForCausalLM(tiny_gpt_config(**overrides)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=rf"{field}.*'eager', 'sdpa', 'flex_attention'"):
        HfLmGPTForCausalLM.from_pretrained(tmp_path, attn_implementation=impl)
    model = HfLmGPTForCausalLM.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match=field):
        model.set_attn_implementation(impl)


def test_flash_attention_refuses_masks_it_cannot_take(flash_on_cpu):
    torch.manual_seed(0)
    model = HfLmGPTForCausalLM(tiny_gpt_config()).eval()
    model.config._attn_implementation_internal = "flash_attention_2"
    ids = torch.randint(3, 97, (1, 4))
    with pytest.raises(ValueError, match="prefix_lengths"):
        model(ids, prefix_lengths=torch.tensor([2]))
    with pytest.raises(ValueError, match="4D"):
        model(ids, attention_mask=torch.ones(1, 1, 4, 4, dtype=torch.bool))


# ----------------------------------------------------------------------------------------------
# 4D attention masks, as transformers' decoders take them
# ----------------------------------------------------------------------------------------------


def _tiny(**overrides):
    torch.manual_seed(0)
    return HfLmGPTForCausalLM(tiny_gpt_config(**overrides)).eval()


@pytest.mark.parametrize("impl", ["eager", "sdpa", "paged|eager"])
@pytest.mark.parametrize("variant", ["gpt2", "alibi", "t5bias"])
def test_a_4d_mask_of_packed_documents_equals_each_document_alone(impl, variant):
    """Two documents packed in one row, a block-diagonal causal mask and restarting positions: the
    logits of each document equal its own."""
    overrides = {
        "gpt2": {},
        "alibi": dict(position_embedding_type="alibi"),
        "t5bias": dict(position_embedding_type="relative_buckets", relative_attention_num_buckets=8),
    }[variant]
    model = _tiny(**overrides)
    model.config._attn_implementation_internal = impl
    a, b = torch.randint(3, 97, (1, 4)), torch.randint(3, 97, (1, 3))
    with torch.no_grad():
        alone = torch.cat([model(a).logits, model(b).logits], dim=1)
        doc = torch.tensor([0, 0, 0, 0, 1, 1, 1])
        mask = (doc[:, None] == doc[None, :]) & torch.ones(7, 7, dtype=torch.bool).tril()
        positions = torch.tensor([[0, 1, 2, 3, 0, 1, 2]])
        ids = torch.cat([a, b], dim=1)
        packed = model(ids, attention_mask=mask[None, None], position_ids=positions).logits
        additive = torch.zeros(1, 1, 7, 7).masked_fill(~mask, torch.finfo(torch.float32).min)
        packed_float = model(ids, attention_mask=additive, position_ids=positions).logits
    if variant == "gpt2" or variant == "t5bias":
        # learned positions follow `position_ids`; T5's buckets are measured between indices, which a
        # 4D mask leaves as they are (as in transformers' T5): only the first document matches
        torch.testing.assert_close(packed[:, :4], alone[:, :4], rtol=1e-5, atol=1e-5)
    if variant != "t5bias":
        torch.testing.assert_close(packed, alone, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed_float, packed, rtol=1e-5, atol=1e-5)


def test_a_4d_mask_with_a_cache_equals_the_2d_mask():
    model = _tiny(position_embedding_type="rope")
    ids = torch.randint(3, 97, (2, 6))
    with torch.no_grad():
        full = model(ids).logits
        causal = torch.ones(5, 5, dtype=torch.bool).tril()[None, None].expand(2, 1, 5, 5)
        first = model(ids[:, :5], attention_mask=causal, use_cache=True)
        step = model(
            ids[:, 5:],
            attention_mask=torch.ones(2, 1, 1, 6, dtype=torch.bool),
            position_ids=torch.tensor([[5]]),
            past_key_values=first.past_key_values,
        ).logits
    torch.testing.assert_close(step[:, 0], full[:, 5], rtol=1e-5, atol=1e-5)


def test_bad_4d_masks_get_clear_errors():
    model = _tiny()
    ids = torch.randint(3, 97, (2, 4))
    with pytest.raises(ValueError, match=r"4D `attention_mask` must have shape \(batch, 1, seq_len, keys\)"):
        model(ids, attention_mask=torch.ones(2, 1, 4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool .* or an additive float"):
        model(ids, attention_mask=torch.ones(2, 1, 4, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="prefix_lengths"):
        model(
            ids, attention_mask=torch.ones(2, 1, 4, 4, dtype=torch.bool), prefix_lengths=torch.tensor([1, 1])
        )
    band = _tiny(attention_pattern="band", attention_window=2)
    with pytest.raises(ValueError, match="attention_pattern='band'"):
        band(ids, attention_mask=torch.ones(2, 1, 4, 4, dtype=torch.bool))


def test_the_base_model_takes_a_4d_mask_too():
    torch.manual_seed(0)
    model = HfLmGPTModel(tiny_gpt_config()).eval()
    ids = torch.randint(3, 97, (1, 5))
    causal = torch.ones(5, 5, dtype=torch.bool).tril()[None, None]
    with torch.no_grad():
        torch.testing.assert_close(
            model(ids, attention_mask=causal).last_hidden_state, model(ids).last_hidden_state
        )


def test_the_pipeline_plan_names_real_modules():
    """vLLM's and SGLang's Transformers backends read `base_model_pp_plan` (and the head's `_pp_plan`)
    to cut the model into stages: every module it names exists, and `layers` is the block list."""
    torch.manual_seed(0)
    model = HfLmGPTForCausalLM(tiny_gpt_config())
    base = model.model
    for name in model.config.base_model_pp_plan:
        assert isinstance(getattr(base, name), torch.nn.Module), name
    assert isinstance(base.layers, torch.nn.ModuleList)
    # the model's resolved plan: the head's entries and the base model's, prefixed
    assert set(model._pp_plan) == {"lm_head", "model.embed_tokens", "model.layers", "model.norm"}
    assert all(isinstance(model.get_submodule(name), torch.nn.Module) for name in model._pp_plan)
    # the tensor-parallel plan names real modules too (tests/test_tensor_parallel.py runs it)
    assert all(model.model.get_submodule(name.replace("*", "0")) for name in model.config.base_model_tp_plan)


def test_attention_parameters_keep_their_order():
    """Registration order is parameter order: initial weights drawn from a seed and the optimizer state
    of a saved run follow it, so the input projections come before `o_proj` as they always did."""
    from hf_lm.models.hflm_attention import Attention, CrossAttention

    config = tiny_gpt_config()
    assert [n for n, _ in Attention(config, 0).named_parameters()] == [
        "query_key_value.weight",
        "query_key_value.bias",
        "o_proj.weight",
        "o_proj.bias",
    ]
    assert [n.split(".")[0] for n, _ in CrossAttention(config, 0).named_parameters()][::2] == [
        "q_proj",
        "kv_proj",
        "o_proj",
    ]
