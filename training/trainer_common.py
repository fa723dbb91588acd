"""What the `Trainer`-based scripts (`finetune_classification`, `finetune_translation`) share:
the arguments both change or add (`ScriptTrainingArguments`, `trust_remote_code_field`, the
from-scratch checks), the refusal of a sharding engine `Trainer` would not run (`check_sharding_engine`),
the wall-clock budget (`--max_train_seconds`), the training run itself
(`train_with_budget`), the model card's training hyperparameters and data summary, the run summary
written next to the model, and the command-line entry point."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import torch
from torch.optim.lr_scheduler import LambdaLR
from transformers import AutoTokenizer, Trainer, TrainerCallback, TrainingArguments

# the longest input a model accepts (None: any length), by the rule generation is bounded with
from hf_lm.pipelines_seq2seq import position_limit  # noqa: F401  (common.position_limit)

from .args import check_seed
from .args.checks import check_model_folder
from .budget import agreed_seconds
from .run.processes import MPI_VARIABLES, check_launch_environment, end_process_group

logger = logging.getLogger(__name__)

# the input length when none is asked for (and the positions of a fresh model)
DEFAULT_MAX_SEQ_LENGTH = 128


def resolve_max_length(requested: int | None, limit: int | None, name: str) -> int:
    """The length to truncate to: `requested`, or `DEFAULT_MAX_SEQ_LENGTH` capped at `limit`.

    Raises:
        ValueError: naming `name`, when `requested` exceeds `limit`: truncating to a length the
            model cannot take would fail at the first long batch, mid-training.
    """
    if requested is None:
        return DEFAULT_MAX_SEQ_LENGTH if limit is None else min(DEFAULT_MAX_SEQ_LENGTH, limit)
    if limit is not None and requested > limit:
        raise ValueError(
            f"`{name}`={requested} is longer than the model's learned positions "
            f"(max_position_embeddings={limit}); pass {limit} or less."
        )
    return requested


# how the learning rate follows a wall-clock budget (`--budget_schedule`)
BUDGET_SCHEDULES = ("none", "linear")


def check_budget(seconds: float | None) -> None:
    """Raise `ValueError` unless `seconds` (a `max_train_seconds`) is None or a positive number."""
    if seconds is not None and (
        isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0
    ):
        raise ValueError(f"`max_train_seconds` must be a positive number of seconds, got {seconds!r}.")


# the variable an accelerate config's `distributed_type` sets in every process `accelerate launch` starts
ENGINE_VARIABLES = {
    "FSDP": "ACCELERATE_USE_FSDP",
    "DEEPSPEED": "ACCELERATE_USE_DEEPSPEED",
    "MEGATRON_LM": "ACCELERATE_USE_MEGATRON_LM",
}
# what a run on the CPU uses instead of a sharding engine
_INSTEAD = (
    "For DDP on the CPU, launch with `torchrun --nproc_per_node N -m training.<script> --use_cpu ...` "
    "(on a machine without a GPU the scripts set `--use_cpu` themselves). transformers' Trainer runs "
    "FSDP and DeepSpeed itself on CUDA GPUs. hf_lm's own pretraining loop shards on the CPU and on GPUs: "
    "`torchrun --nproc_per_node N -m training.train --fsdp full_shard ...`."
)


def _env_true(name: str) -> bool:
    # transformers reads ACCELERATE_USE_DEEPSPEED with strtobool ("1", "yes" ...), accelerate compares
    # with "true": any of them asks for the engine
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "y", "on", "t")


def _on_shardable_device() -> bool:
    """Whether accelerate places this machine's processes on a device where it runs FSDP and
    DeepSpeed: CUDA, or one of accelerate's other distributed devices (as `PartialState` picks them)."""
    if torch.cuda.is_available():
        return True
    from accelerate.utils import (
        is_hpu_available,
        is_mlu_available,
        is_musa_available,
        is_neuron_available,
        is_npu_available,
        is_sdaa_available,
        is_torch_xla_available,
        is_xpu_available,
    )

    found = (is_torch_xla_available, is_mlu_available, is_sdaa_available, is_musa_available, is_npu_available)
    return any(f() for f in found) or is_hpu_available() or is_xpu_available() or is_neuron_available()


