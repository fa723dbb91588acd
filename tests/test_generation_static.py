"""`hf_lm.generation_static.static_decode`: generate()'s greedy and sampling loop for a static cache,
with a host-device sync every k steps. Its output must be generate()'s, token for token and length
for length (under the same seed when sampling), whatever k, padding, stopping or logits processors,
for every family with a static cache; the others are refused with a message."""

import dataclasses

import pytest
import torch
from conftest import VARIANTS, tiny_gpt_config
from remote_code import run_fresh_interpreter
from transformers import (
    CompileConfig,
    GPT2Config,
    GPT2LMHeadModel,
    LogitsProcessor,
    LogitsProcessorList,
    StaticCache,
)

from hf_lm import HfLmBartConfig, HfLmGPTForCausalLM
from hf_lm.generation_static import static_decode
from hf_lm.testing import GENERATING_CASES, STATIC_CACHE_CASES, VARIANT_CASES

GENERATING, STATIC = GENERATING_CASES, STATIC_CACHE_CASES
_BART = next(case for case in STATIC if case.name == "bart-seq2seq-lm")
# the course's Transformer (sinusoidal positions, ReLU, scaled embeddings): the BART case's sizes
# and tokens under the "transformer" preset
_PRESET = HfLmBartConfig.PRESETS["transformer"]
TRANSFORMER = dataclasses.replace(
    _BART,
    name="transformer-seq2seq-lm",
    make_config=lambda: HfLmBartConfig.from_preset(
        "transformer",
        **{
            k: v
            for k, v in _BART.make_config().to_diff_dict().items()
            if k not in _PRESET and k != "model_type"
        },
    ),
)


def _model(seed: int = 0, **overrides) -> HfLmGPTForCausalLM:
    torch.manual_seed(seed)
    return HfLmGPTForCausalLM(tiny_gpt_config(**overrides)).eval()


def _prompts(left_padded: bool):
    torch.manual_seed(1)
    ids = torch.randint(3, 97, (2, 7))
    mask = torch.ones_like(ids)
    if left_padded:
        ids[1, :3], mask[1, :3] = 0, 0
    return ids[: 2 if left_padded else 1], mask[: 2 if left_padded else 1]


def _both(model, ids, mask, stop_check_every: int = 8, do_sample: bool = False, **kwargs):
    """generate()'s sequences and static_decode's, each from the same seed."""
    loop = dict(
        cache_implementation="static", custom_generate=static_decode, stop_check_every=stop_check_every
    )
    results = []
    for extra in ({}, loop):
        torch.manual_seed(1234)
        results.append(model.generate(ids, attention_mask=mask, do_sample=do_sample, **extra, **kwargs))
    return results


@pytest.mark.parametrize("stop_check_every", [1, 3, 8, 100])
@pytest.mark.parametrize("left_padded", [False, True])
@pytest.mark.parametrize("do_sample", [False, True], ids=["greedy", "sample"])
@pytest.mark.parametrize("variant", ["gpt2", "llama"])
def test_same_tokens_as_generate(variant, do_sample, left_padded, stop_check_every):
    model = _model(**VARIANTS[variant])
    ids, mask = _prompts(left_padded)
    reference, fast = _both(
        model, ids, mask, max_new_tokens=12, stop_check_every=stop_check_every, do_sample=do_sample
    )
    assert fast.shape == reference.shape == (ids.shape[0], ids.shape[1] + 12)
    assert torch.equal(fast, reference)


@pytest.mark.parametrize("do_sample", [False, True], ids=["greedy", "sample"])
@pytest.mark.parametrize("case", [*STATIC, TRANSFORMER], ids=str)
def test_every_family_with_a_static_cache(case, do_sample):
    """Decoder-only and encoder-decoder alike, from a padded batch (an encoder-decoder's source is
    right-padded, a decoder-only prompt left-padded): generate()'s tokens."""
    model = case.make_model(seed=0)
    prompt = case.prompt(case.make_batch(padding=True))
    reference, fast = _both(
        model, prompt["input_ids"], prompt["attention_mask"], 3, do_sample, max_new_tokens=9
    )
    assert fast.shape[1] == reference.shape[1] > 9
    assert torch.equal(fast, reference)


@pytest.mark.parametrize("case", [c for c in GENERATING if c not in STATIC], ids=str)
def test_families_without_a_static_cache_are_refused(case):
    model = case.make_model(seed=0)
    prompt = case.prompt(case.make_batch(padding=False))
    with pytest.raises(ValueError, match=f"needs a static cache, which {type(model).__name__} has not"):
        model.generate(
            **prompt, max_new_tokens=3, cache_implementation="static", custom_generate=static_decode
        )


