"""Translation with `Seq2SeqTrainer`: Multi30k De→En, or any line-aligned parallel text files.

    # from scratch: one joint byte-level BPE tokenizer on both languages and a 3+3-layer Transformer
    python -m training.finetune_translation --data_dir ../shared/data/multi30k --source_lang de \\
        --target_lang en --from_scratch --family transformer --hidden_size 256 --intermediate_size 512 \\
        --num_hidden_layers 3 --num_attention_heads 8 --learning_rate 5e-4 --output_dir out/multi30k
    # from a pretrained encoder-decoder folder (e.g. `training.train --objective span_corruption`)
    python -m training.finetune_translation --data_dir ../shared/data/multi30k \\
        --model_name_or_path out/t5/final --learning_rate 3e-4 --output_dir out/multi30k-t5
    python -m training.finetune_translation run.yaml   # the same keys in a JSON/YAML file

Every `transformers.Seq2SeqTrainingArguments` flag works (`--num_train_epochs`, `--max_steps`,
`--eval_strategy steps --eval_steps 500`, `--gradient_accumulation_steps`, `--label_smoothing_factor`,
`--train_sampling_strategy group_by_length` ...); the defaults differ in generating for evaluation
(`predict_with_generate`, beam search with `--generation_num_beams 5`, at most
`--generation_max_length 128` tokens), evaluating and saving every epoch, evaluating 64
sentences per batch, logging every 50 steps, keeping one checkpoint and reporting to no tracker.

Data and tokenization: `training.translation_data` (the data flags, reading line-aligned parallel
files, EOS at the end of every encoding).

Metrics: corpus BLEU with sacrebleu (this package's offline `evaluate` module
`hf_lm/metrics/bleu`, 13a tokenization, cased; `bleu_lowercase` too) of the detokenized
generations against the raw reference lines, on the validation split during training and at the
end, and on the test split with beam search and, for comparison, greedy decoding.

Outputs under `output_dir`: Trainer's `checkpoint-*/`, `metrics.json` (train, `eval_*`, `test_*`
with beam search, `test_greedy_*`, sizes, time, sacrebleu's signature), `test_predictions.txt`
and `test_predictions_greedy.txt` (one translation per line), `trainer_state.json` (the log
history) and `final/`: weights, config with `auto_map` and the model code, tokenizer,
`generation_config.json` (the beam size and length used for the test), and a model card with
the test BLEU as `model-index`. `pipeline("hflm-translation", model="out/multi30k/final",
trust_remote_code=True)` translates with the same prefix (stored as `config.prefix`).

Gradient accumulation: `Trainer` passes `num_items_in_batch` (the number of target tokens in the
whole accumulated batch) to models whose `forward` takes `**kwargs`, and then stops dividing the
loss by the accumulation steps; hf_lm's encoder-decoders return the summed token loss divided
by it, so accumulation equals one batch of the combined size (tested).

Wall-clock budget: `--max_train_seconds S` stops training at the first optimizer-step boundary
after S seconds of `trainer.train()` (evaluations during training included), whatever
`--num_train_epochs`/`--max_steps` say; the final validation, test BLEU and save then run as
usual (`training.trainer_common.WallClockBudgetCallback`). The learning-rate schedule
still spans the planned steps, so a budgeted run wants either `--lr_scheduler_type
constant_with_warmup`, or `--budget_schedule linear`: after the warmup the rate decays to 0 with
the share of the budget spent, reaching 0 where the budget stops training on any hardware (with a
generous `--num_train_epochs`, so that the budget ends the run). `metrics.json` records
`train_steps`, `train_epochs` and `train_budget_reached`.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import evaluate
import numpy as np
import torch
from transformers import (
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    DataCollatorForSeq2Seq,
    PreTrainedModel,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    set_seed,
)

import hf_lm
from hf_lm.cards import write_model_card
from hf_lm.families import FAMILIES, Family
from hf_lm.models.hflm_configuration_rnn_seq2seq import ATTENTION_TYPES
from hf_lm.models.hflm_rnn_blocks import RNN_CELLS
from hf_lm.pipelines_seq2seq import DEFAULT_TRANSLATION_TEMPLATE, check_generation_fits, language_name

from . import trainer_common as common
from .args import optional_positive, parse_dataclasses
from .data.collators_seq2seq import DataCollatorForMaskPredict
from .data.tokenizer import TOKENIZER_KINDS, train_tokenizer
from .translation_data import (
    TranslationDataArguments,
    ensure_eos,
    load_translation_dataset,
    sides,
    tokenize_dataset,
)

logger = logging.getLogger(__name__)

# the offline `evaluate` module of this package (corpus BLEU with sacrebleu)
BLEU_METRIC = Path(hf_lm.__file__).resolve().parent / "metrics" / "bleu"


def _scratch_choices() -> dict[str, tuple[Family, str | None]]:
    """`--family` -> (family, preset): every encoder-decoder family of the table, and each of its
    presets by name ("t5_v1_1"; "transformer", Vaswani et al. (2017) in BART's shape: sinusoidal
    positions, post-norm, ReLU, scaled embeddings)."""
    choices = {}
    for family in FAMILIES.values():
        if family.is_encoder_decoder:
            choices[family.name] = (family, family.name if family.name in family.presets else None)
            choices.update({preset: (family, preset) for preset in family.presets if preset not in choices})
    return choices


SCRATCH_FAMILIES = _scratch_choices()

# model types trained with T5's task prefixes (Raffel et al., 2020, appendix D)
T5_MODEL_TYPES = ("hflm_t5", "t5", "mt5", "umt5")

# `--objective` -> the head trained: next-token prediction, or Mask-Predict's conditional masked LM
# (Ghazvininejad et al., 2019: a bidirectional decoder with a length head, decoded in T iterations)
OBJECTIVE_HEADS = {"autoregressive": AutoModelForSeq2SeqLM, "mask_predict": AutoModelForMaskedLM}


@dataclass
class TranslationModelArguments:
    """A pretrained encoder-decoder folder, or the family and size of one trained from scratch."""

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "A saved encoder-decoder folder (AutoModelForSeq2SeqLM)."}
    )
    tokenizer_name_or_path: str | None = field(
        default=None,
        metadata={"help": "The tokenizer folder; default model_name_or_path (from scratch: train one)."},
    )
    trust_remote_code: bool = common.trust_remote_code_field()
    from_scratch: bool = field(
        default=False, metadata={"help": "Train a joint tokenizer on both languages and a fresh model."}
    )
    family: str = field(
        default="transformer",
        metadata={
            "help": f"From scratch: an encoder-decoder family or preset, one of {sorted(SCRATCH_FAMILIES)}."
        },
    )
    tokenizer_kind: str = field(
        default="byte_bpe",
        metadata={"help": f"From scratch: tokenizer kind, one of {list(TOKENIZER_KINDS)}."},
    )
    vocab_size: int = field(default=8000, metadata={"help": "From scratch: joint vocabulary size."})
    hidden_size: int = field(default=256, metadata={"help": "From scratch: model width."})
    num_hidden_layers: int = field(default=3, metadata={"help": "From scratch: encoder layers."})
    decoder_layers: int | None = field(
        default=None, metadata={"help": "From scratch: decoder layers; default num_hidden_layers."}
    )
    num_attention_heads: int = field(default=8, metadata={"help": "From scratch: attention heads."})
    intermediate_size: int | None = field(
        default=None, metadata={"help": "From scratch: feed-forward width; default 4 * hidden."}
    )
    hidden_dropout: float = field(default=0.1, metadata={"help": "From scratch: embedding/residual dropout."})
    attention_dropout: float = field(default=0.0, metadata={"help": "From scratch: attention dropout."})
    cell_type: str = field(
        default="lstm", metadata={"help": f"From scratch, rnn_seq2seq: the cell, one of {sorted(RNN_CELLS)}."}
    )
    rnn_attention: str = field(
        default="bahdanau",
        metadata={"help": f"From scratch, rnn_seq2seq: the attention, one of {list(ATTENTION_TYPES)}."},
    )
    embedding_size: int | None = field(
        default=None, metadata={"help": "From scratch, rnn_seq2seq: embedding width; default hidden_size."}
    )
    objective: str = field(
        default="autoregressive",
        metadata={
            "help": "autoregressive (left-to-right decoder, beam search) or mask_predict (Ghazvininejad et al., "
            "2019: a conditional masked LM with length prediction, decoded by Mask-Predict; T5/BART families)."
        },
    )

    def __post_init__(self) -> None:
        common.check_model_arguments(self, "hidden_dropout", "attention_dropout")
        if self.objective not in OBJECTIVE_HEADS:
            raise ValueError(f"`objective` must be one of {list(OBJECTIVE_HEADS)}, got {self.objective!r}.")
        if self.objective == "mask_predict" and self.from_scratch and self.family == "rnn_seq2seq":
            raise ValueError(
                "`objective` mask_predict needs a Transformer family (t5, bart or a preset), not rnn_seq2seq."
            )
        if self.family not in SCRATCH_FAMILIES:
            raise ValueError(f"`family` must be one of {sorted(SCRATCH_FAMILIES)}, got {self.family!r}.")
        if self.cell_type not in RNN_CELLS:
            raise ValueError(f"`cell_type` must be one of {sorted(RNN_CELLS)}, got {self.cell_type!r}.")
        if self.rnn_attention not in ATTENTION_TYPES:
            raise ValueError(
                f"`rnn_attention` must be one of {list(ATTENTION_TYPES)}, got {self.rnn_attention!r}."
            )
        if self.tokenizer_kind not in TOKENIZER_KINDS:
            raise ValueError(
                f"`tokenizer_kind` must be one of {list(TOKENIZER_KINDS)}, got {self.tokenizer_kind!r}."
            )
        optional_positive(
            self,
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "decoder_layers",
            "num_attention_heads",
            "intermediate_size",
            "embedding_size",
        )


@dataclass
class TranslationTrainingArguments(common.ScriptTrainingArguments, Seq2SeqTrainingArguments):
    """`Seq2SeqTrainingArguments`: generate (beam 5) to evaluate, every epoch; log every 50 steps."""

    output_dir: str | None = field(
        default="out/translation",
        metadata={"help": "Run folder: checkpoints, metrics.json, test predictions, final/."},
    )
    per_device_eval_batch_size: int = field(
        default=64, metadata={"help": "Sentences per generate() call when evaluating."}
    )
    predict_with_generate: bool = field(
        default=True, metadata={"help": "Evaluate by generating (needed for BLEU; always on here)."}
    )
    generation_num_beams: int | None = field(
        default=5, metadata={"help": "Beam size of evaluation and test decoding (1 = greedy)."}
    )
    generation_max_length: int | None = field(
        default=None,
        metadata={
            "help": f"Longest generated translation in tokens (decoder start included). Default "
            f"{common.DEFAULT_MAX_SEQ_LENGTH}, at most a pretrained model's learned positions (more is an error)."
        },
    )
    test_greedy: bool = field(
        default=True,
        metadata={"help": "Also decode the test split greedily, for comparison with beam search."},
    )
    mask_predict_iterations: int = field(
        default=10, metadata={"help": "objective mask_predict: T, the decoding iterations (the paper's 10)."}
    )
    mask_predict_length_beam: int = field(
        default=5,
        metadata={"help": "objective mask_predict: the length candidates per source (the paper's 5)."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()  # the budget too
        if not self.predict_with_generate:
            raise ValueError("`predict_with_generate` must stay True: BLEU is computed on generated text.")
        if self.generation_num_beams is None:  # greedy, as the run reports it; not the model's own setting
            self.generation_num_beams = 1
        optional_positive(
            self,
            "generation_num_beams",
            "generation_max_length",
            "mask_predict_iterations",
            "mask_predict_length_beam",
        )


ARGUMENT_CLASSES = (TranslationDataArguments, TranslationModelArguments, TranslationTrainingArguments)


def parse_args(
    argv: list[str] | None = None,
) -> tuple[TranslationDataArguments, TranslationModelArguments, TranslationTrainingArguments]:
    """Parse the arguments from flags or one .json/.yaml file (`training.args.parse_dataclasses`).

    Returns:
        `(TranslationDataArguments, TranslationModelArguments, TranslationTrainingArguments)`.
    """
    return parse_dataclasses(ARGUMENT_CLASSES, argv)


# ---------------------------------------------------------------------------------------------
# tokenizer and model
# ---------------------------------------------------------------------------------------------


def _scratch_tokenizer(
    model_args: TranslationModelArguments, family: Family, train_texts: list[str], length: int
):
    """`tokenizer_name_or_path`, else one tokenizer trained on both languages with the family's tokens."""
    if model_args.tokenizer_name_or_path:
        return common.load_tokenizer(model_args)
    # one vocabulary for both languages: names, numbers and cognates share tokens, and the
    # embedding can be tied between encoder, decoder and output (Press & Wolf, 2017)
    return train_tokenizer(
        train_texts,
        kind=model_args.tokenizer_kind,
        vocab_size=model_args.vocab_size,
        special_tokens=family.special_tokens,
        model_max_length=length,
        padding_side="right",
    )


