"""Training objectives of the one training loop, behind one protocol (`Objective`).

The loop (`training.train`) reads packed blocks of token ids and asks its objective everything that
depends on what is trained: the special tokens of the tokenizer, the model, the inputs and labels
of a micro-batch, the evaluation, and the model card's results. The objectives:

- `CausalLM` ("clm"): `labels = input_ids` (the model shifts); trains GPT, RNN, FFNN (and an n-gram
  model, which `training.ngram_fit` fits by counting instead).
- `TruncatedBPTT` ("clm" with `--tbptt`): a causal LM whose recurrent state is carried from one
  block of a lane to the next (`GlobalBatchSampler(lanes=True)`).
- `MaskedLM` ("mlm"): a fresh BERT mask for every micro-batch with
  `training.data.collators_mlm.DataCollatorForMaskedLM` (RoBERTa's dynamic masking).
- `Electra` ("electra"): ELECTRA's replaced-token detection, a small masked-LM generator and the
  discriminator trained jointly (`training.objectives.electra`).
- `SpanCorruption` ("span_corruption", T5) and `BartDenoising` ("bart_denoising", BART): the
  encoder-decoder denoising objectives of `training.data.collators_seq2seq`.

Noise (masks, corrupted spans) is drawn from a generator seeded by (seed, step, micro-step, rank)
(`mask_seed`): a pure function of the data position, so a resumed run draws the same noise as an
uninterrupted one, whatever happened to the global RNG. The evaluation's noise is fixed for the run.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForPreTraining,
    AutoModelForSeq2SeqLM,
)

from hf_lm.families import FAMILIES
from hf_lm.models.hflm_common import (
    output_cache,
)
from hf_lm.models.hflm_rnn_blocks import RecurrentCache

from ..data.collators_mlm import DataCollatorForMaskedLM
from ..data.collators_seq2seq import DataCollatorForBartDenoising, DataCollatorForT5Pretraining
from ..data.tokenizer import add_sentinel_tokens
from ..models import DENOISING, TRANSFORMER_FAMILIES, build_family_model, family_config, resolve_family
from . import evaluation
from .electra import ElectraPretrainingModel, evaluate_electra
from .scheduled_sampling import run_sampling_schedule

SEQ2SEQ_OBJECTIVES = DENOISING
EVAL_STEP = 2**31 - 1  # the "step" of the evaluation's noise: never a training step

logger = logging.getLogger(__name__)


def mask_seed(seed: int, step: int, micro: int, rank: int, *stream: int) -> int:
    """The seed of the mask of one micro-batch: independent streams per (seed, step, micro, rank);
    `stream` numbers further independent draws of the same micro-batch (ELECTRA's samples)."""
    entropy = [seed, step, micro, rank, *stream]
    return int(np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint64)[0] >> 1)


def mlm_inputs(
    batch: dict[str, torch.Tensor], collator: DataCollatorForMaskedLM, seed: int
) -> dict[str, torch.Tensor]:
    """Mask a batch of blocks (B, T) with a mask drawn from `seed`; returns model inputs with labels.

    Blocks are full (packing leaves no padding), so the attention mask is all ones.
    """
    collator.generator = torch.Generator().manual_seed(seed)
    # a block is a window of packed text: its first token becomes [CLS], so the model sees inputs
    # shaped like its fine-tuning inputs ([CLS] first; documents separated by [SEP])
    ids = batch["input_ids"].clone()
    ids[:, 0] = collator.tokenizer.cls_token_id
    examples = [{"input_ids": row} for row in ids]
    out = collator(examples)
    return {k: out[k] for k in ("input_ids", "attention_mask", "labels")}


def seq2seq_inputs(batch: dict[str, torch.Tensor], collator, seed: int) -> dict[str, torch.Tensor]:
    """Noise a batch of blocks (B, T) with noise drawn from `seed`: `input_ids`, `attention_mask`
    (the corrupted source) and `labels` (the target the decoder must produce, -100 padded)."""
    collator.generator = torch.Generator().manual_seed(seed)
    out = collator([{"input_ids": row.tolist()} for row in batch["input_ids"]])
    return {k: out[k] for k in ("input_ids", "attention_mask", "labels")}


