"""Continuous batching (transformers' `generate_batch`, `init_continuous_batching`): hf_lm's GPT takes
the paged cache and gives `generate()`'s tokens; the variants it cannot run are refused up front,
instead of every request failing with empty tokens (issue 34)."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_gpt_config
from transformers import GenerationConfig
from transformers.generation.configuration_utils import ContinuousBatchingConfig

from hf_lm import HfLmGPTForCausalLM
from hf_lm.models.hflm_attention import paged_attention_problem
from hf_lm.testing import FEATURE_VARIANTS, GPT_VARIANTS

PROMPT_LENGTHS = (3, 7, 5, 11)
NEW_TOKENS = 5


def _greedy(model, prompts) -> list[list[int]]:
    return [
        model.generate(
            torch.tensor([p]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0
        )[0, len(p) :].tolist()
        for p in prompts
    ]


def _batched(model, prompts) -> list[list[int]]:
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=-1, pad_token_id=0)
    # a small paged cache: sized by default from the machine's free memory, it takes ~20 s to set up
    small = ContinuousBatchingConfig(num_blocks=16, max_batch_tokens=64)
    results = model.generate_batch(
        inputs=prompts, generation_config=config, continuous_batching_config=small, progress_bar=False
    )
    ordered = sorted(results.values(), key=lambda r: int(r.request_id.rsplit("_", 1)[-1]))
    return [r.generated_tokens for r in ordered]


# every GPT variant the paged cache runs (learned, sinusoidal, RoPE, xPos and no positions; GQA/MQA,
# post-norm, ALBERT sharing, a mixture of experts without a capacity), and eager through paged|eager
SUPPORTED = {
    name: overrides
    for name, overrides in {**GPT_VARIANTS, **FEATURE_VARIANTS["gpt"]}.items()
    if paged_attention_problem(tiny_gpt_config(**overrides)) is None
}
SUPPORTED["moe"] = dict(num_local_experts=3, num_experts_per_tok=2)


@pytest.mark.parametrize(
    "name, impl", [(name, "sdpa") for name in SUPPORTED] + [("gpt2", "eager"), ("llama", "eager")]
)
def test_generate_batch_gives_generates_tokens(name, impl):
    torch.manual_seed(0)
    model = HfLmGPTForCausalLM(tiny_gpt_config(**SUPPORTED[name])).eval()
    model.set_attn_implementation(impl)  # eager runs as paged|eager inside generate_batch
    prompts = [torch.randint(3, 97, (n,)).tolist() for n in PROMPT_LENGTHS]
    assert _batched(model, prompts) == _greedy(model, prompts)
    assert model.config._attn_implementation == impl  # restored afterwards


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(position_embedding_type="alibi"), "position_embedding_type='alibi'"),
        (dict(position_embedding_type="relative_buckets"), "position_embedding_type='relative_buckets'"),
        (dict(attention_pattern="band", attention_window=3), "attention_pattern='band'"),
        (dict(num_local_experts=2, capacity_factor=1.0), "capacity_factor=1.0"),
    ],
)
def test_variants_the_paged_cache_cannot_run_are_refused_up_front(overrides, field):
    torch.manual_seed(0)
    model = HfLmGPTForCausalLM(tiny_gpt_config(**overrides)).eval()
    with pytest.raises(ValueError, match=f"Continuous batching cannot run .*{field}"):
        model.generate_batch(inputs=[[3, 4, 5]], generation_config=GenerationConfig(max_new_tokens=2))
    with pytest.raises(ValueError, match=field):
        model.init_continuous_batching(generation_config=GenerationConfig(max_new_tokens=2))