def _scratch_config(model_args: TranslationModelArguments, family: Family, preset, tokenizer, positions: int):
    """A fresh config of `family` (and `preset`) sized by the arguments, with the tokenizer's special ids."""
    special_ids = {
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        # T5 starts decoding from <pad>, BART (fairseq) and the RNN from </s>
        "decoder_start_token_id": getattr(tokenizer, f"{family.decoder_start}_id"),
    }
    if tokenizer.bos_token_id is not None:
        special_ids["bos_token_id"] = tokenizer.bos_token_id
    if model_args.objective == "mask_predict":  # the conditional masked LM's decoder
        special_ids.update(decoder_attention="bidirectional", mask_token_id=tokenizer.mask_token_id)
    if family.name == "rnn_seq2seq":
        return family.config_class(
            vocab_size=len(tokenizer),
            cell_type=model_args.cell_type,
            attention=model_args.rnn_attention,
            input_feeding=model_args.rnn_attention != "none",
            embedding_size=model_args.embedding_size or model_args.hidden_size,
            hidden_size=model_args.hidden_size,
            encoder_layers=model_args.num_hidden_layers,
            decoder_layers=model_args.decoder_layers or model_args.num_hidden_layers,
            hidden_dropout=model_args.hidden_dropout,
            **special_ids,
        )
    return family.config_from_preset(
        preset,
        vocab_size=len(tokenizer),
        hidden_size=model_args.hidden_size,
        num_hidden_layers=model_args.num_hidden_layers,
        decoder_layers=model_args.decoder_layers,
        num_attention_heads=model_args.num_attention_heads,
        intermediate_size=model_args.intermediate_size or 4 * model_args.hidden_size,
        max_position_embeddings=positions,
        hidden_dropout=model_args.hidden_dropout,
        attention_dropout=model_args.attention_dropout,
        **special_ids,
    )