def launch_size() -> int:
    """The number of processes of the launch this process is part of, as accelerate reads it
    (torchrun's WORLD_SIZE, or an MPI launcher's own variable); 1 outside a launch. A value that
    is not an integer counts as 1: accelerate, which converts it, names it."""
    sizes = [1]
    for name in ("WORLD_SIZE", *MPI_VARIABLES):
        try:
            sizes.append(int(os.environ.get(name, "1")))
        except ValueError:
            pass
    return max(sizes)


def put_launch_on_cpu(args) -> None:
    """Set `use_cpu` for a launch of several processes on a machine without a GPU.

    There transformers sets up accelerate's process state without `cpu=True`, and accelerate then
    ignores the launch (`WORLD_SIZE`): every process trains alone, all into one output folder.
    With `use_cpu` the processes are one DDP group on the CPU (accelerate's MULTI_CPU, gloo), as
    hf_lm's own loop makes them (`training.run.processes.cpu_only`). Called before transformers
    sets up the device; a machine with CUDA (or one of accelerate's other devices) is left alone.

    Raises:
        ValueError: launch variables that no launcher set (`check_launch_environment`: a WORLD_SIZE
            left in a shell, which would otherwise wait for processes that never come).
    """
    size = launch_size()
    if size > 1 and not args.use_cpu and not _on_shardable_device():
        check_launch_environment()
        args.use_cpu = True
        logger.info(
            "A launch of %d processes on a machine without a GPU: `use_cpu` set, so that the processes "
            "train on the CPU as one DDP group (gloo) instead of each training alone.",
            size,
        )


def _fsdp_flag(fsdp) -> str:
    """`fsdp` as the command line spells it: `--fsdp`, `--fsdp full_shard auto_wrap`."""
    if isinstance(fsdp, str):
        words = fsdp.split()
    elif isinstance(fsdp, (list, tuple)):  # `FSDPOption`s from a Python caller
        words = [str(getattr(w, "value", w)) for w in fsdp]
    else:  # True: bare `--fsdp`
        words = []
    return f"`{' '.join(['--fsdp', *words])}`"


def check_sharding_engine(args) -> None:
    """Refuse a sharding engine that transformers' `Trainer` would not run on this run's processes.

    On processes on the CPU (no GPU, `--use_cpu`, or ACCELERATE_USE_CPU=true) accelerate's state is
    MULTI_CPU, which takes no FSDP or DeepSpeed plugin: `--fsdp` (FSDP2; FSDP1 fails later on a device
    check), `--deepspeed` and an accelerate config asking for either would train with plain DDP, each
    process holding the whole model, without a word. Megatron-LM needs accelerate's own Megatron
    training loop, which `Trainer` is not, on every device. On CUDA (and accelerate's other
    distributed devices) `--fsdp` and `--deepspeed` pass through: `Trainer` runs them itself.
    A `--fsdp_config` without `--fsdp` is ignored by transformers on every device: refused too.

    Args:
        args: the `TrainingArguments` (as given, or after their `__post_init__`): `fsdp`,
            `fsdp_config`, `deepspeed` and `use_cpu` are read.

    Raises:
        ValueError: naming the flag or the environment variable, and what to use instead.
    """
    if _env_true(ENGINE_VARIABLES["MEGATRON_LM"]):
        raise ValueError(
            "The launch asks for Megatron-LM (ACCELERATE_USE_MEGATRON_LM=true: an accelerate config "
            "with `distributed_type: MEGATRON_LM`), which transformers' Trainer does not run: "
            "accelerate's Megatron-LM plugin needs its own training loop. Launch with an accelerate "
            "config whose distributed_type is MULTI_GPU (DDP), FSDP or DEEPSPEED on GPUs, or with "
            "torchrun (DDP)."
        )
    fsdp, deepspeed = getattr(args, "fsdp", None), getattr(args, "deepspeed", None)
    if getattr(args, "fsdp_config", None) and not fsdp:
        raise ValueError(
            "`--fsdp_config` configures FSDP only together with `--fsdp`, which is not set: "
            "transformers would ignore it and train without FSDP. Pass `--fsdp` too, or drop "
            "`--fsdp_config`."
        )
    if getattr(args, "use_cpu", False):
        where = "`--use_cpu` puts this run's processes on the CPU"
    elif _env_true("ACCELERATE_USE_CPU"):
        where = (
            "ACCELERATE_USE_CPU=true (`use_cpu: true` in an accelerate config) puts this run's "
            "processes on the CPU"
        )
    elif not _on_shardable_device():
        where = "this machine has no CUDA GPU, so this run's processes are on the CPU"
    else:
        return  # Trainer shards there itself
    if fsdp:
        asked, drop = f"{_fsdp_flag(fsdp)} asks transformers' Trainer for FSDP", "Drop `--fsdp`."
    elif deepspeed:
        shown = deepspeed if isinstance(deepspeed, str) else "<a config dict>"
        asked, drop = f"`--deepspeed {shown}` asks transformers' Trainer for DeepSpeed", "Drop `--deepspeed`."
    elif _env_true(ENGINE_VARIABLES["FSDP"]):
        asked = (
            "The launch asks for FSDP (ACCELERATE_USE_FSDP=true: an accelerate config with "
            "`distributed_type: FSDP`)"
        )
        drop = "Launch without that accelerate config."
    elif _env_true(ENGINE_VARIABLES["DEEPSPEED"]):
        asked = (
            "The launch asks for DeepSpeed (ACCELERATE_USE_DEEPSPEED=true: an accelerate config with "
            "`distributed_type: DEEPSPEED`)"
        )
        drop = "Launch without that accelerate config."
    else:
        return
    raise ValueError(
        f"{asked}, but {where}, where accelerate does not shard: its MULTI_CPU state takes no FSDP "
        "or DeepSpeed plugin, and the processes would train with plain DDP, each holding the whole "
        f"model and optimizer state. {drop} {_INSTEAD}"
    )