def test_sampling_warpers_apply():
    """Temperature, top-k and top-p are logits processors generate() builds; the draw is multinomial's.
    Several samples per prompt (`num_return_sequences`) are rows generate() makes before the loop."""
    model = _model(seed=2)
    ids, mask = _prompts(left_padded=True)
    greedy, _ = _both(model, ids, mask, max_new_tokens=10)
    for warpers in (
        dict(temperature=0.7, top_k=5),
        dict(top_p=0.8),
        dict(temperature=1.5, num_return_sequences=3),
    ):
        reference, fast = _both(model, ids, mask, do_sample=True, max_new_tokens=10, **warpers)
        assert torch.equal(fast, reference), warpers
        assert reference.shape[0] == ids.shape[0] * warpers.get("num_return_sequences", 1)
        assert not torch.equal(reference[:: reference.shape[0] // 2], greedy)  # sampled, not greedy


class FavorEos(LogitsProcessor):
    """Makes the end-of-sequence token win from a given length on, per row (a stop mid-run)."""

    def __init__(self, eos: int, lengths: list[int]):
        self.eos, self.lengths = eos, lengths

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        for row, length in enumerate(self.lengths):
            if input_ids.shape[1] >= length:
                scores[row, self.eos] = scores[row].max() + 1
        return scores


@pytest.mark.parametrize("do_sample", [False, True], ids=["greedy", "sample"])
@pytest.mark.parametrize("stop_check_every", [1, 2, 5, 64])
def test_stops_where_generate_stops_and_pads_finished_rows(stop_check_every, do_sample):
    """Row 0 ends at length 10, row 1 at 13: generate() pads row 0 after its end and returns
    length 13; a sync every k steps must not change either."""
    model = _model()
    ids, mask = _prompts(left_padded=True)
    processors = LogitsProcessorList([FavorEos(eos=2, lengths=[10, 13])])
    reference, fast = _both(
        model,
        ids,
        mask,
        max_new_tokens=30,
        logits_processor=processors,
        stop_check_every=stop_check_every,
        do_sample=do_sample,
        top_k=1 if do_sample else None,  # the end-of-sequence token is then the only choice
    )
    assert reference.shape[1] == 14  # the second row's end-of-sequence token is its last
    assert reference[0, 11:].eq(0).all() and reference[0, 10] == 2
    assert torch.equal(fast, reference)


def test_min_new_tokens_and_repetition_penalty_apply():
    model = _model(seed=3)
    ids, mask = _prompts(left_padded=True)
    reference, fast = _both(model, ids, mask, max_new_tokens=9, min_new_tokens=5, repetition_penalty=1.7)
    assert torch.equal(fast, reference)


class NaNAt(LogitsProcessor):
    """One NaN score (not in the first column) from a given length on."""

    def __init__(self, length: int):
        self.length = length

    def __call__(self, input_ids, scores):
        if input_ids.shape[1] >= self.length:
            scores = scores.clone()
            scores[:, 7] = float("nan")
        return scores


@pytest.mark.parametrize("stop_check_every", [1, 4, 100])
def test_nan_scores_raise_when_sampling(stop_check_every):
    """torch.multinomial refuses NaN probabilities; static_decode draws without that
    check and must still raise (at the next stop check), never return tokens drawn from NaN."""
    model = _model()
    ids, mask = _prompts(left_padded=False)
    kwargs = dict(
        attention_mask=mask,
        do_sample=True,
        max_new_tokens=10,
        logits_processor=LogitsProcessorList([NaNAt(9)]),
    )
    with pytest.raises(RuntimeError, match="nan"):
        model.generate(ids, **kwargs)
    with pytest.raises(RuntimeError, match="NaN"):
        model.generate(
            ids,
            cache_implementation="static",
            custom_generate=static_decode,
            stop_check_every=stop_check_every,
            **kwargs,
        )


def _compile_here() -> CompileConfig:
    """generate() compiles the static-cache forward on a GPU; `_compile_all_devices` does it here (the
    eager backend: Dynamo's graph, no code generation)."""
    config = CompileConfig(backend="eager", mode=None)
    config._compile_all_devices = True
    return config


@pytest.mark.parametrize("case", [c for c in STATIC if c.name in ("gpt-causal-lm", "t5-seq2seq-lm")], ids=str)
def test_compiled_forward_gives_the_same_tokens(case):
    """static_decode uses the forward generate() compiled."""
    model = case.make_model(seed=0)
    prompt = case.prompt(case.make_batch(padding=True))
    reference, fast = _both(model, *prompt.values(), max_new_tokens=6, compile_config=_compile_here())
    assert hasattr(model, "_compiled_call")  # the compiled forward was built and used
    assert torch.equal(fast, reference)


def test_compiled_steps_skip_guards_only_inside_the_loop():
    """After its first compiled step the loop skips Dynamo's guard checks (the same inputs every
    step). A new batch size must still get its own graph (its first step checks every guard), and the
    setting must not outlive the call: a function compiled outside sees its guards checked again."""
    model, config = _model(), _compile_here()
    double = torch.compile(lambda x: x * 2, backend="eager", dynamic=False)
    assert torch.equal(double(torch.ones(2)), torch.full((2,), 2.0))
    for left_padded in (False, True):  # batch 1, then batch 2 with padding
        ids, mask = _prompts(left_padded)
        reference, fast = _both(model, ids, mask, max_new_tokens=6, compile_config=config)
        assert torch.equal(fast, reference)
    # a guard that must fail (another shape): with guards skipped the (2,) graph would run on (3,)
    assert torch.equal(double(torch.ones(3)), torch.full((3,), 2.0))


def test_a_folder_loaded_as_remote_code_before_hf_lm(tmp_path):
    """Classes loaded from a folder's own code (trust_remote_code before hf_lm was imported) are a
    copy of hf_lm's: still hf_lm models, with generate()'s tokens."""
    next(case for case in STATIC if case.name == "gpt-causal-lm").make_model().save_pretrained(
        tmp_path / "gpt"
    )
    script = """
    import sys, torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
    assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
    from hf_lm.generation_static import static_decode
    ids = torch.tensor([[5, 9, 12, 40, 7]])
    reference = model.generate(ids, max_new_tokens=6, do_sample=False)
    fast = model.generate(ids, max_new_tokens=6, do_sample=False, cache_implementation="static",
                          custom_generate=static_decode)
    print("SAME" if torch.equal(reference, fast) else f"DIFFERENT {reference} {fast}")
    """
    assert "SAME" in run_fresh_interpreter(script, tmp_path / "gpt", cwd=tmp_path)


def test_what_it_refuses():
    model = _model()
    ids, mask = _prompts(left_padded=False)
    kwargs = dict(attention_mask=mask, max_new_tokens=3, custom_generate=static_decode)
    with pytest.raises(ValueError, match="needs a static cache"):
        model.generate(ids, **kwargs)
    with pytest.raises(ValueError, match="num_beams=2"):
        model.generate(ids, cache_implementation="static", num_beams=2, **kwargs)
    with pytest.raises(ValueError, match="sequences only"):
        model.generate(ids, cache_implementation="static", return_dict_in_generate=True, **kwargs)
    with pytest.raises(ValueError, match="stop_check_every"):
        model.generate(ids, cache_implementation="static", stop_check_every=0, **kwargs)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=97, n_embd=16, n_layer=1, n_head=2)).eval()
    with pytest.raises(ValueError, match="decodes hf_lm models, not GPT2LMHeadModel"):
        gpt2.generate(ids, cache_implementation="static", **kwargs)
    band = next(case for case in VARIANT_CASES if case.name == "gpt-causal-lm-band_dilated").make_model()
    with pytest.raises(ValueError, match="sliding-window cache: .*'band\\+dilated'"):
        band.generate(
            # past the sliding cache's 7 slots: without the refusal, an IndexError in the loop
            torch.randint(3, 64, (2, 5)),
            cache_implementation="static",
            **{**kwargs, "attention_mask": None, "max_new_tokens": 12},
        )
    t5 = next(case for case in STATIC if case.name == "t5-seq2seq-lm").make_model()
    with pytest.raises(ValueError, match="decoder_attention_mask"):
        t5.generate(
            ids,
            decoder_attention_mask=torch.ones(1, 1, dtype=torch.long),
            cache_implementation="static",
            **kwargs,
        )