def _pretrained(model_args: TranslationModelArguments) -> tuple[object, PreTrainedModel]:
    """The tokenizer and encoder-decoder of `model_name_or_path`, checked to fit each other."""
    path = model_args.model_name_or_path
    tokenizer = common.load_tokenizer(model_args, path)
    auto_class = OBJECTIVE_HEADS[model_args.objective]
    model = auto_class.from_pretrained(path, trust_remote_code=model_args.trust_remote_code)
    if not getattr(model.config, "is_encoder_decoder", False):
        raise ValueError(f"{path} is not an encoder-decoder model ({type(model).__name__}).")
    ensure_eos(tokenizer)
    vocab = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > vocab:
        raise ValueError(
            f"The tokenizer has {len(tokenizer)} tokens but the model's embedding only {vocab}: "
            "use the tokenizer the model was trained with."
        )
    tokenizer.padding_side = "right"
    return tokenizer, model


def build_tokenizer_and_model(
    model_args: TranslationModelArguments,
    data_args: TranslationDataArguments,
    training_args: Seq2SeqTrainingArguments,
    train_texts: list[str],
) -> tuple[object, PreTrainedModel]:
    """The tokenizer (ending encodings with EOS) and the encoder-decoder, pretrained or fresh.

    Args:
        model_args: a folder to load, or the family and size of a fresh model.
        data_args: the length limits (a fresh model's learned positions cover the longest; None
            is `DEFAULT_MAX_SEQ_LENGTH`).
        training_args: `generation_max_length`, also covered by the positions.
        train_texts: both sides of the training pairs, for the joint tokenizer of a fresh model.

    Returns:
        `(tokenizer, model)`; the tokenizer pads on the right (encoder inputs: left padding would
        shift BART's learned positions).

    Raises:
        ValueError: the model is not an encoder-decoder, or the tokenizer has ids outside the
            model's vocabulary.
    """
    if not model_args.from_scratch:
        return _pretrained(model_args)
    family, preset = SCRATCH_FAMILIES[model_args.family]
    source_length = common.resolve_max_length(data_args.max_source_length, None, "max_source_length")
    tokenizer = _scratch_tokenizer(model_args, family, train_texts, source_length)
    ensure_eos(tokenizer)
    positions = max(
        source_length,
        common.resolve_max_length(data_args.max_target_length, None, "max_target_length"),
        common.resolve_max_length(training_args.generation_max_length, None, "generation_max_length"),
    )
    if model_args.objective == "mask_predict":
        mask_token_id(tokenizer)  # before the vocabulary is sized
    config = _scratch_config(model_args, family, preset, tokenizer, positions)
    model = family.head(OBJECTIVE_HEADS[model_args.objective])(config)
    logger.info(
        "From scratch: %s, %d+%d layers x %d wide, %s parameters, %d-token %s vocabulary.",
        model_args.family,
        config.num_hidden_layers,
        config.decoder_layers,
        config.hidden_size,
        f"{model.num_parameters():,}",
        len(tokenizer),
        model_args.tokenizer_kind,
    )
    return tokenizer, model