class Objective:
    """What the training loop asks of an objective; subclasses fill in what differs.

    Built from the `TrainArguments` before the data (the tokenizer needs `special_tokens`), then
    `bind` to the tokenizer, the eval blocks and the process. What differs between objectives:

    - the tokenizer and the model: `prepare_tokenizer`, `model_config`, `make_collator` (and
      `build_model`, which only ELECTRA replaces), the blocks they can learn from
      (`block_size_problem`, `min_block_size`);
    - a micro-batch's inputs and labels (`inputs`); the loop's one call per micro-batch is `forward`;
    - the evaluation (`evaluate`) and the model card (`card_metrics`, `describe`, `card_model`);
    - a state carried across blocks (`state_tensors`, `restore_state`, `reset_state`): truncated
      BPTT's recurrent state; every other objective carries none.
    """

    name = "clm"
    auto_class = AutoModelForCausalLM  # the head trained (and the class that loads `init_from`)
    # the shortest block with something to learn, and why (`block_size_problem`): a causal LM
    # predicts each token from those before it, so a block needs a token to read and one to predict
    min_block_size = 2
    min_block_reason = (
        "a causal LM predicts each token of a block from the ones before it: one token has none"
    )
    # the keys of its evaluation, which `metric_for_best_model` may name
    metrics = (
        "eval_loss",
        "eval_perplexity",
        "eval_bits_per_token",
        "eval_bits_per_character",
        "eval_bits_per_word",
    )

    def __init__(self, train_args) -> None:
        self.args = train_args
        # step -> sampling probability; None without scheduled sampling, or with no run (`build_model`)
        self.sampling_schedule = None if train_args is None else run_sampling_schedule(train_args)
        self.tokenizer = self.collator = None
        self.num_eval_blocks, self.rank, self.device = 0, 0, torch.device("cpu")
        self.seed = None  # the run's seed, given by `bind`

    @property
    def special_tokens(self) -> dict | None:
        """The tokenizer's special tokens: those of the objective's Transformer family (None: GPT's)."""
        return FAMILIES[TRANSFORMER_FAMILIES[self.name]].special_tokens

    # --- tokenizer and model ---
    def prepare_tokenizer(self, tokenizer, block_size: int) -> None:
        """Add what the objective needs to a freshly trained tokenizer (in place)."""

    def model_config(self, tokenizer) -> dict:
        """The config fields the objective sets on a fresh model."""
        return {}

    def build_model(self, family: str, model_args, data_args, tokenizer) -> torch.nn.Module:
        """A fresh model of `family` sized to the tokenizer, or the `init_from` checkpoint (its
        embeddings grown to a given tokenizer with more tokens, as transformers' `run_clm.py` does)."""
        if model_args.init_from:
            model = self.auto_class.from_pretrained(model_args.init_from, dtype=torch.float32)
            rows = model.get_input_embeddings().num_embeddings
            if len(tokenizer) > rows:
                logger.warning(
                    "The tokenizer has %d tokens and the `init_from` checkpoint's embeddings %d rows: resizing them "
                    "to %d. The new rows start untrained; the old ids keep their rows only if the tokenizer extends "
                    "the checkpoint's.",
                    len(tokenizer),
                    rows,
                    len(tokenizer),
                )
                model.resize_token_embeddings(len(tokenizer))
            return model
        config = self.model_config(tokenizer)
        return build_family_model(family, self.auto_class, model_args, data_args, tokenizer, config)

    # --- data ---
    def block_size_problem(self, block_size: int, micro_batches: int) -> str | None:
        """Why blocks of `block_size` tokens leave the objective nothing to predict in the run's
        `micro_batches` (steps x accumulation); None if they do not.

        Without this check such blocks train on an empty loss, which is NaN, and the run stops as if
        it had diverged ("lower the learning rate").
        """
        if block_size < self.min_block_size:
            return (
                f"--block_size {block_size} leaves objective {self.name!r} nothing to predict ({self.min_block_reason}); "
                f"use --block_size {self.min_block_size} or more."
            )
        return None

    def make_collator(self, tokenizer):
        return None

    def bind(self, tokenizer, eval_blocks: dict[str, torch.Tensor], accelerator, seed: int) -> None:
        """Take the run's tokenizer, eval blocks, process (`accelerator`: its rank and the run's `seed`
        seed the noise, its device takes the inputs): builds the collator (and what evaluation needs)."""
        self.tokenizer, self.collator, self.seed = tokenizer, self.make_collator(tokenizer), seed
        self.rank, self.device = accelerator.process_index, accelerator.device
        self.num_eval_blocks = evaluation.eval_block_count(
            len(eval_blocks["input_ids"]),
            self.args.per_device_batch_size,
            accelerator.num_processes,
            self.args.eval_batches,
        )

    def inputs(self, batch: dict[str, torch.Tensor], position, micro: int) -> tuple[dict, dict]:
        """The model inputs with labels of micro-batch `micro` of the update after `position` (blocks
        (b, T)), and the further keyword arguments of the model's forward (none but a few objectives')."""
        raise NotImplementedError

    def forward(
        self, forward_loss, model, batch: dict[str, torch.Tensor], position, micro: int, labelled=False
    ):
        """The loop's one call per micro-batch: the outputs of `model` on micro-batch `micro` of the
        update after `position` (a `DataPosition`: `step`, `update` within the epoch), run by
        `forward_loss(model, inputs, extra_inputs)` (the loop's model call), `loss` their token mean.
        A `labelled` batch (random windows, with their `shift_labels`) is taken as it is.

        With scheduled sampling the model feeds its own samples with the schedule's probability of
        the step (Bengio et al., 2015; `scheduled_sampling.run_sampling_schedule`).
        """
        inputs, extra = (batch, {}) if labelled else self.inputs(batch, position, micro)
        inputs = {k: v.to(self.device) for k, v in inputs.items()}  # (b, T)
        if self.sampling_schedule is not None:
            extra = {"scheduled_sampling_probability": self.sampling_schedule(position.step), **extra}
        return forward_loss(model, inputs, extra)

    def _eval_noise(self, inputs):
        """The evaluation's noise: `inputs` with the same seeds at every evaluation of the run."""
        seed = self.seed
        return lambda ids, i, rank: inputs(
            {"input_ids": ids}, self.collator, mask_seed(seed, EVAL_STEP, i, rank)
        )

    # --- evaluation and the model card ---
    def evaluate(self, model, eval_blocks: dict[str, torch.Tensor], accelerator) -> dict[str, float | None]:
        raise NotImplementedError

    def card_metrics(self, evaluation: dict) -> tuple[dict[str, object], dict[str, float]]:
        """The objective's rows of the card's evaluation table, and the card's `model-index` results."""
        raise NotImplementedError

    def describe(self) -> str:
        """The card's "objective" row."""
        raise NotImplementedError

    def card_model(self, model) -> torch.nn.Module:
        """The model the card of `final/` describes: the model trained, unless final/ holds a part of it."""
        return model

    # --- state carried across blocks (truncated BPTT) ---
    def state_tensors(self, rank: int) -> dict[str, torch.Tensor] | None:
        """This process's carried state for a checkpoint (None: the objective carries none)."""
        return None

    def restore_state(self, tensors: dict[str, torch.Tensor], rank: int, device: torch.device) -> None:
        """Continue from a checkpoint's `tensors`."""

    def reset_state(self) -> None:
        """Forget the carried state (a rollback skipped blocks)."""