@dataclass
class ScriptTrainingArguments:
    """The `TrainingArguments` defaults both scripts change, and the wall-clock budget they add.

    A mixin: `class XTrainingArguments(ScriptTrainingArguments, TrainingArguments)` (or
    `Seq2SeqTrainingArguments`); its fields override the transformers defaults of the same name.
    """

    eval_strategy: str = field(default="epoch", metadata={"help": "When to evaluate: no, steps, epoch."})
    save_strategy: str = field(
        default="epoch", metadata={"help": "When to checkpoint: no, steps, epoch, best."}
    )
    save_total_limit: int | None = field(default=1, metadata={"help": "Checkpoints kept (the best one too)."})
    logging_steps: float = field(default=50, metadata={"help": "Log the training loss every N updates."})
    report_to: None | str | list[str] = field(
        default="none", metadata={"help": "Trackers (tensorboard, wandb, all ...); none unless asked."}
    )
    dataloader_pin_memory: bool = field(
        default=torch.cuda.is_available(),
        metadata={"help": "Pin batches in memory (useful with a GPU only)."},
    )
    max_train_seconds: float | None = field(
        default=None,
        metadata={
            "help": "A wall-clock budget for training (evaluations during training included): stop at the "
            "first step boundary past it, then evaluate, test and save as usual."
        },
    )

    budget_schedule: str = field(
        default="none",
        metadata={
            "help": "With `max_train_seconds`: `linear` decays the learning rate after the warmup to 0 over the "
            "wall-clock budget (the fraction of it spent), replacing `lr_scheduler_type`, so that the rate ends "
            "where the budget stops training whatever the hardware's speed; `none` (default) keeps "
            f"`lr_scheduler_type`. One of {BUDGET_SCHEDULES}."
        },
    )

    def __post_init__(self) -> None:
        # before transformers' own checks: its `--deepspeed` import would fail first where DeepSpeed is
        # not installed, and a Python caller building these arguments is covered as the command line is
        check_sharding_engine(self)
        # before transformers' post-init sets up the device and accelerate's process state
        put_launch_on_cpu(self)
        super().__post_init__()
        check_seed(self.seed)  # else a crash in set_seed, after the data and the tokenizer
        check_budget(self.max_train_seconds)
        if self.budget_schedule not in BUDGET_SCHEDULES:
            raise ValueError(
                f"`budget_schedule` must be one of {BUDGET_SCHEDULES}, got {self.budget_schedule!r}."
            )
        if self.budget_schedule != "none" and self.max_train_seconds is None:
            raise ValueError(
                f"`budget_schedule`={self.budget_schedule!r} decays over the wall-clock budget: "
                "pass `max_train_seconds` too."
            )
        if self.budget_schedule != "none" and 0 < self.warmup_steps < 1:
            raise ValueError(
                f"`warmup_steps`={self.warmup_steps} below 1 is a share of the planned steps, which a run "
                "ended by its budget does not reach: pass `warmup_steps` as a number of steps."
            )


