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
that the loss really is deterministic.
"""

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import transformers
from test_bert_convert import SIZES as BERT_SIZES
from test_electra import _reference_config as electra_config
from test_gpt_convert import gpt2_config, llama_config, randomize
from test_moe import mixtral_reference_config, switch_reference_config
from test_seq2seq_model import BART_REF, T5_REF

from hf_lm.convert import _CONVERTERS, from_transformers

V_CAUSAL = gpt2_config().vocab_size  # one vocabulary per reference family, from its config
BERT_DROPOUT_OFF = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _padded_ids(vocab: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(3, 13) ids from [3, vocab) and their mask, rows 1 and 2 right-padded with id 0.

    Right padding, as in training: with left padding a row's first real token would be scored from a
    padding position, whose output each implementation is free to choose.
    """
    ids = torch.randint(3, vocab, (3, 13), generator=_gen(seed))
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    mask[2, 9:] = 0
    return ids.masked_fill(mask == 0, 0), mask


def causal_lm(vocab: int) -> dict:
    """Padding is never scored."""
    ids, mask = _padded_ids(vocab)
    return dict(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100))


def sequence_classification(vocab: int) -> dict:
    """No mask: the classifiers find each row's last real token from the pad id (0), as transformers' do."""
    ids, _ = _padded_ids(vocab)
    return dict(input_ids=ids, labels=torch.tensor([0, 1, 1]))  # valid for 2 or more labels


def masked_lm(vocab: int, pad_id: int = 0) -> dict:
    """Right padding, two segments, about 30% of the real tokens scored."""
    ids, mask = _padded_ids(vocab)
    ids = ids.masked_fill(mask == 0, pad_id)
    scored = (torch.rand(ids.shape, generator=_gen(2)) < 0.3) & mask.bool()
    scored[0, 1] = True
    token_types = torch.zeros_like(ids)
    token_types[:, 6:] = 1
    return dict(
        input_ids=ids,
        attention_mask=mask,
        token_type_ids=token_types * mask,
        labels=ids.masked_fill(~scored, -100),
    )


def encoder_labels(vocab: int, make_labels: Callable[[torch.Tensor, torch.Tensor], dict]) -> dict:
    ids, mask = _padded_ids(vocab)
    return dict(input_ids=ids, attention_mask=mask, **make_labels(ids, mask))


def seq2seq(vocab: int) -> dict:
    """A right-padded source and targets of another length, target padding unscored."""
    ids, mask = _padded_ids(vocab)
    targets = torch.randint(3, vocab, (3, 7), generator=_gen(3))
    targets[2, 5:] = -100
    return dict(input_ids=ids, attention_mask=mask, labels=targets)


@dataclass(frozen=True)
class Case:
    reference: Callable[[], torch.nn.Module]
    batch: Callable[[], dict]


def _bert(cls: str, **kw) -> Callable[[], torch.nn.Module]:
    return lambda: getattr(transformers, cls)(transformers.BertConfig(**BERT_SIZES, **BERT_DROPOUT_OFF, **kw))


def _electra(cls: str) -> Callable[[], torch.nn.Module]:
    return lambda: getattr(transformers, cls)(electra_config())


V_BERT, V_ELECTRA, V_SEQ2SEQ = BERT_SIZES["vocab_size"], electra_config().vocab_size, T5_REF["vocab_size"]