def test_inputs_it_would_ignore_are_refused():
    """The loop feeds the model `input_ids` and the padding mask only, from an empty cache: any other
    input (a prefix LM's `prefix_lengths`, a soft prompt's `inputs_embeds`, positions of one's own) and
    a cache already holding a turn would otherwise be dropped silently, giving other tokens than
    generate()."""
    model = _model()
    ids, mask = _prompts(left_padded=True)
    kwargs = dict(attention_mask=mask, max_new_tokens=3, custom_generate=static_decode)
    for extra, match in (
        (dict(prefix_lengths=torch.tensor([5, 3])), "ignore \\['prefix_lengths'\\]"),
        (dict(inputs_embeds=model.get_input_embeddings()(ids)), "ignore \\['inputs_embeds'\\]"),
        (dict(position_ids=torch.arange(7).expand(2, 7) + 1), "position_ids"),
    ):
        with pytest.raises(ValueError, match=match):
            model.generate(ids, cache_implementation="static", **kwargs, **extra)
    # generate()'s own positions (from the mask) and the same ones given explicitly are fine
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    loop = model.generate(ids, cache_implementation="static", position_ids=positions, **kwargs)
    assert torch.equal(loop, model.generate(ids, attention_mask=mask, max_new_tokens=3))
    cache = StaticCache(config=model.config, max_cache_len=20)
    first = model.generate(ids, past_key_values=cache, **kwargs)
    turn = torch.cat([first, torch.randint(3, 97, (2, 2))], dim=1)
    turn_mask = torch.cat([mask, torch.ones(2, turn.shape[1] - mask.shape[1], dtype=mask.dtype)], dim=1)
    with pytest.raises(ValueError, match="empty cache"):
        model.generate(turn, **{**kwargs, "attention_mask": turn_mask}, past_key_values=cache)
    cache.reset()  # then it starts over, as generate() would from scratch
    again = model.generate(ids, past_key_values=cache, **kwargs)
    assert torch.equal(again, first)
