"""A run: its arguments, accelerator, data, objective and fresh model, in a folder it owns.

`start_run` builds what every part of a run shares (the gradient loop, `training.train.TrainingLoop`,
and the n-gram fit, `training.ngram_fit`), the same on every process: the split, the tokenizer and
the initial weights come from `set_seed(seed)`; then each process re-seeds its dropout stream.
`finish_run` writes the final outputs (`training.export`) on the main process.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin, broadcast_object_list, set_seed

from ..args import DataArguments, ModelArguments, TrainArguments
from ..data.batches import BatchPlan
from ..data.prepare import prepare_data
from ..export import export_run
from ..models import resolve_family
from ..objectives import Objective, objective_for
from ..sharding import check_shardable, describe, requested_plugin
from ..state.folders import new_run_id
from . import log as run_log
from .log import CsvLog
from .optimizer import configure_tf32
from .processes import cpu_only

logger = logging.getLogger(__name__)


@dataclass
class Run:
    """A run's arguments, accelerator, data, objective and fresh model, in a folder it owns."""

    data_args: DataArguments
    model_args: ModelArguments
    train_args: TrainArguments
    accelerator: Accelerator
    objective: Objective
    family: str
    tokenizer: object
    train_blocks: object  # a dict of (N, T) tensors, or a streamed `BlockStream`
    eval_blocks: dict[str, torch.Tensor]
    description: str  # the card's sentence on the data
    model: torch.nn.Module
    trackers: list[str]
    tf32: bool
    batch_plan: BatchPlan  # how the training blocks become micro-batches, decided once from the arguments
    # FSDP2's plan (`training.sharding`), None for DDP
    sharding: FullyShardedDataParallelPlugin | None = None
    start_time: float = field(default_factory=time.perf_counter)

    @property
    def output_dir(self) -> Path:
        return Path(self.train_args.output_dir)

    @property
    def checkpoint_dir(self) -> Path:
        return self.output_dir / "checkpoints"

    @property
    def fits_by_counting(self) -> bool:
        """An n-gram model trained from scratch is fitted by counting: no optimizer, steps or checkpoints."""
        return self.family == "ngram" and not self.model_args.init_from

    @property
    def world(self) -> int:
        return self.accelerator.num_processes

    @property
    def rank(self) -> int:
        return self.accelerator.process_index

    @property
    def global_batch(self) -> int:
        return self.batch_plan.global_batch

    @property
    def tokens_per_update(self) -> int:
        return self.batch_plan.global_batch * self.batch_plan.block_size

    def elapsed(self) -> float:
        return round(time.perf_counter() - self.start_time, 2)

    def csv_log(self, resume_step: int | None) -> CsvLog:
        enabled = self.accelerator.is_main_process and "csv" in self.train_args.trackers
        return CsvLog(self.output_dir / "metrics.csv", resume_step=resume_step, enabled=enabled)

    def init_trackers(self) -> None:
        if self.trackers:
            hparams = run_log.hparams(self.data_args, self.model_args, self.train_args)
            self.accelerator.init_trackers("tensorboard", config=hparams)


def seed_process_rngs(seed: int, rank: int) -> int:
    """Re-seed torch's global generators (CPU and every GPU) with a seed of process `rank`'s own.

    Called after `set_seed(seed)` has made the split, tokenizer and initial weights the same on
    every process. Without it every rank would draw the same dropout masks, so the masks of a
    global batch would be copies of b-row patterns instead of independent draws as in one
    process's batch. The seed is derived with `numpy.random.SeedSequence([seed, rank])`, which
    spreads nearby (seed, rank) pairs over unrelated streams.

    Returns:
        The derived seed.
    """
    derived = int(np.random.SeedSequence([seed, rank]).generate_state(1)[0])
    torch.manual_seed(derived)  # seeds the CUDA generators too
    return derived


def forget_previous_run_settings() -> None:
    """Let this run choose its own precision and accumulation in a process that already trained.

    accelerate keeps them process-wide: a second `train()` with another `mixed_precision` (a
    notebook, the GPU sweep, the tests) would fail with "AcceleratorState has already been
    initialized". The distributed state (`PartialState`: process group, rank, device) is kept.
    """
    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()


