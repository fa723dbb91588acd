"""Training parity with transformers' reference models: the same loss and the same gradient for every
parameter, for every model class `hf_lm.convert.from_transformers` imports that has a loss.

Forward parity (the convert tests) proves that hf_lm computes the reference's function. It does not
prove that training sees the same function. Each of these passes forward parity and fails here:
- a path cut by a `detach()`;
- a weight tied in one model and not in the other;
- a parameter that no loss reaches;
- a branch taken only in training mode, such as the MoE router losses.

The reference's gradients go through the same state-dict conversion as its weights (stacking q/k/v,
transposing GPT-2's Conv1D, dropping RoBERTa's and BART's unused position rows). So each hf_lm
parameter is compared with the reference gradient it should equal, and a mismatch names the
parameter. Both models run in training mode with every dropout at 0; a second reference pass checks
that the loss really is deterministic. The batches are `hf_lm.testing`'s, the ones every family's
property suite uses, built from the reference's config.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch
import transformers
from test_bert_convert import SIZES as BERT_SIZES
from test_electra import _reference_config as electra_config
from test_gpt_convert import gpt2_config, llama_config, randomize
from test_moe import mixtral_reference_config, switch_reference_config
from test_seq2seq_model import BART_REF, T5_REF

from hf_lm.convert import _CONVERTERS, from_transformers
from hf_lm.models.hflm_attention import Attention, regroup_stacked_qkv
from hf_lm.testing import (
    _classes,
    _encoder,
    _mlm,
    _padded,
    _pretraining,
    _replaced,
    _seq2seq,
    _source,
    _token_class,
)

BERT_DROPOUT_OFF = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _causal_right(config, gen, padding) -> dict:
    """hf_lm.testing's causal-LM batch, right-padded: with left padding a row's first real token would
    be scored from a padding position, whose output each implementation is free to choose."""
    batch = _source(config, gen, padding)
    return {**batch, "labels": _padded(batch["input_ids"], batch["attention_mask"], -100)}


@dataclass(frozen=True)
class Case:
    reference: Callable[[], torch.nn.Module]
    batch: Callable  # one of hf_lm.testing's batch builders: (config, generator, padding) -> dict
    extra: dict = field(default_factory=dict)  # more forward arguments


def _bert(cls: str, **kw) -> Callable[[], torch.nn.Module]:
    return lambda: getattr(transformers, cls)(transformers.BertConfig(**BERT_SIZES, **BERT_DROPOUT_OFF, **kw))


def _electra(cls: str) -> Callable[[], torch.nn.Module]:
    return lambda: getattr(transformers, cls)(electra_config())


CASES = {
    "gpt2_lm": Case(lambda: transformers.GPT2LMHeadModel(gpt2_config(pad_token_id=0)), _causal_right),
    # no mask: the classifiers find each row's last real token from the pad id, as transformers' do
    "gpt2_cls": Case(
        lambda: transformers.GPT2ForSequenceClassification(gpt2_config(num_labels=3, pad_token_id=0)),
        lambda *a: {k: v for k, v in _classes(_source)(*a).items() if k != "attention_mask"},
    ),
    "llama_lm_gqa": Case(lambda: transformers.LlamaForCausalLM(llama_config(pad_token_id=0)), _causal_right),
    "llama_lm_tied_bias": Case(
        lambda: transformers.LlamaForCausalLM(
            llama_config(tie_word_embeddings=True, attention_bias=True, mlp_bias=True, pad_token_id=0)
        ),
        _causal_right,
    ),
    "llama_cls": Case(
        lambda: transformers.LlamaForSequenceClassification(llama_config(num_labels=2, pad_token_id=0)),
        _classes(_source),
    ),
    "mixtral_lm": Case(
        lambda: transformers.MixtralForCausalLM(mixtral_reference_config(pad_token_id=0)), _causal_right
    ),
    "bert_mlm": Case(_bert("BertForMaskedLM"), _mlm),
    "bert_pretraining": Case(_bert("BertForPreTraining"), _pretraining),
    "bert_cls": Case(_bert("BertForSequenceClassification", num_labels=3), _classes(_encoder)),
    "roberta_mlm": Case(
        lambda: transformers.RobertaForMaskedLM(
            transformers.RobertaConfig(
                **{**BERT_SIZES, "max_position_embeddings": 42},
                **BERT_DROPOUT_OFF,
                pad_token_id=1,
                type_vocab_size=2,
            )
        ),
        _mlm,
    ),
    "electra_discriminator": Case(_electra("ElectraForPreTraining"), _replaced),
    "electra_generator": Case(_electra("ElectraForMaskedLM"), _mlm),
    "electra_cls": Case(_electra("ElectraForSequenceClassification"), _classes(_encoder)),
    "electra_token_cls": Case(_electra("ElectraForTokenClassification"), _token_class),
    "t5": Case(
        lambda: transformers.T5ForConditionalGeneration(
            transformers.T5Config(**T5_REF, num_layers=3, num_decoder_layers=2)
        ),
        _seq2seq,
    ),
    "t5_v1_1": Case(
        lambda: transformers.T5ForConditionalGeneration(
            transformers.T5Config(
                **T5_REF, num_layers=2, feed_forward_proj="gated-gelu", tie_word_embeddings=False
            )
        ),
        _seq2seq,
    ),
    # Capacity 3 for 8 source tokens a sequence binds (one expert gets up to 7), so dropped tokens are
    # part of what must match; no jitter.
    # The router losses are weighted 0: hf_lm defines the load-balancing loss as Mixtral does (over
    # the real tokens of the whole batch), where transformers' Switch averages it per sequence and
    # counts padding (docs/models.md). The router still trains through the experts' weighting.
    "switch": Case(
        lambda: transformers.SwitchTransformersForConditionalGeneration(
            switch_reference_config(
                router_jitter_noise=0.0, dropout_rate=0.0, router_aux_loss_coef=0.0, router_z_loss_coef=0.0
            )
        ),
        _seq2seq,
        {"output_router_logits": True},
    ),
    "bart": Case(
        lambda: transformers.BartForConditionalGeneration(transformers.BartConfig(**BART_REF)), _seq2seq
    ),
}


def reference_gradients(ref: torch.nn.Module, config) -> dict[str, torch.Tensor]:
    """The reference's gradients, converted like its weights: hf_lm parameter name -> gradient.

    Every state-dict key gets its parameter's gradient (a tied key its shared parameter's); buffers
    and parameters no loss reached get zeros, so that the conversion finds every key it reads.
    """
    grads = {}
    for key, value in ref.state_dict(keep_vars=True).items():
        grad = value.grad if isinstance(value, torch.nn.Parameter) else None
        grads[key] = torch.zeros_like(value) if grad is None else grad
    _, convert_state_dict = _CONVERTERS[ref.config.model_type]
    return convert_state_dict(grads, config, ref.config)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_same_loss_and_gradients_as_the_reference(name):
    case = CASES[name]
    torch.manual_seed(0)
    ref = randomize(case.reference())  # norms and biases away from 1 and 0, so that they are compared too
    ours = from_transformers(ref)
    ref.train(), ours.train()
    batch = {**case.batch(ref.config, torch.Generator().manual_seed(1), True), **case.extra}

    expected, again = ref(**batch).loss, ref(**batch).loss
    assert torch.equal(expected, again), "the reference's training loss is not deterministic: a dropout is on"
    got = ours(**batch).loss
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    expected.backward()
    got.backward()

    want = reference_gradients(ref, ours.config)  # its keys are hf_lm's: from_transformers loaded them
    # the converters write q, k and v stacked (`qkv_proj`), which loading regroups: so do the gradients
    for module_name, module in ours.named_modules():
        if isinstance(module, Attention):
            regroup_stacked_qkv(module, want, module_name + ".")
    for param_name, param in ours.named_parameters():
        assert param_name in want, f"{param_name} has no counterpart in the reference"
        target = want[param_name]
        assert param.grad is not None, (
            f"{param_name}: no gradient reaches it (the reference's norm is {target.norm():.3g})"
        )
        scale = target.abs().max().item()
        error = (param.grad - target).abs().max().item()
        assert error <= 1e-4 * scale + 1e-8, (
            f"{param_name}: max |Δ grad| {error:.3g} against a max |grad| of {scale:.3g}"
        )