def mask_token_id(tokenizer) -> int:
    """The tokenizer's mask token id, adding a `<mask>` special token to a tokenizer without one (T5's)."""
    if tokenizer.mask_token_id is None:
        tokenizer.add_special_tokens({"mask_token": "<mask>"})
        logger.info("Added the mask token <mask> (id %d) for Mask-Predict.", tokenizer.mask_token_id)
    return tokenizer.mask_token_id


class MaskPredictTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` for Mask-Predict heads: evaluation decodes with the model's own `generate()`
    (`mask_predict_iterations`, `mask_predict_length_beam`, targets up to `max_length` - 2 tokens:
    the start token and EOS are added), not transformers' autoregressive search; the loss is the CMLM loss,
    label smoothing (`label_smoothing_factor`) included: transformers' smoother would score `logits` alone
    and drop the length loss, so the factor goes to the model's own loss (`model.label_smoothing`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.label_smoother is not None:
            self.model.label_smoothing = self.label_smoother.epsilon
            self.label_smoother = None

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs):
        if prediction_loss_only:
            return super().prediction_step(model, inputs, True, ignore_keys=ignore_keys)
        inputs = self._prepare_inputs(inputs)
        max_length = (gen_kwargs.get("max_length") or getattr(self, "_gen_kwargs", {}).get("max_length")) or (
            model.config.max_position_embeddings + 2
        )
        tokens = model.generate(
            inputs["input_ids"],
            inputs.get("attention_mask"),
            num_iterations=self.args.mask_predict_iterations,
            length_beam=self.args.mask_predict_length_beam,
            max_new_tokens=min(
                max(max_length - 2, self.args.mask_predict_length_beam), model.config.max_position_embeddings
            ),
        )
        with torch.no_grad(), self.compute_loss_context_manager():
            loss = model(**inputs).loss.detach()
        return loss, tokens, inputs["labels"]


def source_prefix(data_args: TranslationDataArguments, model: PreTrainedModel) -> str:
    """`--source_prefix` if given, else T5's "translate German to English: " for T5-style models.

    The default is built from the seq2seq pipelines' template, so that
    `pipeline("hflm-translation", src_lang=..., tgt_lang=...)` adds the very same prefix.
    """
    if data_args.source_prefix is not None:
        return data_args.source_prefix
    if model.config.model_type in T5_MODEL_TYPES:
        return DEFAULT_TRANSLATION_TEMPLATE.format(
            src=language_name(data_args.source_lang), tgt=language_name(data_args.target_lang)
        )
    return ""


# ---------------------------------------------------------------------------------------------
# metrics
# ---------------------------------------------------------------------------------------------


def bleu_metric() -> evaluate.EvaluationModule:
    """This package's sacrebleu `evaluate` module, loaded from its folder (no download, no cache file)."""
    return evaluate.load(str(BLEU_METRIC), keep_in_memory=True)


class TranslationMetrics:
    """`Seq2SeqTrainer`'s `compute_metrics`: corpus BLEU of the decoded generations.

    The hypotheses are the generated ids decoded without special tokens; the references are the
    raw target lines of the split being evaluated (`references`, set before each evaluation),
    not decoded labels, so truncated training targets or an unknown-token tokenizer cannot
    inflate the score. With no references of the right length the decoded labels are used.

    Attributes:
        references: the target sentences of the split evaluated next, in dataset order.
        last_predictions: the hypotheses of the last call.
        last_signature: sacrebleu's signature of the last call.
    """

    def __init__(self, tokenizer, metric: evaluate.EvaluationModule, references: list[str] | None = None):
        self.tokenizer = tokenizer
        self.metric = metric
        self.references = references
        self.last_predictions: list[str] = []
        self.last_signature: str | None = None

    def _decode(self, ids: np.ndarray) -> list[str]:
        # Trainer pads predictions and labels across batches with -100, which no tokenizer decodes
        ids = np.where(ids < 0, self.tokenizer.pad_token_id, ids)
        return [text.strip() for text in self.tokenizer.batch_decode(ids, skip_special_tokens=True)]

    def __call__(self, eval_pred) -> dict[str, float]:
        predictions = eval_pred.predictions
        predictions = predictions[0] if isinstance(predictions, tuple) else predictions  # (N, L)
        hypotheses = self._decode(predictions)
        if self.references is not None and len(self.references) == len(hypotheses):
            references = self.references
        else:
            if self.references is not None:
                logger.warning(
                    "%d references for %d predictions: scoring against the decoded labels.",
                    len(self.references),
                    len(hypotheses),
                )
            references = self._decode(eval_pred.label_ids)
        bleu = self.metric.compute(predictions=hypotheses, references=references)
        lowercase = self.metric.compute(predictions=hypotheses, references=references, lowercase=True)
        self.last_predictions = hypotheses
        self.last_signature = bleu["signature"]
        pad = self.tokenizer.pad_token_id
        lengths = np.count_nonzero((predictions != pad) & (predictions >= 0), axis=-1)
        return {
            "bleu": bleu["score"],
            "bleu_lowercase": lowercase["score"],
            "brevity_penalty": bleu["bp"],
            "gen_len": float(np.mean(lengths)),
        }


# ---------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------


def _write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line.replace("\n", " ") + "\n" for line in lines), encoding="utf-8")


def _fit_lengths(data_args, training_args, model: PreTrainedModel) -> TranslationDataArguments:
    """Sources, targets and generations within the model's learned positions, checked before
    training rather than failing at the first long batch or at the first evaluation.

    Returns the data arguments with both lengths set; sets `training_args.generation_max_length`.
    """
    limit = common.position_limit(model.config)
    data_args = dataclasses.replace(
        data_args,
        max_source_length=common.resolve_max_length(data_args.max_source_length, limit, "max_source_length"),
        max_target_length=common.resolve_max_length(data_args.max_target_length, limit, "max_target_length"),
    )
    training_args.generation_max_length = common.resolve_max_length(
        training_args.generation_max_length, limit, "generation_max_length"
    )
    logger.info(
        "Lengths: sources %d, targets %d, generations %d tokens (the model's positions: %s).",
        data_args.max_source_length,
        data_args.max_target_length,
        training_args.generation_max_length,
        limit or "any length",
    )
    return data_args


def _check_generation(data_args, training_args, model: PreTrainedModel, objective: str) -> None:
    """Refuse evaluation decoding that cannot fit in the device's memory (`--generation_num_beams
    10**6`, or a `--generation_max_length` of 10**9 for a model without a position table) before
    training, rather than at the first evaluation. Realistic settings always pass."""
    beams, flag = (
        (training_args.mask_predict_length_beam, "--mask_predict_length_beam")
        if objective == "mask_predict"
        else (training_args.generation_num_beams or 1, "--generation_num_beams")
    )
    check_generation_fits(
        model.config,
        {"num_beams": beams, "max_length": training_args.generation_max_length},
        batch_size=training_args.per_device_eval_batch_size,
        input_length=data_args.max_source_length,
        device=training_args.device,
        dtype=model.dtype,
        where=f"Evaluation decoding ({flag}, --generation_max_length, --per_device_eval_batch_size)",
    )


def _evaluate_and_test(
    trainer, encoded, references: dict, compute_metrics, metrics: dict
) -> dict[str, list[str]]:
    """BLEU on the validation split, and on the test split with beam search and (`test_greedy`)
    greedy decoding, into `metrics`. Returns the test translations per metric prefix."""
    args = trainer.args
    num_beams, max_length = args.generation_num_beams or 1, args.generation_max_length
    predictions = {}
    if "validation" in encoded:
        compute_metrics.references = references["validation"]
        metrics.update(
            trainer.evaluate(metric_key_prefix="eval", num_beams=num_beams, max_length=max_length),
            eval_samples=len(encoded["validation"]),
        )
    if "test" in encoded:
        compute_metrics.references = references["test"]
        decodings = [("test", num_beams)] + (
            [("test_greedy", 1)] if args.test_greedy and num_beams > 1 else []
        )
        for key, beams in decodings:
            t0 = time.perf_counter()
            output = trainer.predict(
                encoded["test"], metric_key_prefix=key, num_beams=beams, max_length=max_length
            )
            metrics.update(output.metrics)
            predictions[key] = compute_metrics.last_predictions
            logger.info(
                "%s: BLEU %.2f with %d beam(s) in %.1f s.",
                key,
                output.metrics[f"{key}_bleu"],
                beams,
                time.perf_counter() - t0,
            )
        metrics["test_samples"] = len(encoded["test"])
    if compute_metrics.last_signature is not None:
        metrics["bleu_signature"] = compute_metrics.last_signature
    return predictions


def _write_card(
    trainer, tokenizer, final: Path, data_args, model_args, metrics: dict, encoded, prefix: str
) -> None:
    """The model card: the data, validation/test BLEU, hyperparameters, `model-index`, how to translate."""
    args, src, tgt = trainer.args, data_args.source_lang, data_args.target_lang
    reported = common.reported_split(encoded)
    mask_predict = model_args.objective == "mask_predict"  # its own decoding: no beam search
    decoding = (
        f"Mask-Predict, {args.mask_predict_iterations} iterations, {args.mask_predict_length_beam} length candidates"
        if mask_predict
        else f"beam {args.generation_num_beams or 1}"
    )
    table = {
        "validation BLEU": metrics.get("eval_bleu"),
        f"test BLEU ({'Mask-Predict' if mask_predict else decoding})": metrics.get("test_bleu"),
        "test BLEU (greedy)": metrics.get("test_greedy_bleu"),
        "test BLEU lowercase": metrics.get("test_bleu_lowercase"),
        "test loss": metrics.get("test_loss"),
    }
    start = (
        f"from scratch ({model_args.family})" if model_args.from_scratch else model_args.model_name_or_path
    )
    hyperparameters = common.card_hyperparameters(
        args,
        head={
            "start": start,
            "language pair": f"{src} → {tgt}",
            "source prefix": repr(prefix),
            "training pairs": len(encoded["train"]),
        },
        tail={
            "label smoothing": args.label_smoothing_factor,
            "max source / target length": f"{data_args.max_source_length} / {data_args.max_target_length}",
            "decoding": f"{decoding}, max length {args.generation_max_length}",
        },
    )
    write_model_card(
        trainer.model,
        final,
        dataset=(
            f"`{data_args.data_dir}`, {language_name(src)} → {language_name(tgt)}: {common.split_sizes(encoded, 'pairs')}"
            + ". BLEU: sacrebleu corpus BLEU on detokenized text"
            + (f" (`{metrics['bleu_signature']}`)." if "bleu_signature" in metrics else ".")
        ),
        tokenizer=tokenizer,
        metrics={name: value for name, value in table.items() if value is not None},
        hyperparameters=hyperparameters,
        training_time_s=metrics["train_runtime"],
        eval_results={"bleu": metrics[f"{reported}_bleu"]} if reported else None,
        dataset_name=Path(data_args.data_dir).resolve().name,
        extra={
            "model_name": final.parent.resolve().name,  # the run's name, not "final"
            "notes": (
                "\n## Translating\n\n```python\nimport hf_lm  # registers the hflm-translation pipeline\n"
                "from transformers import pipeline\n\n"
                f'translator = pipeline("hflm-translation", model={final.as_posix()!r}, trust_remote_code=True)\n'
                'translator("...")  # the source prefix comes from config.prefix; '
                "beam size from generation_config.json\n```\n"
            ),
        },
    )