def trust_remote_code_field():
    """The `trust_remote_code` field of both scripts' model arguments."""
    return field(
        default=False,
        metadata={
            "help": "Run model/tokenizer code shipped inside the folder (its config's auto_map). Off by "
            "default, as in transformers: hf_lm's own model types load with the installed hf_lm without it."
        },
    )


def check_model_arguments(model_args, *dropouts: str) -> None:
    """Exactly one of `model_name_or_path` and `from_scratch`, and every named dropout in [0, 1) or None."""
    if model_args.from_scratch == (model_args.model_name_or_path is not None):
        raise ValueError("Pass exactly one of `model_name_or_path` or `from_scratch`.")
    for name in dropouts:
        value = getattr(model_args, name)
        if value is not None and not 0 <= value < 1:
            raise ValueError(f"`{name}` must be in [0, 1), got {value!r}.")


def load_tokenizer(model_args, path: str | None = None):
    """`tokenizer_name_or_path` (else `path`, the pretrained folder) with `AutoTokenizer`."""
    if model_args.model_name_or_path is not None:  # the first read of it: a run's folder is named
        check_model_folder(model_args.model_name_or_path, "--model_name_or_path")
    return AutoTokenizer.from_pretrained(
        model_args.tokenizer_name_or_path or path, trust_remote_code=model_args.trust_remote_code
    )


def split_limits(data_args) -> dict[str, int | None]:
    """split -> how many examples to keep (`max_train_samples`, `max_eval_samples`, `max_test_samples`)."""
    return {
        "train": data_args.max_train_samples,
        "validation": data_args.max_eval_samples,
        "test": data_args.max_test_samples,
    }


def tokenize_splits(raw: datasets.DatasetDict, encode: Callable) -> datasets.DatasetDict:
    """Every split of `raw` through the batched `encode`, its text columns replaced by the encoding
    (never a stale cached map of another tokenizer)."""
    return raw.map(
        encode,
        batched=True,
        remove_columns=raw["train"].column_names,
        desc="Tokenizing",
        load_from_cache_file=False,
    )


def require_validation(raw: datasets.DatasetDict, args: TrainingArguments, how: str) -> None:
    """Refuse evaluation during training without a validation split; `how` says how to give one."""
    if "validation" not in raw and args.eval_strategy != "no":
        raise ValueError(
            f"Evaluation during training needs a validation split ({how}); pass one, or `--eval_strategy no`."
        )


class WallClockBudgetCallback(TrainerCallback):
    """Stop `Trainer` at the first optimizer-step boundary after `max_seconds` of training.

    The clock starts at `on_train_begin` (after the data loader and optimizer are set up) and is
    read after every optimizer step, so the step in progress always completes and the model is
    never left half-updated; evaluations run during training count towards the budget. Under DDP
    the processes agree on the largest elapsed time (`agreed_seconds`), so all stop at one step. Training
    then ends as at `max_steps`: the epoch-end hooks run and `Trainer.train` returns.

    Attributes:
        max_seconds: the budget in seconds.
        reached: whether the budget stopped the last run (False if it ended by steps/epochs).
        stopped_at_step: the global step at which it stopped, or None.
    """

    def __init__(self, max_seconds: float, clock: Callable[[], float] = time.perf_counter):
        check_budget(max_seconds)
        self.max_seconds = float(max_seconds)
        self.clock = clock  # seconds, monotonic (a test passes a fake one)
        self.reached = False
        self.stopped_at_step: int | None = None
        self._start: float | None = None
        self._elapsed = 0.0  # seconds of training at the last step's end, the same in every process

    def on_train_begin(self, args, state, control, **kwargs):
        self._start, self._elapsed = self.clock(), 0.0
        self.reached, self.stopped_at_step = False, None

    def spent(self) -> float:
        """The fraction of the budget spent at the last step's end (0 before it): 1 or more at its end."""
        return self._elapsed / self.max_seconds

    def on_step_end(self, args, state, control, **kwargs):
        if self._start is None or control.should_training_stop:
            return control
        self._elapsed = elapsed = agreed_seconds(self.clock() - self._start, getattr(args, "device", None))
        if elapsed >= self.max_seconds:
            control.should_training_stop = True
            self.reached, self.stopped_at_step = True, state.global_step
            logger.info(
                "Wall-clock budget of %.0f s reached after %.1f s at step %d (epoch %.2f): stopping.",
                self.max_seconds,
                elapsed,
                state.global_step,
                state.epoch or 0.0,
            )
        return control