def check_distributed_type(distributed_type: DistributedType) -> None:
    """Refuse the engines this loop does not run, whatever asked for them (`requested_plugin` has
    refused their accelerate configs already; FSDP2 runs through `training.sharding`)."""
    if distributed_type in (DistributedType.DEEPSPEED, DistributedType.MEGATRON_LM):
        raise ValueError(
            f"training.train does not run accelerate's {distributed_type.value} engine. Shard with FSDP2 "
            "(`--fsdp full_shard`), or launch with torchrun (DDP)."
        )


def start_run(data_args: DataArguments, model_args: ModelArguments, train_args: TrainArguments) -> Run:
    """The accelerator, the data and a fresh model (the same on every process), then the dropout
    stream of each process's own."""
    output_dir = Path(train_args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    trackers = run_log.trackers(train_args)
    forget_previous_run_settings()
    # refused engines fail here, on every device. The plan is not given to the Accelerator: it would
    # drop it on CPU processes, and it sets ACCELERATE_USE_FSDP for the rest of the process (the
    # next run in it would inherit FSDP); the loop shards the model itself (`shard_model`)
    sharding = requested_plugin(train_args.fsdp, train_args.gradient_checkpointing)
    accelerator = Accelerator(
        # without `cpu=True` accelerate ignores torchrun's WORLD_SIZE on a machine with no GPU and
        # every process trains alone; with it, they join one gloo process group (MULTI_CPU). The
        # same as `train`'s `process_state`, which has set the process state up already
        cpu=cpu_only(),
        mixed_precision=train_args.mixed_precision,
        gradient_accumulation_steps=train_args.gradient_accumulation_steps,
        log_with=trackers or None,
        project_dir=str(output_dir),
    )
    check_distributed_type(accelerator.distributed_type)
    world, rank = accelerator.num_processes, accelerator.process_index
    batch_plan = BatchPlan.from_args(data_args, train_args, world, rank)
    logger.info("Process %d of %d on %s (%s).", rank, world, accelerator.device, accelerator.distributed_type)
    set_seed(train_args.seed)  # the same split, tokenizer and initial weights on every process
    start_time = time.perf_counter()
    tf32 = configure_tf32(train_args.tf32, accelerator.device)
    logger.info("TF32 matmuls: %s.", "on" if tf32 else f"off ({accelerator.device.type})")
    objective = objective_for(train_args)
    family = resolve_family(model_args.arch, model_args.family, train_args.objective)  # checked by `train`
    tokenizer, train_blocks, eval_blocks, description = prepare_data(
        data_args, train_args, accelerator, init_from=model_args.init_from
    )
    model = objective.build_model(family, model_args, data_args, tokenizer)
    if sharding is not None:
        check_shardable(model, family)
    if train_args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    objective.bind(tokenizer, eval_blocks, accelerator, train_args.seed)
    seed_process_rngs(train_args.seed, rank)  # then a dropout stream of each process's own
    return Run(
        data_args, model_args, train_args, accelerator, objective, family, tokenizer, train_blocks,
        eval_blocks, description, model, trackers, tf32, batch_plan, sharding, start_time,
    )  # fmt: skip


def shared_run_id(accelerator: Accelerator) -> str:
    """A fresh run id (`training.state.folders.new_run_id`), the main process's on every process."""
    run_id = [new_run_id()]
    if accelerator.num_processes > 1:
        broadcast_object_list(run_id, from_process=0)
    return run_id[0]


def finish_run(run: Run, model, csv_log, metrics: dict, evaluation: dict, best, history, fused: bool) -> dict:
    """Write the final outputs on the main process, end the trackers; returns `metrics`."""
    run.accelerator.wait_for_everyone()
    if run.accelerator.is_main_process:
        runtime = {"fused AdamW": fused, "TF32 matmuls": run.tf32}
        if run.sharding is not None:
            runtime[describe(run.sharding)] = True
        export_run(run, model, csv_log, metrics, evaluation, best, history, runtime)
    for tracker in run.accelerator.trackers:
        # not `end_training()`: that also destroys the process group, and the barrier below (or
        # a next run in the same launch) still needs it; `train.main` ends the group last
        tracker.finish()
    run.accelerator.wait_for_everyone()
    return metrics