def _save(trainer, tokenizer, output_dir: Path, prefix: str, src: str, tgt: str) -> Path:
    """`final/` with the decoding the test was scored with and the source prefix in the config."""
    model, args = trainer.model, trainer.args
    # the decoding the test was scored with becomes the checkpoint's default (Mask-Predict heads have
    # no generation config: their `generate()` takes its arguments)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.num_beams = args.generation_num_beams or 1
        model.generation_config.max_length = args.generation_max_length
    # `pipeline("hflm-translation")` reads `config.prefix`; T5 checkpoints keep per-pair prefixes here
    model.config.prefix = prefix
    model.config.task_specific_params = {
        **(getattr(model.config, "task_specific_params", None) or {}),
        f"translation_{src}_to_{tgt}": {"prefix": prefix},
    }
    return common.save_final(trainer, tokenizer, output_dir)


def finetune(
    data_args: TranslationDataArguments,
    model_args: TranslationModelArguments,
    training_args: TranslationTrainingArguments,
) -> dict[str, float]:
    """Train (or fine-tune) a translation model with `Seq2SeqTrainer`, test it and save it.

    Args:
        data_args: the parallel files, language pair, prefix and length limits.
        model_args: a pretrained folder or the family and size of a fresh model.
        training_args: `Seq2SeqTrainer`'s arguments (`output_dir`, epochs, batch size, beams ...).

    Returns:
        The metrics also written to `output_dir/metrics.json`: Trainer's `train_*`; `eval_*` on
        the validation split and `test_*` on the test split decoded with
        `generation_num_beams` beams (`*_bleu`, `*_bleu_lowercase`, `*_brevity_penalty`,
        `*_gen_len`, `*_loss`); `test_greedy_*` with greedy decoding (with `test_greedy` and more
        than one beam); `train_samples`, `eval_samples`, `test_samples`, `seconds`,
        `bleu_signature` (sacrebleu's), `num_parameters`, `train_steps`, `train_epochs` and
        `train_budget_reached` (whether `max_train_seconds` ended training).

    Raises:
        ValueError: no validation split while `eval_strategy` is not "no", or bad data.
    """
    start = time.perf_counter()
    output_dir = Path(training_args.output_dir)
    raw = load_translation_dataset(data_args)
    common.require_validation(raw, training_args, "see `validation_split`")
    src, tgt = data_args.source_lang, data_args.target_lang
    references = {split: sides(ds, tgt) for split, ds in raw.items()}

    set_seed(training_args.seed)  # the fresh model's init, before Trainer seeds the data order
    train_texts = sides(raw["train"], src) + references["train"]
    tokenizer, model = build_tokenizer_and_model(model_args, data_args, training_args, train_texts)
    data_args = _fit_lengths(data_args, training_args, model)
    _check_generation(data_args, training_args, model, model_args.objective)
    prefix = source_prefix(data_args, model)
    logger.info("Source prefix: %r", prefix)
    encoded = tokenize_dataset(raw, tokenizer, data_args, prefix)
    lengths = [len(ids) for ids in encoded["train"]["labels"]]
    logger.info(
        "Training targets: %.1f tokens on average, %d at most (%d cut to max_target_length).",
        np.mean(lengths),
        max(lengths),
        sum(n >= data_args.max_target_length for n in lengths),
    )

    compute_metrics = TranslationMetrics(tokenizer, bleu_metric(), references.get("validation"))
    if model_args.objective == "mask_predict":
        # the CMLM objective: a uniform number of target tokens masked, the loss on those and the length
        trainer_class, collator = (
            MaskPredictTrainer,
            DataCollatorForMaskPredict(tokenizer, seed=training_args.seed),
        )
        training_args.test_greedy = False  # Mask-Predict has no beam search to compare with
    else:
        # labels padded with -100; decoder inputs from the model's own shift (its start token)
        trainer_class, collator = Seq2SeqTrainer, DataCollatorForSeq2Seq(tokenizer, model=model)
    trainer, metrics = common.train_with_budget(
        trainer_class,
        training_args,
        encoded,
        model=model,
        processing_class=tokenizer,
        data_collator=collator,
        compute_metrics=compute_metrics,
    )
    predictions = _evaluate_and_test(trainer, encoded, references, compute_metrics, metrics)
    metrics["seconds"] = time.perf_counter() - start
    common.log_metrics(metrics)

    if trainer.is_world_process_zero():
        final = _save(trainer, tokenizer, output_dir, prefix, src, tgt)
        for key, lines in predictions.items():
            _write_lines(output_dir / f"{key.replace('test', 'test_predictions')}.txt", lines)
        _write_card(trainer, tokenizer, final, data_args, model_args, metrics, encoded, prefix)
        common.save_run_summary(trainer, output_dir, metrics, final)
    return metrics


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Command-line entry point: parse the arguments (flags or one .json/.yaml file) and train."""
    return common.script_main(parse_args, finetune, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