class CausalLM(Objective):
    """Next-token prediction: `labels = input_ids`, the model shifts."""

    def bind(self, tokenizer, eval_blocks, accelerator, seed) -> None:
        super().bind(tokenizer, eval_blocks, accelerator, seed)
        # the characters and words the causal loss scores (bits per character and word)
        self.eval_units = evaluation.eval_text_units(tokenizer, eval_blocks, self.num_eval_blocks)

    def inputs(self, batch, position, micro):
        return {**batch, "labels": batch["input_ids"]}, {}

    def evaluate(self, model, eval_blocks, accelerator):
        args = self.args  # the model is compiled with --torch_compile: (b, T) batches, a smaller last one
        loss, ppl = evaluation.evaluate(
            model, eval_blocks, accelerator, args.per_device_batch_size, args.eval_batches
        )
        return {"eval_loss": loss, "eval_perplexity": ppl, **evaluation.bits_metrics(loss, self.eval_units)}

    def card_metrics(self, evaluation):
        rows = {
            "held-out loss (nats/token)": evaluation["eval_loss"],
            "held-out perplexity": evaluation["eval_perplexity"],
            "held-out bits per token": evaluation["eval_bits_per_token"],
            "held-out bits per character": evaluation["eval_bits_per_character"],
            "held-out bits per word (whitespace-separated)": evaluation["eval_bits_per_word"],
        }
        return rows, {"perplexity": evaluation["eval_perplexity"], "loss": evaluation["eval_loss"]}

    def describe(self) -> str:
        return "causal LM (next token)"


