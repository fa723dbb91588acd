"""Every hf_lm model class as a tiny, ready-to-run test case, for suites that must cover all families
(the test suite, and `make gpu-check` on a GPU machine).

`FAMILY_CASES` has one `FamilyCase` per model class of the family table `hf_lm.FAMILIES` (the test
`test_precision.py::test_family_table_covers_the_registry` fails when a class is added without one).
The sweeps over it: tests/test_model_properties.py (save/load and remote code, caches, padding,
resizing, feature extraction, contiguous logits, `num_items_in_batch`, dtype moves),
tests/test_bad_input.py, tests/test_precision.py and tests/test_device_placement.py.
`VARIANT_CASES` adds the causal LM or the masked LM of each entry of `GPT_VARIANTS` and
`BERT_VARIANTS` (grids over the variant fields: positions, norms, activations, grouped queries, ALBERT
sharing) and of `FEATURE_VARIANTS` (ALBERT's shared GPT, sparse attention),
for the sweeps where a variant's own code can fail: remote code, half precision, devices.
A case builds a tiny model (vocab 64, width 16-32, 1-2 layers, no dropout) and a valid batch for its
head, labels included, so a suite needs no per-family code:

    import pytest
    from hf_lm.testing import FAMILY_CASES

    @pytest.mark.parametrize("case", FAMILY_CASES, ids=str)
    def test_something(case):
        model = case.make_model(seed=0)           # eval mode, fp32, on the CPU (`.to(device)` it)
        batch = case.make_batch(device="cpu")     # a dict of tensors for model(**batch)
        out = model(**batch)                      # out.loss is set for every head with labels
        if case.generates:
            model.generate(**case.prompt(batch), max_new_tokens=2)

Batches (B = 2 rows, T = 8 tokens; ids avoid the special tokens pad 0, bos 1, eos 2):
- causal LMs: `input_ids`, `attention_mask` (row 1 left-padded, as prompts for `generate()` are),
  `labels` = `input_ids` with -100 on padding (the model shifts them);
- BERT: right padding and `token_type_ids` (two segments); MLM `labels` -100 except ~30% of the
  real tokens; pre-training adds `next_sentence_label`; sequence classification class ids (B,),
  token classification per-token ids (-100 on padding), question answering `start_positions` /
  `end_positions`, multiple choice (B, C=3, T) inputs and a choice id;
- encoder-decoders: a right-padded source and `labels` (B, 6) (-100 on padding) for the LM heads,
  `decoder_input_ids` / `decoder_attention_mask` for the bare models, class ids for the classifiers;
  the Mask-Predict heads: the target with ~half its tokens masked as `decoder_input_ids`, `labels`
  on the masked tokens, `length_labels`.

`make_batch(padding=False)` gives full-length rows (an all-ones mask): recurrent models then take
torch's fused kernels, which they skip when a step needs masking.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from hf_lm import (
    HfLmBartConfig,
    HfLmBartForConditionalGeneration,
    HfLmBartForMaskPredict,
    HfLmBartForSequenceClassification,
    HfLmBartModel,
    HfLmBertConfig,
    HfLmBertForMaskedLM,
    HfLmBertForMultipleChoice,
    HfLmBertForPreTraining,
    HfLmBertForQuestionAnswering,
    HfLmBertForSequenceClassification,
    HfLmBertForTokenClassification,
    HfLmBertModel,
    HfLmElectraConfig,
    HfLmElectraForMaskedLM,
    HfLmElectraForPreTraining,
    HfLmElectraForSequenceClassification,
    HfLmElectraForTokenClassification,
    HfLmElectraModel,
    HfLmFFNNConfig,
    HfLmFFNNForCausalLM,
    HfLmFFNNModel,
    HfLmGPTConfig,
    HfLmGPTForCausalLM,
    HfLmGPTForSequenceClassification,
    HfLmGPTModel,
    HfLmNGramConfig,
    HfLmNGramForCausalLM,
    HfLmRNNConfig,
    HfLmRNNForCausalLM,
    HfLmRNNModel,
    HfLmRNNSeq2SeqConfig,
    HfLmRNNSeq2SeqForConditionalGeneration,
    HfLmRNNSeq2SeqModel,
    HfLmT5Config,
    HfLmT5ForConditionalGeneration,
    HfLmT5ForMaskPredict,
    HfLmT5ForSequenceClassification,
    HfLmT5Model,
)

VOCAB = 64
SPECIAL = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
BATCH, SEQ, TARGET, CHOICES = 2, 8, 6, 3
FIRST_ID = 3  # random ids are drawn from [FIRST_ID, VOCAB): never a special token

# ----------------------------------------------------------------------------------------------
# Tiny configs, one per family. The inits are wider than the defaults, so that random weights give
# peaked logits and outputs that visibly depend on every weight (not a near-uniform log(VOCAB) loss).
# ----------------------------------------------------------------------------------------------

_TRANSFORMER = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=32,
    hidden_dropout=0.0,
    attention_dropout=0.0,
    initializer_range=0.2,
    **SPECIAL,
)


def _gpt() -> HfLmGPTConfig:
    return HfLmGPTConfig(**_TRANSFORMER)


def _gpt_moe() -> HfLmGPTConfig:
    # a mixture of experts (top-2 of 3) in every layer: the sweeps cover the routed feed-forward too
    return HfLmGPTConfig(**_TRANSFORMER, num_local_experts=3, num_experts_per_tok=2)


def _t5_moe() -> HfLmT5Config:
    # Switch top-1 in the second layer of each stack
    return HfLmT5Config(
        **_TRANSFORMER, decoder_start_token_id=0, relative_attention_num_buckets=8, num_local_experts=3,
        num_experts_per_tok=1, norm_topk_prob=False, encoder_sparse_step=2, decoder_sparse_step=2,
    )  # fmt: skip


def _bert() -> HfLmBertConfig:
    return HfLmBertConfig(**_TRANSFORMER)


def _electra() -> HfLmElectraConfig:
    # embeddings narrower than the hidden size: the projection E -> C is exercised (ELECTRA-small's shape)
    return HfLmElectraConfig(**_TRANSFORMER, embedding_size=16)


def _t5() -> HfLmT5Config:
    return HfLmT5Config(**_TRANSFORMER, decoder_start_token_id=0, relative_attention_num_buckets=8)


def _bart() -> HfLmBartConfig:
    return HfLmBartConfig(**_TRANSFORMER, decoder_start_token_id=2)


# Mask-Predict's conditional masked LMs: a bidirectional decoder; the mask is id 1, which an
# encoder-decoder's targets never hold (BART's bos)
_CMLM = dict(decoder_attention="bidirectional", mask_token_id=1)


def _t5_cmlm() -> HfLmT5Config:
    return HfLmT5Config(**_TRANSFORMER, **_CMLM, decoder_start_token_id=0, relative_attention_num_buckets=8)


def _bart_cmlm() -> HfLmBartConfig:
    return HfLmBartConfig(**_TRANSFORMER, **_CMLM, decoder_start_token_id=2)


def _rnn() -> HfLmRNNConfig:
    # the LSTM on torch's fused kernel: the cell and path that bf16 autocast once broke on CPU
    return HfLmRNNConfig(
        vocab_size=VOCAB,
        cell_type="lstm",
        hidden_size=16,
        num_hidden_layers=2,
        hidden_dropout=0.0,
        initializer_range=1.0,
        **SPECIAL,
    )


def _rnn_seq2seq() -> HfLmRNNSeq2SeqConfig:
    return HfLmRNNSeq2SeqConfig(
        vocab_size=VOCAB,
        embedding_size=16,
        hidden_size=16,
        cell_type="lstm",
        encoder_layers=1,
        decoder_layers=2,
        bidirectional_encoder=True,
        attention="bahdanau",
        hidden_dropout=0.0,
        initializer_range=1.0,
        **SPECIAL,
    )


def _ngram() -> HfLmNGramConfig:
    return HfLmNGramConfig(vocab_size=VOCAB, order=3, **SPECIAL)


def _ffnn() -> HfLmFFNNConfig:
    return HfLmFFNNConfig(
        vocab_size=VOCAB,
        context_size=3,
        hidden_size=16,
        intermediate_size=32,
        initializer_range=0.3,
        **SPECIAL,
    )


# ----------------------------------------------------------------------------------------------
# Config variants. FAMILY_CASES builds each class with its family's default stack; the grids below
# change the variant fields (positions, norms, activations, grouped queries, ALBERT sharing) so that
# every value of every field appears at least once, and VARIANT_CASES builds the causal LM or the
# masked LM once per entry: the sweeps and `make gpu-check` reach ALiBi, xPos, T5's relative biases,
# RoPE, gated feed-forwards and grouped queries too. The grids are overrides of any tiny config.
# ----------------------------------------------------------------------------------------------

GPT_VARIANTS = {
    "gpt2": dict(),
    "llama": dict(
        position_embedding_type="rope",
        norm_type="rmsnorm",
        hidden_act="swiglu",
        attention_bias=False,
        mlp_bias=False,
        tie_word_embeddings=False,
        num_key_value_heads=2,
    ),
    "alibi_mqa": dict(position_embedding_type="alibi", num_key_value_heads=1, hidden_act="geglu"),
    "sinusoidal_post": dict(position_embedding_type="sinusoidal", norm_position="post", hidden_act="relu"),
    "nope_reglu": dict(position_embedding_type="none", hidden_act="reglu", norm_type="rmsnorm"),
    "learned_gelu_post_rms": dict(
        hidden_act="gelu", norm_position="post", norm_type="rmsnorm", num_key_value_heads=2
    ),
    "alibi_6heads": dict(
        position_embedding_type="alibi", num_attention_heads=6, hidden_size=48, num_key_value_heads=3
    ),
    "t5bias_geglu": dict(
        position_embedding_type="relative_buckets",
        hidden_act="geglu_tanh",
        norm_type="rmsnorm",
        attention_bias=False,
        mlp_bias=False,
        attention_scale=1.0,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
    ),
    "rope_headdim": dict(
        position_embedding_type="rope", head_dim=16, num_key_value_heads=1, tie_word_embeddings=False
    ),
    # a small scale base, so the tiny tests see the decay (the paper's is 512)
    "xpos_gqa": dict(position_embedding_type="xpos", xpos_scale_base=16, num_key_value_heads=2),
}
# every position scheme, both norm placements, gated and plain feed-forwards, the presets' options
BERT_VARIANTS = {
    "bert": dict(),
    "roberta": dict(type_vocab_size=0, norm_eps=1e-5, pad_token_id=1),
    "albert": dict(embedding_size=16, num_hidden_groups=1, hidden_act="gelu_tanh", num_hidden_layers=3),
    "prenorm_rope_swiglu": dict(
        norm_position="pre", norm_type="rmsnorm", position_embedding_type="rope", hidden_act="swiglu"
    ),
    "alibi_gqa": dict(position_embedding_type="alibi", num_key_value_heads=2, hidden_act="geglu"),
    "sinusoidal_groups": dict(position_embedding_type="sinusoidal", num_hidden_layers=4, num_hidden_groups=2),
    "nope": dict(position_embedding_type="none", hidden_act="relu"),
}
# small sparse-attention settings, so that a short row shows every pattern's edges
SPARSE_SETTINGS = dict(
    attention_window=2,
    attention_dilation=3,
    num_global_tokens=2,
    attention_block_size=4,
    num_random_keys=2,
    attention_random_seed=7,
)
# features beyond the grids' fields that are config overrides too (not in the grids, whose every entry
# the GPT and BERT test files also sweep): ALBERT sharing, sparse attention
FEATURE_VARIANTS = {
    "gpt": {
        "albert": dict(embedding_size=16, num_hidden_layers=3, num_hidden_groups=1),
        "band_dilated": dict(attention_pattern="band+dilated", **SPARSE_SETTINGS),
    },
    "bert": {"band_global_random": dict(attention_pattern="band+global+random", **SPARSE_SETTINGS)},
}


def _variant(config_class: type, overrides: dict) -> Callable:
    """A config maker: the tiny Transformer config with a grid entry's overrides."""
    return lambda: config_class(**{**_TRANSFORMER, **overrides})