def budget_linear_schedule(optimizer, warmup_steps: int, budget: WallClockBudgetCallback) -> LambdaLR:
    """A linear warmup over `warmup_steps`, then a linear decay to 0 over the budget's wall-clock time.

    A time budget has no known last step for a step-based decay to aim at; this one follows the
    clock instead, so the rate reaches 0 where `budget` stops training on any hardware. The factor
    is read at each `scheduler.step()`, from the time the processes agreed on at the previous step's
    end (`WallClockBudgetCallback.spent`), so every process follows the same rate. A run that
    resumes from a checkpoint starts a new budget, so a new decay.
    """

    def factor(step: int) -> float:
        warmup = min(1.0, step / warmup_steps) if warmup_steps > 0 else 1.0  # as transformers' warmups
        return warmup * max(0.0, 1.0 - budget.spent())

    return LambdaLR(optimizer, factor)


def with_budget_schedule(trainer_class: type[Trainer], budget: WallClockBudgetCallback) -> type[Trainer]:
    """`trainer_class` whose scheduler is `budget_linear_schedule` (`--budget_schedule linear`)."""

    class BudgetScheduledTrainer(trainer_class):
        def create_scheduler(self, num_training_steps: int, optimizer=None):
            if self.lr_scheduler is None:
                warmup = self.args.get_warmup_steps(num_training_steps)
                self.lr_scheduler = budget_linear_schedule(optimizer or self.optimizer, warmup, budget)
                self._created_lr_scheduler = True
            return self.lr_scheduler

    BudgetScheduledTrainer.__name__ = BudgetScheduledTrainer.__qualname__ = f"Budget{trainer_class.__name__}"
    return BudgetScheduledTrainer


def check_launch_joined(args) -> None:
    """Refuse training arguments whose process trains alone although it is part of a launch of
    several processes: plain `TrainingArguments` built without `use_cpu` on a machine without a
    GPU (`put_launch_on_cpu` sets it for the scripts' own arguments, too late for these: their
    process state is set up). Logs how the launch's processes train otherwise.

    Raises:
        ValueError: naming the launch's size and `use_cpu`.
    """
    size = launch_size()
    if args.world_size > 1:
        if args.use_cpu:
            logger.info(
                "%d processes train on the CPU as one DDP group (%s).",
                args.world_size,
                getattr(args.distributed_state, "backend", None),
            )
        return
    if size > 1 and not _on_shardable_device():
        found = ", ".join(f"{n}={os.environ[n]}" for n in ("WORLD_SIZE", *MPI_VARIABLES) if n in os.environ)
        raise ValueError(
            f"This process is part of a launch of {size} processes ({found}), but it trains alone: "
            "on a machine without a GPU accelerate "
            "ignores the launch unless told that its processes run on the CPU, and every process would "
            "train by itself into the same output folder. Build the `TrainingArguments` with "
            "`use_cpu=True`."
        )


def train_with_budget(trainer_class: type[Trainer], args: TrainingArguments, encoded, **kwargs):
    """Build the `Trainer` on the encoded splits, with the wall-clock budget if one is set, and train.

    Args:
        trainer_class: `Trainer` or `Seq2SeqTrainer`.
        args: the training arguments (`max_train_seconds` for a budget).
        encoded: the tokenized `DatasetDict`: "train", and "validation" to evaluate during training.
        **kwargs: the rest of the trainer's arguments (`model`, `processing_class`,
            `data_collator`, `compute_metrics`).

    Returns:
        `(trainer, metrics)`: Trainer's `train_*` metrics plus `train_samples`, `num_parameters`,
        `train_steps` (optimizer updates done), `train_epochs` (fractional) and
        `train_budget_reached` (whether `max_train_seconds` ended training).
    """
    # again for plain `TrainingArguments` from a Python caller, and a launch environment changed since
    check_sharding_engine(args)
    check_launch_joined(args)
    seconds = getattr(args, "max_train_seconds", None)
    budget = None if seconds is None else WallClockBudgetCallback(seconds)
    schedule = getattr(args, "budget_schedule", "none")
    if budget is not None and schedule == "linear":
        trainer_class = with_budget_schedule(trainer_class, budget)
    trainer = trainer_class(
        args=args,
        train_dataset=encoded["train"],
        eval_dataset=encoded.get("validation"),
        callbacks=[budget] if budget is not None else None,
        **kwargs,
    )
    train_result = trainer.train()
    if budget is not None and schedule != "none" and not budget.reached:
        logger.warning(
            "The steps or epochs ended training after %.0f%% of the %.0f s budget: the budget schedule's "
            "rate had not reached 0. Raise `num_train_epochs` (or `max_steps`) so that the budget ends it.",
            100 * budget.spent(),
            budget.max_seconds,
        )
    metrics = dict(
        train_result.metrics,
        train_samples=len(encoded["train"]),
        num_parameters=trainer.model.num_parameters(),
        train_steps=int(train_result.global_step),
        train_epochs=float(trainer.state.epoch or 0.0),
        train_budget_reached=bool(budget is not None and budget.reached),
    )
    return trainer, metrics