class TruncatedBPTT(CausalLM):
    """A causal LM whose recurrent state runs on from block to block of each lane.

    The blocks are read in corpus order in global-batch-many lanes, and each batch row carries the
    recurrent state its lane's previous block left (gradients stop at block boundaries). An epoch,
    and a rollback (which skips blocks), start every lane afresh. The states ride in checkpoints.
    """

    def __init__(self, train_args) -> None:
        super().__init__(train_args)
        self.reset_state()

    def inputs(self, batch, position, micro):
        if position.update == 0 and micro == 0:  # an epoch starts every lane afresh
            self.reset_state()
        inputs, extra = super().inputs(batch, position, micro)
        return inputs, extra | {"past_key_values": self.carried[micro], "use_cache": True}

    def forward(self, forward_loss, model, batch, position, micro, labelled=False):
        outputs = super().forward(forward_loss, model, batch, position, micro, labelled)
        self.carried[micro] = output_cache(outputs).detach()  # gradients stop at the block edge
        return outputs

    def state_tensors(self, rank):
        tensors = {}
        for micro, cache in enumerate(self.carried):
            if cache is None or cache.state is None:
                continue
            for i, part in enumerate(cache.state):
                tensors[f"tbptt.rank{rank}.micro{micro}.state{i}"] = part.detach().cpu()
            tensors[f"tbptt.rank{rank}.micro{micro}.seen_tokens"] = torch.tensor(cache.seen_tokens)
        return tensors

    def restore_state(self, tensors, rank, device):
        self.reset_state()  # None where a lane had no state yet
        for micro in range(len(self.carried)):
            prefix = f"tbptt.rank{rank}.micro{micro}."
            parts = sorted(
                (int(k[len(prefix) + len("state") :]), v)
                for k, v in tensors.items()
                if k.startswith(prefix + "state")
            )
            if parts:
                states = tuple(v.to(device) for _, v in parts)
                self.carried[micro] = RecurrentCache(states, int(tensors[prefix + "seen_tokens"]))

    def reset_state(self):
        self.carried: list[RecurrentCache | None] = [None] * self.args.gradient_accumulation_steps


class MaskedLM(Objective):
    """BERT's masked LM: a fresh mask per micro-batch (dynamic masking), the 80/10/10 rule."""

    name = "mlm"  # [CLS] [SEP] [MASK] [PAD]; [SEP] also separates packed documents
    auto_class = AutoModelForMaskedLM
    metrics = ("eval_loss", "eval_perplexity", "eval_mlm_accuracy", "eval_pseudo_perplexity")
    min_block_reason = "a block's first token becomes [CLS], which is never masked: it needs a token to mask"
    # above this chance that some micro-batch of the run masks no token at all (its loss would be
    # 0/0), the block is refused as too short for the batch
    EMPTY_BATCH_RISK = 0.01

    def block_size_problem(self, block_size, micro_batches):
        """Also refuse blocks so short that a micro-batch would likely mask nothing.

        Each of the `per_device_batch_size * (block_size - 1)` maskable tokens of a micro-batch is
        selected with probability `mlm_probability`, so none is with probability about
        `(1 - mlm_probability) ** (b * (T - 1))`, for each of the run's micro-batches.
        """
        problem = super().block_size_problem(block_size, micro_batches)
        args = self.args
        if problem or args is None:
            return problem
        maskable = args.per_device_batch_size * (block_size - 1)
        empty = (1 - args.mlm_probability) ** maskable  # one micro-batch with no masked token
        risk = -math.expm1(micro_batches * math.log1p(-empty)) if empty < 1 else 1.0  # 1 - (1 - empty)^n
        if risk <= self.EMPTY_BATCH_RISK:
            return None
        return (
            f"--block_size {block_size} is too short for objective {self.name!r} at --per_device_batch_size "
            f"{args.per_device_batch_size} and --mlm_probability {args.mlm_probability}: a micro-batch masks no "
            f"token with probability {empty:.2g}, so one of the run's {micro_batches} would (chance {risk:.0%}) and "
            "its loss would be undefined. Raise --block_size or --per_device_batch_size."
        )

    def model_config(self, tokenizer):
        # `sparse_prediction`: the head runs on the ~15% masked positions only; same loss, less work
        return {"sparse_prediction": True, "bos_token_id": None}

    def make_collator(self, tokenizer):
        args = self.args
        return DataCollatorForMaskedLM(tokenizer, mlm_probability=args.mlm_probability, masking=args.masking)

    def inputs(self, batch, position, micro):
        return mlm_inputs(batch, self.collator, mask_seed(self.seed, position.step, micro, self.rank)), {}

    def evaluate(self, model, eval_blocks, accelerator):
        args = self.args
        return evaluation.evaluate_masked_lm(
            model,
            eval_blocks,
            self._eval_noise(mlm_inputs),
            self.tokenizer,
            accelerator,
            args.per_device_batch_size,
            self.num_eval_blocks,
            args.pseudo_perplexity_blocks,
        )

    def card_metrics(self, evaluation):
        pppl = evaluation["eval_pseudo_perplexity"]
        rows = {
            "held-out masked-token loss (nats/token)": evaluation["eval_loss"],
            "held-out masked-token accuracy": evaluation["eval_mlm_accuracy"],
            "held-out pseudo-perplexity (Salazar et al., 2020)": pppl,
        }
        results = {"loss": evaluation["eval_loss"], "accuracy": evaluation["eval_mlm_accuracy"]}
        return rows, results | ({"pseudo-perplexity": pppl} if pppl is not None else {})

    def describe(self) -> str:
        return (
            f"masked LM ({self.args.mlm_probability:.0%} of tokens, {self.args.masking} masking, 80/10/10 rule, "
            "a fresh mask per batch)"
        )