CASES = {
    "gpt2_lm": Case(lambda: transformers.GPT2LMHeadModel(gpt2_config()), lambda: causal_lm(V_CAUSAL)),
    "gpt2_cls": Case(
        lambda: transformers.GPT2ForSequenceClassification(gpt2_config(num_labels=3, pad_token_id=0)),
        lambda: sequence_classification(V_CAUSAL),
    ),
    "llama_lm_gqa": Case(lambda: transformers.LlamaForCausalLM(llama_config()), lambda: causal_lm(V_CAUSAL)),
    "llama_lm_tied_bias": Case(
        lambda: transformers.LlamaForCausalLM(
            llama_config(tie_word_embeddings=True, attention_bias=True, mlp_bias=True)
        ),
        lambda: causal_lm(V_CAUSAL),
    ),
    "llama_cls": Case(
        lambda: transformers.LlamaForSequenceClassification(llama_config(num_labels=2, pad_token_id=0)),
        lambda: sequence_classification(V_CAUSAL),
    ),
    "mixtral_lm": Case(
        lambda: transformers.MixtralForCausalLM(mixtral_reference_config()),
        lambda: causal_lm(mixtral_reference_config().vocab_size),
    ),
    "bert_mlm": Case(_bert("BertForMaskedLM"), lambda: masked_lm(V_BERT)),
    "bert_pretraining": Case(
        _bert("BertForPreTraining"),
        lambda: dict(masked_lm(V_BERT), next_sentence_label=torch.tensor([0, 1, 1])),
    ),
    "bert_cls": Case(
        _bert("BertForSequenceClassification", num_labels=3),
        lambda: dict(masked_lm(V_BERT), labels=torch.tensor([2, 0, 1])),
    ),
    "roberta_mlm": Case(
        lambda: transformers.RobertaForMaskedLM(
            transformers.RobertaConfig(
                **{**BERT_SIZES, "max_position_embeddings": 42}, **BERT_DROPOUT_OFF, pad_token_id=1
            )
        ),
        lambda: {k: v for k, v in masked_lm(V_BERT, pad_id=1).items() if k != "token_type_ids"},
    ),
    "electra_discriminator": Case(
        _electra("ElectraForPreTraining"),
        lambda: encoder_labels(
            V_ELECTRA, lambda ids, mask: {"labels": torch.randint(0, 2, ids.shape, generator=_gen(4))}
        ),
    ),
    "electra_generator": Case(_electra("ElectraForMaskedLM"), lambda: masked_lm(V_ELECTRA)),
    "electra_cls": Case(
        _electra("ElectraForSequenceClassification"),
        lambda: encoder_labels(V_ELECTRA, lambda ids, mask: {"labels": torch.tensor([2, 0, 1])}),
    ),
    "electra_token_cls": Case(
        _electra("ElectraForTokenClassification"),
        lambda: encoder_labels(
            V_ELECTRA,
            lambda ids, mask: {
                "labels": torch.randint(0, 3, ids.shape, generator=_gen(5)).masked_fill(mask == 0, -100)
            },
        ),
    ),
    "t5": Case(
        lambda: transformers.T5ForConditionalGeneration(
            transformers.T5Config(**T5_REF, num_layers=3, num_decoder_layers=2)
        ),
        lambda: seq2seq(V_SEQ2SEQ),
    ),
    "t5_v1_1": Case(
        lambda: transformers.T5ForConditionalGeneration(
            transformers.T5Config(
                **T5_REF, num_layers=2, feed_forward_proj="gated-gelu", tie_word_embeddings=False
            )
        ),
        lambda: seq2seq(V_SEQ2SEQ),
    ),
    # Capacity 3 of 13 source tokens binds, so dropped tokens are part of what must match; no jitter.
    # The router losses are weighted 0: hf_lm defines the load-balancing loss as Mixtral does (over
    # the real tokens of the whole batch), where transformers' Switch averages it per sequence and
    # counts padding (docs/models.md). The router still trains through the experts' weighting.
    "switch": Case(
        lambda: transformers.SwitchTransformersForConditionalGeneration(
            switch_reference_config(
                router_jitter_noise=0.0, dropout_rate=0.0, router_aux_loss_coef=0.0, router_z_loss_coef=0.0
            )
        ),
        lambda: dict(seq2seq(switch_reference_config().vocab_size), output_router_logits=True),
    ),
    "bart": Case(
        lambda: transformers.BartForConditionalGeneration(transformers.BartConfig(**BART_REF)),
        lambda: seq2seq(V_SEQ2SEQ),
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
    batch = case.batch()

    expected, again = ref(**batch).loss, ref(**batch).loss
    assert torch.equal(expected, again), "the reference's training loss is not deterministic: a dropout is on"
    got = ours(**batch).loss
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    expected.backward()
    got.backward()

    want = reference_gradients(ref, ours.config)  # its keys are hf_lm's: from_transformers loaded them
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