def log_metrics(metrics: dict) -> None:
    for name, value in metrics.items():
        logger.info("%s = %s", name, value)


def reported_split(encoded) -> str | None:
    """The metric prefix the card's `model-index` reports: "test", else "eval", else None."""
    return "test" if "test" in encoded else "eval" if "validation" in encoded else None


def split_sizes(encoded, unit: str) -> str:
    """'1,000 training <unit>, 100 validation, 100 test' (the splits there are)."""
    return (
        f"{len(encoded['train']):,} training {unit}"
        + (f", {len(encoded['validation']):,} validation" if "validation" in encoded else "")
        + (f", {len(encoded['test']):,} test" if "test" in encoded else "")
    )


def save_final(trainer: Trainer, tokenizer, output_dir: Path) -> Path:
    """Save the trained model and its tokenizer in `output_dir/final` (the card comes next)."""
    final = output_dir / "final"
    trainer.model.save_pretrained(final)
    tokenizer.save_pretrained(final)
    return final


def _plain(value) -> str:
    """An enum's value ("linear"), anything else as a string."""
    return str(getattr(value, "value", value))


def card_hyperparameters(args: TrainingArguments, head: dict, tail: dict) -> dict:
    """The model card's hyperparameter table: the script's own `head` rows (the start, the data),
    then the optimization every Trainer run shares, the script's `tail` rows, the seed and the
    wall-clock budget if one was set."""
    seconds = getattr(args, "max_train_seconds", None)
    return {
        **head,
        "length": f"{args.max_steps} steps" if args.max_steps > 0 else f"{args.num_train_epochs:g} epochs",
        "batch size per device": args.per_device_train_batch_size,
        "gradient accumulation steps": args.gradient_accumulation_steps,
        "learning rate": args.learning_rate,
        "schedule": (
            f"linear decay over the wall-clock budget, warmup {args.warmup_steps}"
            if getattr(args, "budget_schedule", "none") == "linear"
            else f"{_plain(args.lr_scheduler_type)}, warmup {args.warmup_steps}"
        ),
        "optimizer": f"{_plain(args.optim)}, weight decay {args.weight_decay}",
        **tail,
        "seed": args.seed,
        **({} if seconds is None else {"wall-clock budget": f"{seconds:g} s of training"}),
    }


def save_run_summary(trainer: Trainer, output_dir: Path, metrics: dict, final: Path) -> None:
    """`metrics.json` and `trainer_state.json` (the logged loss, grad norm and evaluation history)
    in the run folder, next to the saved `final/` model."""
    (output_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    trainer.save_state()
    logger.info(
        "Saved the model, tokenizer and card to %s; metrics in %s", final, output_dir / "metrics.json"
    )


def script_main(parse_args: Callable, finetune: Callable, argv: list[str] | None) -> dict[str, float]:
    """A Trainer script's entry point: parse the arguments (flags or one .json/.yaml file), log at
    INFO on the main process only, run, and end the process group of a distributed launch
    (`training.run.processes`)."""
    data_args, model_args, training_args = parse_args(argv)
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        level=logging.INFO if training_args.process_index == 0 else logging.WARNING,
    )
    metrics = finetune(data_args, model_args, training_args)
    end_process_group()
    return metrics
