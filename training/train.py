"""The training loop of hf_lm: one accelerate loop for causal LMs, resumable exactly.

    python -m training.train --dataset synthetic --max_steps 200 --output_dir out/run
    python -m training.train run.yaml
    torchrun --standalone --nproc_per_node 2 -m training.train ...   # gloo DDP on CPU

(`accelerate launch --cpu --num_processes 2` silently runs one process on this CPU; use torchrun or
`accelerate launch --multi_gpu --num_processes 2`.)

What the loop guarantees:

- **One data order for any number of processes.** Each update reads one *global batch* of
  `per_device_batch_size * num_processes * gradient_accumulation_steps` blocks, taken in order
  from a permutation of the training blocks seeded by (seed, epoch). Micro-step m of the update
  takes the m-th slice of `per_device_batch_size * num_processes` indices and rank r its r-th
  contiguous part. So the union of all ranks' micro-batches of an update is the same set of
  blocks whatever the split between processes and accumulation, and 2 processes x b blocks
  follow the same trajectory as 1 process x 2b (up to float rounding).
- **Random windows** (`sampling="random_windows"`, objective clm, in-memory data): nanoGPT's
  `get_batch` instead of the blocks. Update u reads G windows of `block_size + 1` tokens at uniformly
  random offsets of the training token stream (the packed blocks end to end), drawn from a generator
  seeded by (seed, u) (`RandomWindows`) and cut into micro-steps and ranks as the blocks are: the
  same windows for any number of processes, and a pure function of the step, so a resumed run draws
  what the uninterrupted one would. Each row has `block_size` targets (`x = data[i : i + T]`,
  `y = data[i + 1 : i + 1 + T]`); the evaluation stays on the fixed held-out blocks. With
  `document_mask` the windows get their document and position ids as packed blocks do.
  Refused with streaming, tbptt, scheduled sampling and the other objectives.
- **Streaming in bounded memory** (`streaming=True`): the training blocks are read, tokenized
  and packed while training, in the order of the stream passed through a seeded shuffle buffer
  (`training.data.streaming.buffered_shuffle`, seeded by (seed, epoch)), and cut into the same global
  batches and per-rank slices as above (`StreamingGlobalBatches`). Every process reads the whole
  stream and keeps its own slice, so the order does not depend on the number of processes.
  Memory holds the shuffle buffer, one global batch, the first `max_eval_blocks` evaluation
  blocks and the tokenizer's training sample (the first `tokenizer_train_documents` documents),
  whatever the size of the corpus.
- **The loss is a plain token mean per micro-batch**, and `accelerator.backward` divides it by
  `gradient_accumulation_steps` inside `accelerator.accumulate`; DDP averages over processes.
  Every block holds exactly `block_size - 1` predicted tokens (packing leaves no padding), so
  this mean of means is exactly the token mean over the global batch.
- **Independent dropout per process.** All processes start from `set_seed(seed)` (same split,
  tokenizer and initial weights); then each re-seeds torch with (seed, rank)
  (`seed_process_rngs`), so the ranks' dropout masks are independent, as those of a single
  process's larger batch are.
- **Exact resume.** A checkpoint (`training.state`) holds weights, optimizer, scheduler,
  the fp16 loss scaler (if any), the RNG states of *every* process (gathered to the main process,
  each restored by its own rank) and the data position (epoch, updates within the epoch, step;
  streaming re-reads the epoch's stream and skips that many global batches). The data order is a
  pure function of (data, seed, epoch), so a resumed run continues bit for bit as if never
  stopped (CPU, fp32). Checkpoints are written by the main process only, never after a
  non-finite loss. A checkpoint of another model config is refused with the differing fields.
- **Nothing is lost to a kill, a full disk or a damaged file.** Every file the loop writes is
  written aside and renamed into place (`tokenizer/`, checkpoints, `best/`, `final/`, `loss.png`,
  `final_metrics.json`, the rewrites of `metrics.csv`; a `metrics.csv` row cut short by a kill is
  dropped on reading), so a run killed at any moment resumes exactly. Every checkpoint file is
  checksummed (`manifest.json`); a resume walks back past damaged checkpoints, naming the file
  (`training.state.checkpoint.load_latest_checkpoint`). Checkpoints carry the run's id, kept on resume:
  `keep_last` prunes only this run's, and a resume continues the run that saved last.
- **Divergence stops the run**: a non-finite loss (averaged over processes, so all ranks agree)
  raises `TrainingDivergedError` before the update is applied, and so do non-finite weights
  found before a save or an evaluation (one fused reduction and one host sync): the last
  checkpoint is always the last good one, finite. With `rollback_on_divergence` the run instead
  goes back to that checkpoint and skips the offending batches (PaLM's remedy for loss spikes,
  with `spike_threshold`; `rollback_to_last_good`), deterministically, and `final_metrics.json`
  counts the rollbacks and skipped batches.
- **Evaluation** reports the held-out loss, perplexity and bits per token, character and word
  (`eval_text_units`: the characters and words the scored tokens spell).
- **The best model** (`load_best_model_at_end`): each evaluation better by `metric_for_best_model`
  writes the weights atomically to `best/checkpoint-N/` (`BestModel`); the best so far is recorded
  in every checkpoint, so it survives resume, and a best folder is deleted only when neither the
  current best nor a kept checkpoint records it, so `keep_last` never loses it. `final/` then
  holds the best weights; `final_metrics.json` has their metrics at the top level and under
  "best", the last evaluation under "last"; the card names the step.
- **Speed on a GPU**: `torch_compile` compiles the prepared model for the training forward only
  (evaluation runs the plain model: its compilation cost more than it saved); checkpoints and
  `final/` are saved from the plain module (no `_orig_mod.` prefixes). AdamW is fused when every
  parameter is on a CUDA GPU (`optimizer_kwargs`), and `tf32` lets float32 matmuls use TF32 there
  (`configure_tf32`); both are logged and named in the card, and neither applies on a CPU.
- **Precision**: bf16 autocast runs on CPU and GPU; fp16 needs a CUDA GPU (on CPU accelerate
  would silently train in fp32, so the run refuses it).
- **Ctrl-C and SIGTERM stop the run at a step boundary**, every process at the same one (the
  signals ride on each update's loss reduction), after a checkpoint of that step: a resume continues
  bit for bit. The CLI exits 130 (SIGINT) or 143 (SIGTERM); `train()` raises `RunInterrupted`. A
  second signal, or one outside the steps, stops at once (`training.run.processes.StopSignals`).
- **A finished launch exits 0 on every process**: `main` ends the process group after the run
  (`training.run.processes`), since a gloo group left alive can abort a process at exit; `train()`
  leaves it to its caller, so one launch can run several runs.

Outputs under `output_dir`: `tokenizer/`, `checkpoints/checkpoint-N/`, `best/checkpoint-N/` (with
`load_best_model_at_end`), `metrics.csv`,
`tensorboard` logs (if requested), `loss.png`, `final_metrics.json`, and `final/`, a folder ready to
push to the Hub as it is (`python -m training.push`): `model.safetensors`, `config.json` with
`auto_map`, the model code, `generation_config.json`, the tokenizer files, `loss.png` and a model card
`README.md` (architecture, data, hyperparameters, training time, `model-index` evaluation results).
It loads with `AutoModelForCausalLM.from_pretrained(..., trust_remote_code=True)` without hf_lm.

The loop's parts live in their own modules: the objectives (`training.objectives`: tokens, model,
inputs, evaluation and card results of each), the data (`training.data.prepare`, `training.data.batches`),
the run's state (`training.state`: checkpoints, resume, divergence, the best model), logging
(`training.run.log`) and the final outputs (`training.export`). An n-gram model is fitted by
counting, not by this loop (`training.ngram_fit`).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import signal
import sys
import time
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

import hf_lm  # noqa: F401  (registers the Auto classes)

from .args import DataArguments, ModelArguments, TrainArguments, parse_args
from .args.checks import check_arguments
from .budget import agreed_seconds
from .data.batches import DataPosition
from .export import final_metrics
from .ngram_fit import fit_ngram_run
from .run import log as run_log
from .run.folder import RunLock, claim_output_dir, nothing_to_resume, remove_staging_leftovers
from .run.log import projected_steps
from .run.optimizer import (
    build_optimizer,
    compile_model,
    optimizer_kwargs,
    tf32_restored,
)
from .run.processes import RunInterrupted, StopSignals, end_process_group, process_state
from .run.setup import Run, finish_run, shared_run_id, start_run
from .sharding import Lockstep, clip_grad_norm, consolidated_model, describe, memory_shares, shard_model
from .state.best import BestModel
from .state.checkpoint import load_latest_checkpoint, max_abs_weight, save_checkpoint, save_sharded_checkpoint
from .state.divergence import DivergenceGuard, TrainingDivergedError, rollback_to_last_good
from .state.folders import checkpoint_name, list_checkpoints
from .state.resume import DataState, restore_run, run_settings
from .state.rng import RngStates
from .state.stateful import CheckpointState, Values

logger = logging.getLogger(__name__)


def budget_spent(start: float, budget_s: float, accelerator: Accelerator) -> bool:
    """Whether `budget_s` seconds have passed since `start` in any process (every process stops at
    the same step)."""
    return agreed_seconds(time.perf_counter() - start, accelerator.device) >= budget_s


def forward_loss(model, batch: dict[str, torch.Tensor], extra_inputs: dict):
    """The model's outputs on a micro-batch of model inputs with their targets (`labels`, or random
    windows' `shift_labels`), `loss` its token mean: computed inside the forward, and so inside the
    compiled graph with `torch_compile`."""
    return model(**batch, **extra_inputs)


# ----------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------


class TrainingLoop:
    """The gradient loop of a run: resume, then updates with logging, evaluation, checkpoints and
    divergence checks, then the final outputs."""

    def __init__(self, run: Run, signals: StopSignals | None = None) -> None:
        self.run, args, accelerator = run, run.train_args, run.accelerator
        # SIGINT/SIGTERM (`train` installs the handlers); uninstalled, it never receives one
        self.signals = signals if signals is not None else StopSignals()
        self.agreed_signal = None  # a signal some process received, as the last update's reduction told
        # on its device before the optimizer is built, which picks its implementation for it (fused
        # on a GPU); `prepare` would move it there anyway
        model = run.model.to(accelerator.device)
        self.sharded = run.sharding is not None
        if self.sharded and run.objective.num_eval_blocks < run.world:
            raise ValueError(
                f"--fsdp evaluates on every process, and {run.objective.num_eval_blocks} evaluation blocks leave some of "
                f"the {run.world} processes none: raise max_eval_blocks (or eval_fraction) to at least {run.world}."
            )
        if self.sharded:  # the optimizer is then built over this process's shards
            model = shard_model(model, run.sharding, accelerator.device, args.mixed_precision)
        self.optimizer, self.scheduler = build_optimizer(model, args)
        self.raw_model = model  # the plain module (`_prepare` wraps it)
        self.guard = DivergenceGuard(args)
        self.best = None
        if args.load_best_model_at_end:
            self.best = BestModel(
                run.output_dir / "best",
                run.checkpoint_dir,
                args.metric_for_best_model,
                args.greater_is_better,
                accelerator.is_main_process,
            )
        self.position, self.history, self.last_loss, self.largest = DataPosition(), [], float("nan"), None
        kept = self._resume()
        # the run's clock goes on from its checkpoint's (the time lost after it is not counted): the
        # metrics' `seconds` and the card's training time cover every session of the run
        run.start_time -= kept.get("seconds", 0.0)
        if self.best is not None:
            # it holds the best of the resumed run's own past (none for a fresh run); drop the best
            # folders the interrupted run wrote after its checkpoint
            self.best.run_id = self.run_id
            self.best.prune()
        # the batches the run's `BatchPlan` decided on, from the resumed position
        self.data, self.updates_per_epoch, self.stream = run.batch_plan.batches(
            run.train_blocks, self.position, run.tokenizer.eos_token_id
        )
        self._prepare(model)
        run.init_trackers()
        self.csv_log = run.csv_log(self.position.step if self.checkpoint is not None else None)
        self.start_step = self.position.step
        self.recent, self.evaluation, self.evaluated_at = [], None, None
        self.last_good = self.checkpoint  # the newest checkpoint of this run known to be good
        self.saved_step = self.position.step if self.checkpoint is not None else None  # last_good's step

    def _resume(self) -> dict:
        """Load the newest intact checkpoint of the run that saved last into the run's state
        (`checkpoint_state`), before `prepare` (the plain objects load the states, and DDP then
        broadcasts rank 0's weights); a damaged one is passed over with a warning naming its file.
        Returns what the loop kept in the checkpoint (its `extra`; empty for a fresh run)."""
        run, args = self.run, self.run.train_args
        record = None
        if args.resume != "false":
            record = load_latest_checkpoint(run.checkpoint_dir, self.checkpoint_state())
        self.checkpoint = record["path"] if record is not None else None
        if args.resume == "true" and record is None:  # `train` checked there is one; it went in between
            raise FileNotFoundError(
                f"--resume true: {run.checkpoint_dir} holds no complete checkpoint. Run with --resume auto to start "
                "afresh where there is none."
            )
        # a resumed run keeps its id: its checkpoints are pruned with (and only with) those it wrote before
        self.run_id = record["run_id"] if record is not None else shared_run_id(run.accelerator)
        if record is None:
            return {}
        self.scheduler, self.history = restore_run(record, run, self.optimizer, self.scheduler, run.objective)
        return record["extra"] or {}

    def checkpoint_state(self, gather: bool = False) -> CheckpointState:
        """The run's state, part by part, as a checkpoint saves it and a resume gives it back
        (`training.state.stateful`): the model, optimizer, scheduler, loss scaler (fp16 on a GPU,
        else None), random streams, the data position and, in the extras, the loop's own record,
        the best model and the divergence guard.

        `gather`: for a save, collect every process's random streams and the objective's carried
        tensors (collectives: every process must call); a load restores this process's own.
        """
        run = self.run
        extra = (
            {"loop": self} | ({"best": self.best} if self.best is not None else {}) | {"guard": self.guard}
        )
        rng, tensors = RngStates(run.rank), None
        if gather:
            rng = RngStates.gathered(run.rank, run.world)
            tensors = run.objective.state_tensors(run.rank)
            if tensors is not None and run.world > 1:
                tensors = {k: v for part in gather_object([tensors]) for k, v in part.items()}
        return CheckpointState(
            model=self.raw_model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            scaler=run.accelerator.scaler,
            rng=rng,
            tensors=Values(tensors) if tensors is not None else None,
            data=DataState(self.position, run),
            extra=extra,
        )

    def state_dict(self) -> dict:
        """The loop's own part of a checkpoint (in its extras): the last loss, the largest weight,
        the run's clock, its settings and those changed at each resume."""
        run = self.run
        return {
            "loss": self.last_loss,
            "world_size": run.world,
            "max_abs_weight": self.largest,
            "seconds": run.elapsed(),
            "settings": run_settings(run.data_args, run.train_args),
            "settings_history": self.history,
        }

    def load_state_dict(self, extra: dict) -> None:
        """The last loss of the checkpoint's step. (The clock, settings and their history are a
        resume's to restore, `_resume`, not a rollback's.)"""
        self.last_loss = extra.get("loss", float("nan"))

    def _prepare(self, model) -> None:
        """Wrap the model and optimizer for the processes (DDP) and precision, and compile. A sharded
        model is not prepared: it is sharded already, and FSDP2 applies its own precision policy."""
        run, args = self.run, self.run.train_args
        if self.sharded:
            self.model = self.raw_model = model
        else:
            # the loader and the scheduler are not prepared: the sampler shards the data itself, and a
            # prepared scheduler would step `num_processes` times per update
            self.model, self.optimizer = run.accelerator.prepare(model, self.optimizer)
            # the plain module (no DDP, no compile wrapper) for evaluation, checkpoints and final/; the
            # compiled module only runs the training forward. (`accelerator.unwrap_model` of a compiled
            # DDP model would re-point the compiled module at the plain one, dropping DDP's gradient sync.)
            self.raw_model = run.accelerator.unwrap_model(self.model)
        self.forward_model = self.model
        if args.torch_compile:
            logger.info(
                "torch.compile: backend %s, mode %s (the first steps compile).",
                args.torch_compile_backend,
                args.torch_compile_mode or "default",
            )
            # the training forward only; evaluation runs the plain module. Compiling it too cost the
            # recipe's first evaluation about 18 of its 78 s on an H200 (a no-grad graph, then one for
            # the smaller last batch), while its evaluations take a fraction of a second eagerly
            self.forward_model = compile_model(self.model, args)

    def evaluate(self) -> dict[str, float | None]:
        model = Lockstep(self.raw_model) if self.sharded else self.raw_model
        return self.run.objective.evaluate(model, self.run.eval_blocks, self.run.accelerator)

    def full_model(self) -> torch.nn.Module | None:
        """The model whole, for `best/` and `final/`: the plain module, or under FSDP a consolidated
        copy on the main process (None elsewhere; every process must call)."""
        if not self.sharded:
            return self.raw_model
        run = self.run
        return consolidated_model(
            self.raw_model,
            lambda: run.objective.build_model(run.family, run.model_args, run.data_args, run.tokenizer),
        )

    def _accumulate(self, micro: int):
        """The context of micro-step `micro`: DDP syncs the gradients on the last one only
        (`accelerator.accumulate`); FSDP reduce-scatters them on the last one only."""
        if not self.sharded:
            return self.run.accelerator.accumulate(self.model)
        self.raw_model.set_requires_gradient_sync(micro == self.run.batch_plan.accum - 1)
        return contextlib.nullcontext()

    def train(self) -> dict:
        """Train to `max_steps` (or the time budget), then evaluate and write the final outputs."""
        run, args = self.run, self.run.train_args
        self._log_start()
        self.model.train()
        self.loop_start = time.perf_counter()
        self.bar = tqdm(
            total=args.max_steps,
            initial=self.start_step,
            desc="training",
            unit="step",
            disable=not run.accelerator.is_local_main_process,
        )
        with logging_redirect_tqdm(), self.bar:
            # a signal now stops the run at the next step boundary, with a checkpoint
            self.signals.graceful = True
            try:
                while self.position.step < args.max_steps:
                    if self._signal_received() is not None:
                        break
                    if args.max_train_seconds is not None and budget_spent(
                        self.loop_start, args.max_train_seconds, run.accelerator
                    ):
                        logger.info(
                            "Training-time budget of %.0f s reached at step %d.",
                            args.max_train_seconds,
                            self.position.step,
                        )
                        break
                    self.update()
            finally:
                self.signals.graceful = False  # from here a signal stops the run at once
            signum = self._signal_received(agree=True)
            if signum is not None:
                self.stop_for_signal(signum)
        return self.finish()

    def _signal_flags(self) -> list[float]:
        """This process's signals, as a reduction carries them: (SIGINT received, SIGTERM received)."""
        received = self.signals.received
        return [float(received == signal.SIGINT), float(received == signal.SIGTERM)]

    @staticmethod
    def _agreed(flags: list[float]) -> int | None:
        """The signal of reduced `_signal_flags` (SIGTERM first: a scheduler's stop), or None."""
        return signal.SIGTERM if flags[1] > 0 else signal.SIGINT if flags[0] > 0 else None

    def _signal_received(self, agree: bool = False) -> int | None:
        """The signal that stops the run (None: none), the same on every process: one process's own
        with one process; else the one the last update's loss reduction carried, or, with `agree`,
        one reduction of every process's signals now."""
        run = self.run
        if run.world == 1:
            return self.signals.received
        if not agree:
            return self.agreed_signal
        flags = torch.tensor(self._signal_flags(), device=run.accelerator.device)
        return self._agreed(run.accelerator.reduce(flags, reduction="sum").tolist())

    def stop_for_signal(self, signum: int) -> None:
        """Stop at this step boundary after a signal, every process together: save a checkpoint of
        this step (unless one was just saved, or the weights are not finite), end the trackers, say
        how to resume, and raise `RunInterrupted`."""
        run, step = self.run, self.position.step
        if self.saved_step != step:
            largest = max_abs_weight(self.raw_model)
            if math.isfinite(largest):
                self.save(largest)
        for tracker in run.accelerator.trackers:
            tracker.finish()
        name = signal.Signals(signum).name
        if self.saved_step == step:
            message = (
                f"Stopped by {name} after step {step} of {run.train_args.max_steps}; its checkpoint is "
                f"{self.last_good}. Run the same command with --resume (or --resume auto) to continue exactly "
                "from it."
            )
        else:
            message = (
                f"Stopped by {name} at step {step}: the weights are not finite, so not saved. Last good "
                f"checkpoint: {self._last_good()}."
            )
        logger.warning(message)
        raise RunInterrupted(message, signum, checkpoint=self.last_good, at_boundary=True)

    def _log_start(self) -> None:
        run, plan = self.run, self.run.batch_plan
        logger.info(
            "%s training blocks, %d eval blocks; global batch %d = %d per device x %d processes x %d accumulation; "
            "%s updates per epoch.",
            "streamed" if plan.streaming else f"{len(run.train_blocks['input_ids']):,}",
            len(run.eval_blocks["input_ids"]),
            plan.global_batch,
            plan.per_device,
            plan.world,
            plan.accum,
            "unknown (streamed)" if self.updates_per_epoch is None else self.updates_per_epoch,
        )

    def forward_backward(self) -> float:
        """The micro-batches of one update, forward and backward: their loss, averaged over processes."""
        run, accelerator, plan = self.run, self.run.accelerator, self.run.batch_plan
        micro_losses = []
        for micro in range(plan.accum):
            batch = next(self.data)
            with self._accumulate(micro):
                # the objective makes the inputs and labels of blocks (its noise; a labelled batch, of
                # random windows, as it is) and runs the model on them
                outputs = run.objective.forward(
                    forward_loss, self.forward_model, batch, self.position, micro, labelled=plan.labelled
                )
                loss = outputs.loss  # token mean of this micro-batch
                accelerator.backward(loss)  # divided by gradient_accumulation_steps
            micro_losses.append(loss.detach().float())
        # every process sees the same mean, so a divergence stops all of them together
        mean = torch.stack(micro_losses).mean()
        if accelerator.num_processes == 1:
            return accelerator.reduce(mean, reduction="mean").item()
        # the signals each process received ride along (no collective of their own): every process
        # learns of them at the same update, and they all stop at the same step boundary
        flags = torch.tensor(self._signal_flags(), device=mean.device, dtype=mean.dtype)
        reduced = accelerator.reduce(torch.cat([mean.view(1), flags]), reduction="mean").tolist()
        self.agreed_signal = self._agreed(reduced[1:])
        return reduced[0]

    def update(self) -> None:
        """One optimizer update, then its log row, evaluation and checkpoint."""
        args, accelerator, pos = self.run.train_args, self.run.accelerator, self.position
        loss = self.forward_backward()
        finite = math.isfinite(loss)
        problem = self.guard.problem(loss)  # a non-finite loss, or a spike (spike_threshold)
        if problem is not None and self.guard.rollback:
            return self.roll_back(problem, pos.step + 1, position_counted=False)  # the update is not applied
        if not finite and args.stop_on_nan:
            raise TrainingDivergedError(
                f"Non-finite training loss ({loss}) at step {pos.step + 1}; stopped before applying the update. "
                f"Last good checkpoint: {self._last_good()}. Lower the learning "
                "rate, raise warmup_steps or clip gradients, then resume from it (or use "
                "--rollback_on_divergence)."
            )
        grad_norm = None
        if finite:
            if args.max_grad_norm > 0:
                if self.sharded:  # the norm over every process's shards
                    grad_norm = clip_grad_norm(self.model.parameters(), args.max_grad_norm)
                else:
                    grad_norm = accelerator.clip_grad_norm_(
                        self.model.parameters(), args.max_grad_norm
                    ).item()
            self.optimizer.step()  # with fp16, the prepared optimizer unscales and skips inf/NaN gradients
        else:
            logger.warning("Non-finite loss at step %d: update skipped (stop_on_nan=false).", pos.step + 1)
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._advance()
        saving = pos.step % args.save_every == 0 or pos.step == args.max_steps
        largest = None
        if saving or pos.step % args.eval_every == 0:
            largest = self._check_weights()
            if largest is None:
                return None  # rolled back
        self._report(loss if finite else None, grad_norm)
        if saving:
            self.save(largest)
        return None

    def _advance(self) -> None:
        """Count the update: the step, the data position and the progress bar."""
        args, pos = self.run.train_args, self.position
        pos.step += 1
        if self.stream is not None:
            pos.epoch, pos.update = self.stream.position  # the stream finds an epoch's end when it reads it
        else:
            pos.update += 1
            if pos.update == self.updates_per_epoch:
                pos.epoch, pos.update = pos.epoch + 1, 0
        if args.max_train_seconds is not None:
            elapsed = time.perf_counter() - self.loop_start
            self.bar.total = projected_steps(
                self.start_step, pos.step, args.max_steps, elapsed, args.max_train_seconds
            )
        self.bar.update(1)

    def _last_good(self) -> str | Path:
        return self.last_good if self.last_good is not None else "none"

    def _check_weights(self) -> float | None:
        """The largest weight, checked finite before an evaluation or a save: one fused reduction and
        one host sync, on every process (they hold the same weights, so they agree). None: rolled back."""
        step = self.position.step
        largest = max_abs_weight(self.raw_model)
        if math.isfinite(largest):
            return largest
        problem = f"Non-finite weights (max |w| = {largest}) after the update of step {step}"
        if self.guard.rollback:
            self.roll_back(problem, step, position_counted=True)
            return None
        raise TrainingDivergedError(
            f"{problem}: not checkpointed. Last good checkpoint: {self._last_good()}. Lower the learning rate, "
            "raise warmup_steps or clip gradients, then resume from it (or use --rollback_on_divergence)."
        )

    def _report(self, loss: float | None, grad_norm: float | None) -> None:
        """The step's row of metrics.csv and the trackers: the mean loss every `log_every` steps, the
        evaluation every `eval_every`."""
        run, args, step, pos = self.run, self.run.train_args, self.position.step, self.position
        # fractional epochs where an epoch's length is known; completed epochs when streaming
        per_epoch = self.updates_per_epoch
        row = {
            "step": step,
            "epoch": round(pos.epoch + pos.update / per_epoch, 4) if per_epoch else pos.epoch,
        }
        if loss is not None:
            self.last_loss = loss
            self.recent.append(loss)
            self.guard.record(loss)
        if step % args.log_every == 0 or step == args.max_steps:
            mean = sum(self.recent) / len(self.recent) if self.recent else float("nan")
            self.recent = []
            row.update(
                loss=mean,
                learning_rate=self.scheduler.get_last_lr()[0],
                grad_norm=grad_norm,
                tokens=step * run.tokens_per_update,
                seconds=run.elapsed(),
            )
            run_log.log_step(self.bar, row, step, args.max_steps)
        if step % args.eval_every == 0 or step == args.max_steps:
            self.evaluation, self.evaluated_at = self.evaluate(), step
            if self.best is not None:
                self.best.update(step, self.evaluation, self.full_model)
            row.update(self.evaluation)
            run_log.log_evaluation(step, self.evaluation)
        if len(row) > 2:
            if run.accelerator.is_main_process:
                self.csv_log.write(row)
            if run.trackers:
                run.accelerator.log(
                    {k: v for k, v in row.items() if v is not None and k != "step"}, step=step
                )

    def save(self, largest: float) -> None:
        """A checkpoint of the update just done (written by the main process; under FSDP each
        process writes its shards)."""
        run, accelerator, pos = self.run, self.run.accelerator, self.position
        self.largest = largest
        # each process has its own random streams (and carried states): the main process saves them all
        state = self.checkpoint_state(gather=True)
        if self.sharded:  # every process writes its shards, the main process the rest
            write = save_sharded_checkpoint
        else:
            write = save_checkpoint if accelerator.is_main_process else None
        if write is not None:
            write(
                run.checkpoint_dir,
                state,
                step=pos.step,
                keep_last=run.train_args.keep_last,
                run_id=self.run_id,
                check_finite=False,  # just checked, on every process
            )
            if self.best is not None:
                self.best.prune()  # keep_last may have dropped the last need of an old best
        self.last_good, self.saved_step = run.checkpoint_dir / checkpoint_name(pos.step), pos.step
        accelerator.wait_for_everyone()

    def roll_back(self, problem: str, offending_step: int, position_counted: bool) -> None:
        """Back to the last good checkpoint, the data past the offending batch (`rollback_to_last_good`).

        `position_counted`: whether the loop has already moved epoch/update past the offending batch."""
        run, pos = self.run, self.position
        back = rollback_to_last_good(
            self.guard,
            problem,
            offending_step,
            checkpoint_dir=run.checkpoint_dir,
            run_id=self.run_id,
            state=self.checkpoint_state(),  # the last loss, the best and the loss window come back too
            data=self.data,
            accum=run.batch_plan.accum,
        )
        consumed = self.guard.skip + (0 if position_counted else 1)  # global batches read past the position
        if self.stream is not None:
            pos.epoch, pos.update = self.stream.position
        else:
            per_epoch = self.updates_per_epoch
            pos.epoch, pos.update = divmod(pos.epoch * per_epoch + pos.update + consumed, per_epoch)
        pos.step, pos.offset, self.last_good = back["step"], pos.offset + back["skipped"], back["path"]
        self.saved_step = pos.step
        self.recent, self.evaluation, self.evaluated_at = [], None, None
        run.objective.reset_state()  # the skipped blocks break every lane's continuity: each starts afresh
        if self.best is not None:
            self.best.prune()  # drops the best folders of the abandoned steps
        self.csv_log.truncate(pos.step)
        self.bar.n = pos.step
        self.bar.refresh()

    def finish(self) -> dict:
        """The last evaluation (if the loop did not just evaluate), `final_metrics.json` and `final/`."""
        run, step = self.run, self.position.step
        stopped_by_budget = self.evaluated_at != step and step > self.start_step
        largest = max_abs_weight(self.raw_model)
        if not math.isfinite(largest):  # a run stopped by its budget between two checks
            raise TrainingDivergedError(
                f"Non-finite weights (max |w| = {largest}) at step {step}: final/ not written. Last good "
                f"checkpoint: {self._last_good()}."
            )
        if self.evaluation is None or stopped_by_budget:
            # a resumed run that had already finished, or a run stopped by its time budget after its
            # last evaluation
            self.evaluation = self.evaluate()
            if self.best is not None:
                self.best.update(step, self.evaluation, self.full_model)
            if stopped_by_budget and run.accelerator.is_main_process:
                self.csv_log.write({"step": step, "epoch": None, **self.evaluation, "seconds": run.elapsed()})
        metrics = final_metrics(
            run, step, self.last_loss, self.evaluation, self.best, self.guard, self.history
        )
        if self.sharded or run.world > 1:  # what each process holds: a run (and a test) sees sharding is on
            shares = gather_object([memory_shares(self.raw_model, self.optimizer)])
            metrics["sharding"] = {
                "engine": describe(run.sharding) if self.sharded else "DDP",
                "parameters_per_process": [s["parameters"] for s in shares],
                "optimizer_state_per_process": [s["optimizer_state"] for s in shares],
                "model_parameters": shares[0]["model_parameters"],
            }
        fused = bool(optimizer_kwargs(p.device for p in self.raw_model.parameters()))
        return finish_run(
            run, self.full_model(), self.csv_log, metrics, self.evaluation, self.best, self.history, fused
        )


def train(data_args: DataArguments, model_args: ModelArguments, train_args: TrainArguments) -> dict:
    """Train a model; returns the final metrics (also written to `final_metrics.json`).

    The run owns `output_dir` while it runs (`training.run.folder`): the main process (as accelerate
    tells it, `training.run.processes.process_state`) holds its lock, and a run that does not resume
    refuses a folder holding another run's outputs unless `overwrite_output_dir`. A resumed run in a
    folder without a checkpoint starts afresh (`training.run.folder.nothing_to_resume`).

    SIGINT and SIGTERM are handled while it runs (the previous handlers are put back after it): in
    the training steps the first one stops every process at the next step boundary, after a
    checkpoint; elsewhere, or at a second signal, the run stops at once (`StopSignals`).

    Raises:
        TrainingDivergedError: a non-finite training loss with `stop_on_nan`.
        RunInterrupted: SIGINT or SIGTERM (a `KeyboardInterrupt`; `exit_code` 130 or 143).
        FileNotFoundError: `resume="true"` and nothing of a run in `output_dir`.
        RunFolderBusyError: another live run holds `output_dir`.
        ValueError: fp16 without a CUDA GPU; a family that does not train the objective; a folder
            with another run's outputs; a checkpoint that cannot be resumed exactly (another model
            config, global batch size, seed, data mode, data or objective settings, or `max_steps`
            below its step); launch variables (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`) no launcher set.
    """
    check_arguments(data_args, model_args, train_args)
    output_dir = Path(train_args.output_dir)
    main_process = process_state().is_main_process
    with StopSignals() as signals:
        if not main_process:  # the other processes follow the main one
            if train_args.resume != "false" and not list_checkpoints(output_dir / "checkpoints"):
                train_args = _afresh(train_args)  # as the main process decides (it holds the lock)
            return _train(data_args, model_args, train_args, signals)
        with RunLock(output_dir):
            # before the folder is judged: a checkpoints/ holding only a killed save is no run's work
            remove_staging_leftovers(output_dir)
            if nothing_to_resume(output_dir, train_args.resume, train_args.overwrite_output_dir):
                train_args = _afresh(train_args)
            # --resume true/auto continues the folder's own run: only a run that does not resume
            # must not mix with one
            claim_output_dir(output_dir, train_args.resume != "false", train_args.overwrite_output_dir)
            return _train(data_args, model_args, train_args, signals)


def _afresh(train_args: TrainArguments) -> TrainArguments:
    """The arguments of a run told to resume where there is nothing to resume: a new run (its
    tokenizer trained, not read from the folder)."""
    train_args = copy.copy(train_args)
    train_args.resume = "false"
    return train_args


def _train(
    data_args: DataArguments,
    model_args: ModelArguments,
    train_args: TrainArguments,
    signals: StopSignals | None = None,
) -> dict:
    """The run of `train`, in a folder it owns: an n-gram model is fitted by counting (no optimizer,
    steps or checkpoints), every other model by the gradient loop."""
    with tf32_restored():  # the run may turn TF32 on (`--tf32`): not for the caller's later work
        run = start_run(data_args, model_args, train_args)
        if run.fits_by_counting:
            model, csv_log, metrics, evaluation = fit_ngram_run(run)
            return finish_run(run, model, csv_log, metrics, evaluation, None, [], fused=False)
        return TrainingLoop(run, signals).train()


def main(argv: list[str] | None = None) -> dict:
    """Command-line entry point: parse the arguments (flags or one .json/.yaml file), train, and end
    the process group of a distributed launch (`training.run.processes`). A run stopped by SIGINT or
    SIGTERM exits with 130 or 143, having said how to resume."""
    data_args, model_args, train_args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    if not process_state().is_main_process:
        logging.getLogger().setLevel(logging.WARNING)
    try:
        metrics = train(data_args, model_args, train_args)
    except RunInterrupted as stop:
        if stop.at_boundary:
            end_process_group()  # every process stopped at the same step: none waits in a collective
        else:
            logger.warning("%s", stop)  # (a stop at a boundary said so itself)
        raise SystemExit(stop.exit_code) from None
    end_process_group()
    return metrics


if __name__ == "__main__":
    main(sys.argv[1:])