class Electra(MaskedLM):
    """ELECTRA's replaced-token detection (Clark et al., 2020; `training.objectives.electra`): BERT's dynamic
    masking feeds a small generator, whose samples fill the masked positions for the discriminator.

    The generator's samples are seeded like the masks (`mask_seed`, a second stream of the same
    micro-batch): a resumed run draws what an uninterrupted one did.
    """

    name = "electra"
    auto_class = AutoModelForPreTraining  # the discriminator: what final/ holds (the generator in generator/)
    SAMPLES = 1  # the `mask_seed` stream of the generator's samples
    metrics = ("eval_loss", "eval_mlm_loss", "eval_mlm_accuracy", "eval_disc_loss", "eval_disc_accuracy")

    def model_config(self, tokenizer):
        return {"bos_token_id": None}

    def build_model(self, family, model_args, data_args, tokenizer):
        """The discriminator with its generator (`ElectraPretrainingModel`), fresh or from the
        `init_from` folder of a previous ELECTRA run (its discriminator and `generator/`)."""
        args = self.args  # None from `build_model`: the model's defaults (1/4 width, λ = 50)
        options = {} if args is None else {
            "generator_size": args.electra_generator_size,
            "discriminator_weight": args.electra_disc_weight,
        }  # fmt: skip
        if model_args.init_from:
            model = ElectraPretrainingModel.from_folders(model_args.init_from, **options)
            if len(tokenizer) > model.config.vocab_size:
                raise ValueError(
                    f"The tokenizer has {len(tokenizer)} tokens and the `init_from` ELECTRA model "
                    f"{model_args.init_from!r} {model.config.vocab_size}: its generator and discriminator share "
                    "embeddings that cannot grow here. Use the checkpoint's own tokenizer (no --tokenizer_name_or_path)."
                )
            return model
        config = family_config(family, model_args, data_args, tokenizer, self.model_config(tokenizer))
        return ElectraPretrainingModel(config, **options)

    def inputs(self, batch, position, micro):
        inputs, _ = super().inputs(batch, position, micro)
        return inputs, {"sampling_seed": mask_seed(self.seed, position.step, micro, self.rank, self.SAMPLES)}

    def evaluate(self, model, eval_blocks, accelerator):
        args = self.args
        return evaluate_electra(
            model,
            eval_blocks,
            self._eval_noise(mlm_inputs),
            lambda i, rank: mask_seed(self.seed, EVAL_STEP, i, rank, self.SAMPLES),
            args.electra_disc_weight,
            accelerator,
            args.per_device_batch_size,
            self.num_eval_blocks,
        )

    def card_metrics(self, evaluation):
        rows = {
            "held-out loss (MLM + λ · discriminator)": evaluation["eval_loss"],
            "held-out generator masked-token loss (nats/token)": evaluation["eval_mlm_loss"],
            "held-out generator masked-token accuracy": evaluation["eval_mlm_accuracy"],
            "held-out discriminator loss (per token)": evaluation["eval_disc_loss"],
            "held-out discriminator accuracy (replaced vs original)": evaluation["eval_disc_accuracy"],
            "held-out share of tokens replaced": evaluation["eval_replaced_fraction"],
        }
        return rows, {"loss": evaluation["eval_loss"], "accuracy": evaluation["eval_disc_accuracy"]}

    def describe(self) -> str:
        args = self.args
        return (
            f"ELECTRA replaced-token detection (Clark et al., 2020): a generator {args.electra_generator_size:g} "
            f"as wide, sharing the embeddings, fills {args.mlm_probability:.0%} masked tokens ({args.masking} "
            f"masking, 80/10/10 rule) with samples; loss = MLM + {args.electra_disc_weight:g} · discriminator "
            "loss. This folder holds the discriminator (fine-tune it); the generator is in `generator/`"
        )

    def card_model(self, model):
        return model.discriminator()  # what final/ holds, beside generator/


