"""`hf_lm.generation_static.static_greedy`: generate()'s greedy loop for a static cache with a
host-device sync every k steps. Its output must be generate()'s, token for token and length for
length, whatever k, padding, stopping or logits processors."""

import pytest
import torch
from conftest import VARIANTS, tiny_gpt_config
from transformers import CompileConfig, LogitsProcessor, LogitsProcessorList

from hf_lm import HfLmGPTForCausalLM, HfLmT5ForConditionalGeneration
from hf_lm.generation_static import static_greedy
from hf_lm.models.hflm_configuration_seq2seq import HfLmT5Config


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


def _both(model, ids, mask, stop_check_every: int = 8, **kwargs):
    reference = model.generate(ids, attention_mask=mask, do_sample=False, **kwargs)
    fast = model.generate(
        ids,
        attention_mask=mask,
        do_sample=False,
        cache_implementation="static",
        custom_generate=static_greedy,
        stop_check_every=stop_check_every,
        **kwargs,
    )
    return reference, fast


@pytest.mark.parametrize("stop_check_every", [1, 3, 8, 100])
@pytest.mark.parametrize("left_padded", [False, True])
@pytest.mark.parametrize("variant", ["gpt2", "llama"])
def test_same_tokens_as_generate(variant, left_padded, stop_check_every):
    model = _model(**VARIANTS[variant])
    ids, mask = _prompts(left_padded)
    reference, fast = _both(model, ids, mask, max_new_tokens=12, stop_check_every=stop_check_every)
    assert fast.shape == reference.shape == (ids.shape[0], ids.shape[1] + 12)
    assert torch.equal(fast, reference)


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


@pytest.mark.parametrize("stop_check_every", [1, 2, 5, 64])
def test_stops_where_generate_stops_and_pads_finished_rows(stop_check_every):
    """Row 0 ends at length 10, row 1 at 13: generate() pads row 0 after its end and returns
    length 13; a sync every k steps must not change either."""
    model = _model()
    ids, mask = _prompts(left_padded=True)
    processors = LogitsProcessorList([FavorEos(eos=2, lengths=[10, 13])])
    reference, fast = _both(
        model, ids, mask, max_new_tokens=30, logits_processor=processors, stop_check_every=stop_check_every
    )
    assert reference.shape[1] == 14  # the second row's end-of-sequence token is its last
    assert reference[0, 11:].eq(0).all() and reference[0, 10] == 2
    assert torch.equal(fast, reference)


def test_min_new_tokens_and_repetition_penalty_apply():
    model = _model(seed=3)
    ids, mask = _prompts(left_padded=True)
    reference, fast = _both(model, ids, mask, max_new_tokens=9, min_new_tokens=5, repetition_penalty=1.7)
    assert torch.equal(fast, reference)


def _compile_here() -> CompileConfig:
    """generate() compiles the static-cache forward on a GPU; `_compile_all_devices` does it here (the
    eager backend: Dynamo's graph, no code generation)."""
    config = CompileConfig(backend="eager", mode=None)
    config._compile_all_devices = True
    return config


def test_compiled_forward_gives_the_same_tokens():
    """static_greedy uses the forward generate() compiled."""
    model = _model()
    ids, mask = _prompts(left_padded=True)
    reference, fast = _both(model, ids, mask, max_new_tokens=6, compile_config=_compile_here())
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


def test_what_it_refuses():
    model = _model()
    ids, mask = _prompts(left_padded=False)
    kwargs = dict(attention_mask=mask, max_new_tokens=3, custom_generate=static_greedy)
    with pytest.raises(ValueError, match="needs a static cache"):
        model.generate(ids, **kwargs)
    with pytest.raises(ValueError, match="greedy search"):
        model.generate(ids, cache_implementation="static", do_sample=True, **kwargs)
    with pytest.raises(ValueError, match="sequences only"):
        model.generate(ids, cache_implementation="static", return_dict_in_generate=True, **kwargs)
    with pytest.raises(ValueError, match="stop_check_every"):
        model.generate(ids, cache_implementation="static", stop_check_every=0, **kwargs)
    t5 = HfLmT5ForConditionalGeneration(
        HfLmT5Config(
            vocab_size=97, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
        )
    ).eval()
    with pytest.raises(ValueError, match="decoder-only"):
        t5.generate(ids, cache_implementation="static", **kwargs)