# ----------------------------------------------------------------------------------------------
# Batches, one builder per kind of head: (config, generator, padding) -> dict of CPU tensors
# ----------------------------------------------------------------------------------------------


def _ids(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randint(FIRST_ID, VOCAB, shape, generator=gen)


def _mask(length: int, padding: bool, left: bool = False) -> torch.Tensor:
    """(B, length): row 0 full, row 1 three tokens short (padded on the left or the right)."""
    mask = torch.ones(BATCH, length, dtype=torch.long)
    if padding:
        mask[1, :3] = 0
        if not left:
            mask[1] = mask[1].flip(0)
    return mask


def _padded(ids: torch.Tensor, mask: torch.Tensor, fill: int) -> torch.Tensor:
    return ids.masked_fill(mask == 0, fill)


def _causal(config, gen, padding, labels=True) -> dict:
    mask = _mask(SEQ, padding, left=True)
    ids = _padded(_ids(gen, BATCH, SEQ), mask, config.pad_token_id)
    batch = {"input_ids": ids, "attention_mask": mask}
    if labels:
        batch["labels"] = _padded(ids, mask, -100)
    return batch


def _decoder_only(config, gen, padding) -> dict:
    return _causal(config, gen, padding, labels=False)


def _encoder(config, gen, padding) -> dict:
    """BERT inputs: right padding, segment A then segment B (no segments where the config has none,
    as RoBERTa)."""
    mask = _mask(SEQ, padding)
    batch = {"input_ids": _padded(_ids(gen, BATCH, SEQ), mask, config.pad_token_id), "attention_mask": mask}
    if config.type_vocab_size > 0:
        token_types = torch.zeros(BATCH, SEQ, dtype=torch.long)
        if config.type_vocab_size > 1:
            token_types[:, SEQ // 2 :] = 1
        batch["token_type_ids"] = token_types * mask
    return batch


def _mlm(config, gen, padding) -> dict:
    batch = _encoder(config, gen, padding)
    chosen = (torch.rand(BATCH, SEQ, generator=gen) < 0.3) & batch["attention_mask"].bool()
    chosen[:, 1] = True  # at least one prediction per row
    batch["labels"] = batch["input_ids"].masked_fill(~chosen, -100)
    return batch


def _pretraining(config, gen, padding) -> dict:
    return {**_mlm(config, gen, padding), "next_sentence_label": torch.tensor([0, 1])}


def _replaced(config, gen, padding) -> dict:
    """ELECTRA discriminator inputs: 1 where a token was replaced, 0 where it is the original."""
    batch = _encoder(config, gen, padding)
    labels = torch.randint(0, 2, (BATCH, SEQ), generator=gen)
    return {**batch, "labels": _padded(labels, batch["attention_mask"], -100)}


def _classes(inputs: Callable) -> Callable:
    """A sequence-classification batch: `inputs`' batch and one class id per row."""

    def build(config, gen, padding) -> dict:
        return {**inputs(config, gen, padding), "labels": torch.tensor([0, config.num_labels - 1])}

    return build


def _token_class(config, gen, padding) -> dict:
    batch = _encoder(config, gen, padding)
    labels = torch.randint(0, config.num_labels, (BATCH, SEQ), generator=gen)
    return {**batch, "labels": _padded(labels, batch["attention_mask"], -100)}


def _question_answering(config, gen, padding) -> dict:
    return {
        **_encoder(config, gen, padding),
        "start_positions": torch.tensor([1, 2]),
        "end_positions": torch.tensor([3, 4]),
    }


def _multiple_choice(config, gen, padding) -> dict:
    """(B, C, T) inputs: C encoder batches stacked on dim 1 (row 1 padded in each); a choice per row."""
    choices = [_encoder(config, gen, padding) for _ in range(CHOICES)]
    batch = {key: torch.stack([c[key] for c in choices], dim=1) for key in choices[0]}  # (B, C, T) each
    return {**batch, "labels": torch.tensor([0, CHOICES - 1])}


def _source(config, gen, padding) -> dict:
    mask = _mask(SEQ, padding)
    return {"input_ids": _padded(_ids(gen, BATCH, SEQ), mask, config.pad_token_id), "attention_mask": mask}


def _seq2seq(config, gen, padding) -> dict:
    target_mask = _mask(TARGET, padding)
    labels = _padded(_ids(gen, BATCH, TARGET), target_mask, -100)
    return {**_source(config, gen, padding), "labels": labels}


def _cmlm(config, gen, padding) -> dict:
    """A conditional masked LM's batch: the target with some tokens masked, labels on those, lengths."""
    target_mask = _mask(TARGET, padding)
    target = _padded(_ids(gen, BATCH, TARGET), target_mask, config.pad_token_id)
    chosen = (torch.rand(BATCH, TARGET, generator=gen) < 0.5) & target_mask.bool()
    chosen[:, 0] = True  # at least one prediction per row
    return {
        **_source(config, gen, padding),
        "decoder_input_ids": target.masked_fill(chosen, config.mask_token_id),
        "decoder_attention_mask": target_mask,
        "labels": target.masked_fill(~chosen, -100),
        "length_labels": target_mask.sum(dim=1),
    }


def _seq2seq_bare(config, gen, padding) -> dict:
    """A bare encoder-decoder takes the decoder inputs themselves (no labels, no loss)."""
    target_mask = _mask(TARGET, padding)
    decoder_ids = _padded(_ids(gen, BATCH, TARGET), target_mask, config.pad_token_id)
    decoder_ids[:, 0] = config.decoder_start_token_id
    return {
        **_source(config, gen, padding),
        "decoder_input_ids": decoder_ids,
        "decoder_attention_mask": target_mask,
    }


# ----------------------------------------------------------------------------------------------
# The table
# ----------------------------------------------------------------------------------------------


def _fit_ngram(config: HfLmNGramConfig, seed: int) -> HfLmNGramForCausalLM:
    """A fitted n-gram model (an unfitted one has empty count tables): the counts of 300 Zipf-distributed
    ids (repeats at every order, so modified Kneser-Ney has all its discounts) and of every id once."""
    gen = torch.Generator().manual_seed(seed)
    zipf = 1.0 / torch.arange(1, VOCAB - FIRST_ID + 1)  # P(rank r) ~ 1/r
    tokens = FIRST_ID + torch.multinomial(zipf, 300, replacement=True, generator=gen)
    return HfLmNGramForCausalLM.fit([tokens.tolist(), list(range(VOCAB))], config)


@dataclass(frozen=True)
class FamilyCase:
    """One model class with a tiny config and a valid batch for its head.

    Attributes:
        name: a short test id, e.g. "bert-mlm".
        model_class: the hf_lm model class.
        make_config: a fresh tiny config.
        batch_fn: the builder of `make_batch` (a function of this module: config, generator, padding).
        generates: the class supports `generate()` (causal LMs and conditional generation).
        build: (config, seed) -> model, where `model_class(config)` is not enough (the n-gram model
            is fitted on a small corpus).
    """

    name: str
    model_class: type
    make_config: Callable
    batch_fn: Callable
    generates: bool = False
    build: Callable | None = None

    def __str__(self) -> str:  # so that `pytest.mark.parametrize(..., ids=str)` shows the name
        return self.name

    def make_model(self, seed: int = 0):
        """The tiny model with weights drawn from `seed`, in eval mode, fp32, on the CPU."""
        config = self.make_config()
        if self.build is not None:
            return self.build(config, seed).eval()
        torch.manual_seed(seed)
        return self.model_class(config).eval()

    def make_batch(self, device=None, *, padding: bool = True, seed: int = 0) -> dict[str, torch.Tensor]:
        """A valid batch for `model(**batch)` (labels included when the head takes them).

        Args:
            device: where the tensors go (the CPU when None).
            padding: pad one row (the masks then have zeros); False gives full rows.
            seed: the token ids drawn.
        """
        gen = torch.Generator().manual_seed(seed)
        batch = self.batch_fn(self.make_config(), gen, padding)
        return {key: value.to(device) for key, value in batch.items()}

    @staticmethod
    def prompt(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The part of a batch that `generate()` takes: `input_ids` and `attention_mask`."""
        return {key: batch[key] for key in ("input_ids", "attention_mask")}


FAMILY_CASES: list[FamilyCase] = [
    FamilyCase("gpt", HfLmGPTModel, _gpt, _decoder_only),
    FamilyCase("gpt-causal-lm", HfLmGPTForCausalLM, _gpt, _causal, generates=True),
    FamilyCase("gpt-seq-cls", HfLmGPTForSequenceClassification, _gpt, _classes(_decoder_only)),
    FamilyCase("bert", HfLmBertModel, _bert, _encoder),
    FamilyCase("bert-mlm", HfLmBertForMaskedLM, _bert, _mlm),
    FamilyCase("bert-pretraining", HfLmBertForPreTraining, _bert, _pretraining),
    FamilyCase("bert-seq-cls", HfLmBertForSequenceClassification, _bert, _classes(_encoder)),
    FamilyCase("bert-token-cls", HfLmBertForTokenClassification, _bert, _token_class),
    FamilyCase("bert-qa", HfLmBertForQuestionAnswering, _bert, _question_answering),
    FamilyCase("bert-multiple-choice", HfLmBertForMultipleChoice, _bert, _multiple_choice),
    FamilyCase("electra", HfLmElectraModel, _electra, _encoder),
    FamilyCase("electra-mlm", HfLmElectraForMaskedLM, _electra, _mlm),
    FamilyCase("electra-pretraining", HfLmElectraForPreTraining, _electra, _replaced),
    FamilyCase("electra-seq-cls", HfLmElectraForSequenceClassification, _electra, _classes(_encoder)),
    FamilyCase("electra-token-cls", HfLmElectraForTokenClassification, _electra, _token_class),
    FamilyCase("t5", HfLmT5Model, _t5, _seq2seq_bare),
    FamilyCase("t5-seq2seq-lm", HfLmT5ForConditionalGeneration, _t5, _seq2seq, generates=True),
    FamilyCase("t5-seq-cls", HfLmT5ForSequenceClassification, _t5, _classes(_source)),
    FamilyCase("t5-mask-predict", HfLmT5ForMaskPredict, _t5_cmlm, _cmlm),
    FamilyCase("bart", HfLmBartModel, _bart, _seq2seq_bare),
    FamilyCase("bart-seq2seq-lm", HfLmBartForConditionalGeneration, _bart, _seq2seq, generates=True),
    FamilyCase("bart-seq-cls", HfLmBartForSequenceClassification, _bart, _classes(_source)),
    FamilyCase("bart-mask-predict", HfLmBartForMaskPredict, _bart_cmlm, _cmlm),
    FamilyCase("rnn", HfLmRNNModel, _rnn, _decoder_only),
    FamilyCase("rnn-causal-lm", HfLmRNNForCausalLM, _rnn, _causal, generates=True),
    FamilyCase("rnn-seq2seq", HfLmRNNSeq2SeqModel, _rnn_seq2seq, _seq2seq_bare),
    FamilyCase(
        "rnn-seq2seq-lm", HfLmRNNSeq2SeqForConditionalGeneration, _rnn_seq2seq, _seq2seq, generates=True
    ),
    FamilyCase("ngram-causal-lm", HfLmNGramForCausalLM, _ngram, _causal, generates=True, build=_fit_ngram),
    FamilyCase("ffnn", HfLmFFNNModel, _ffnn, _decoder_only),
    FamilyCase("ffnn-causal-lm", HfLmFFNNForCausalLM, _ffnn, _causal, generates=True),
    FamilyCase("gpt-moe-causal-lm", HfLmGPTForCausalLM, _gpt_moe, _causal, generates=True),
    FamilyCase("t5-moe-seq2seq-lm", HfLmT5ForConditionalGeneration, _t5_moe, _seq2seq, generates=True),
]
# the grids' entries other than the defaults, and the feature variants: the causal LM or masked LM of each
VARIANT_CASES: list[FamilyCase] = [
    FamilyCase(
        f"gpt-causal-lm-{name}", HfLmGPTForCausalLM, _variant(HfLmGPTConfig, o), _causal, generates=True
    )
    for name, o in {**GPT_VARIANTS, **FEATURE_VARIANTS["gpt"]}.items()
    if o
] + [
    FamilyCase(f"bert-mlm-{name}", HfLmBertForMaskedLM, _variant(HfLmBertConfig, o), _mlm)
    for name, o in {**BERT_VARIANTS, **FEATURE_VARIANTS["bert"]}.items()
    if o
]
# the model classes that generate(), and those of them with a static cache (GPT, T5, BART and their
# mixtures of experts), whose decoding step compiles; the recurrent, n-gram and feed-forward models
# keep no attention cache
GENERATING_CASES = [case for case in FAMILY_CASES if case.generates]
STATIC_CACHE_CASES = [case for case in GENERATING_CASES if case.model_class._can_compile_fullgraph]