class Denoising(Objective):
    """An encoder-decoder rebuilds a block from a noised copy of it."""

    auto_class = AutoModelForSeq2SeqLM
    metrics = ("eval_loss", "eval_perplexity", "eval_token_accuracy")

    def model_config(self, tokenizer):
        # the id that starts the decoder: T5's <pad>, BART's </s> (whichever family is trained)
        role = FAMILIES[TRANSFORMER_FAMILIES[self.name]].decoder_start
        return {"decoder_start_token_id": getattr(tokenizer, f"{role}_id")}

    def inputs(self, batch, position, micro):
        seed = mask_seed(self.seed, position.step, micro, self.rank)
        return seq2seq_inputs(batch, self.collator, seed), {}

    def evaluate(self, model, eval_blocks, accelerator):
        return evaluation.evaluate_denoising(
            model,
            eval_blocks,
            self._eval_noise(seq2seq_inputs),
            accelerator,
            self.args.per_device_batch_size,
            self.num_eval_blocks,
        )

    def card_metrics(self, evaluation):
        rows = {
            "held-out denoising loss (nats/target token)": evaluation["eval_loss"],
            "held-out target-token accuracy (teacher forced)": evaluation["eval_token_accuracy"],
        }
        return rows, {"loss": evaluation["eval_loss"], "accuracy": evaluation["eval_token_accuracy"]}


class SpanCorruption(Denoising):
    """T5's span corruption: spans become sentinels in the source; the target lists the spans."""

    name = "span_corruption"
    min_block_reason = (
        "its noise covers at least one token of a block and keeps one: one token is never noised"
    )

    def prepare_tokenizer(self, tokenizer, block_size):
        # T5's sentinels <extra_id_0>, ... on the last ids; a block needs about one per 20 tokens
        add_sentinel_tokens(tokenizer, min(100, max(8, block_size // 4)))

    def make_collator(self, tokenizer):
        return DataCollatorForT5Pretraining(tokenizer, objective="span_corruption")

    def describe(self) -> str:
        return "T5 span corruption (15% noise, mean span 3, sentinels)"


class BartDenoising(Denoising):
    """BART's text infilling and sentence permutation: the target is the clean block."""

    name = "bart_denoising"
    min_block_size = 1  # the target is the whole clean block: one token, which infilling may hide

    def make_collator(self, tokenizer):
        return DataCollatorForBartDenoising(tokenizer)

    def describe(self) -> str:
        return "BART denoising (text infilling 30%, Poisson(3) spans; sentence permutation)"


OBJECTIVES: dict[str, type[Objective]] = {
    cls.name: cls for cls in (CausalLM, MaskedLM, Electra, SpanCorruption, BartDenoising)
}


def objective_for(train_args) -> Objective:
    """The objective `train_args` asks for (`objective`, and `tbptt` for a recurrent causal LM)."""
    if train_args.tbptt:
        return TruncatedBPTT(train_args)
    return OBJECTIVES[train_args.objective](train_args)


def build_model(model_args, data_args, tokenizer, objective: str = "clm") -> torch.nn.Module:
    """A fresh model of the run's family sized to the tokenizer, or the `init_from` checkpoint.

    `objective="clm"` builds an `HfLmGPTForCausalLM` (with `--arch`/`--family` the family named),
    `"mlm"` an `HfLmBertForMaskedLM` (with `sparse_prediction`), `"electra"` an
    `ElectraPretrainingModel` (the discriminator and its generator), the denoising objectives T5 or BART.
    """
    family = resolve_family(model_args.arch, model_args.family, objective)
    return OBJECTIVES[objective](None).build_model(family, model_args, data_args, tokenizer)
