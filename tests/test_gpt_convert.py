"""Exact parity with transformers' GPT-2 and Llama: the proof that each variant is the real thing.

References are built from small random configs (nothing can be downloaded here); the conversion
code is the same one that imports real checkpoints.
"""

import pytest
import torch
from transformers import (
    GPT2Config,
    GPT2ForSequenceClassification,
    GPT2LMHeadModel,
    GPT2Model,
    LlamaConfig,
    LlamaForCausalLM,
    LlamaForSequenceClassification,
    LlamaModel,
)

from hf_lm import HfLmGPTForCausalLM, HfLmGPTForSequenceClassification, HfLmGPTModel
from hf_lm.convert import from_transformers

VOCAB = 211


def gpt2_config(**kw):
    base = dict(
        vocab_size=VOCAB, n_positions=48, n_embd=48, n_layer=3, n_head=4, bos_token_id=1, eos_token_id=2,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    base.update(kw)
    return GPT2Config(**base)


def llama_config(**kw):
    base = dict(
        vocab_size=VOCAB, hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    base.update(kw)
    return LlamaConfig(**base)


def randomize(model):
    """Random init leaves norms at 1 and biases at 0; perturb them so they are really compared."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "ln_" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def inputs():
    torch.manual_seed(1)
    x = torch.randint(3, VOCAB, (3, 13))
    mask = torch.ones_like(x)
    mask[1, :4] = 0  # left padding
    mask[2, 9:] = 0  # right padding
    x[mask == 0] = 0  # the pad token (sequence classifiers without a mask look for it)
    return x, mask


def position_ids(mask):
    # what generate() does: real tokens count from 0 whatever the padding
    return (mask.cumsum(-1) - 1).clamp(min=0)


def assert_parity(ref, ours):
    x, mask = inputs()
    pos = position_ids(mask)
    with torch.no_grad():
        for kwargs in (dict(), dict(attention_mask=mask, position_ids=pos)):
            a, b = ref(x, **kwargs), ours(x, **kwargs)
            field = "logits" if hasattr(a, "logits") else "last_hidden_state"
            got, want = getattr(b, field), getattr(a, field)
            if "attention_mask" in kwargs and field != "logits":
                got, want = got[mask.bool()], want[mask.bool()]  # padding rows are free to differ
            elif "attention_mask" in kwargs and got.dim() == 3:
                got, want = got[mask.bool()], want[mask.bool()]
            assert (got - want).abs().max() < 1e-4, (got - want).abs().max()


GPT2_CASES = {
    "lm": (GPT2LMHeadModel, {}, HfLmGPTForCausalLM),
    "lm_relu_inner": (GPT2LMHeadModel, dict(activation_function="relu", n_inner=72), HfLmGPTForCausalLM),
    "base": (GPT2Model, {}, HfLmGPTModel),
    "cls": (
        GPT2ForSequenceClassification,
        dict(num_labels=3, pad_token_id=0),
        HfLmGPTForSequenceClassification,
    ),
}


@pytest.mark.parametrize("case", sorted(GPT2_CASES))
def test_gpt2_parity(case):
    cls, kw, expected_cls = GPT2_CASES[case]
    ref = randomize(cls(gpt2_config(**kw)))
    ours = from_transformers(ref)
    assert type(ours) is expected_cls
    assert_parity(ref, ours)


LLAMA_CASES = {
    "lm_gqa": (LlamaForCausalLM, {}),
    "lm_mha_tied": (LlamaForCausalLM, dict(num_key_value_heads=4, tie_word_embeddings=True)),
    "lm_mqa_bias": (LlamaForCausalLM, dict(num_key_value_heads=1, attention_bias=True, mlp_bias=True)),
    "lm_head_dim_theta": (
        LlamaForCausalLM,
        dict(head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 500.0}),
    ),
    "base": (LlamaModel, {}),
    "cls": (LlamaForSequenceClassification, dict(num_labels=2, pad_token_id=0)),
}


@pytest.mark.parametrize("case", sorted(LLAMA_CASES))
def test_llama_parity(case):
    cls, kw = LLAMA_CASES[case]
    ref = randomize(cls(llama_config(**kw)))
    ours = from_transformers(ref)
    assert ours.config.num_key_value_heads == ref.config.num_key_value_heads
    assert_parity(ref, ours)


@pytest.mark.parametrize(
    "ref_factory",
    [lambda: GPT2LMHeadModel(gpt2_config()), lambda: LlamaForCausalLM(llama_config())],
    ids=["gpt2", "llama"],
)
def test_identical_generations(ref_factory):
    ref = randomize(ref_factory())
    ours = from_transformers(ref)
    x, mask = inputs()
    x, mask = x[:2, :8], mask[:2, :8]
    for kwargs in (
        dict(do_sample=False),
        dict(do_sample=False, num_beams=3, length_penalty=0.6, num_return_sequences=2),
    ):
        common = dict(attention_mask=mask, max_new_tokens=10, min_new_tokens=10, pad_token_id=0, **kwargs)
        assert torch.equal(ref.generate(x, **common), ours.generate(x, **common))


def test_unsupported_models_are_refused():
    from transformers import BertConfig, BertForNextSentencePrediction

    with pytest.raises(ValueError, match="does not support BertForNextSentencePrediction"):
        from_transformers(
            BertForNextSentencePrediction(
                BertConfig(
                    vocab_size=50,
                    hidden_size=16,
                    num_hidden_layers=1,
                    num_attention_heads=2,
                    intermediate_size=32,
                )
            )
        )
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        from_transformers(GPT2LMHeadModel(gpt2_config(scale_attn_by_inverse_layer_idx=True)))
    with pytest.raises(ValueError, match="rope_type"):
        from_transformers(
            LlamaForCausalLM(
                llama_config(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4})
            )
        )
