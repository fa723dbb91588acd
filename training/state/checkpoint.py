"""Atomic, verified, resumable training checkpoints of a run's state (`CheckpointState`).

`save_checkpoint` writes the parts of a `CheckpointState` (weights, optimizer, scheduler, loss
scaler, the RNG streams of every process, the data position, the extras) to
`root/checkpoint-{step:08d}/` (the layout: `training.state.folders`); `load_checkpoint` gives
each part its state back, and `load_latest_checkpoint` resumes the newest intact checkpoint of a run.

A sharded run (`--fsdp`, `training.sharding`) writes, instead of `model.safetensors` and
`optimizer.pt`, `shards/`: the model's and the optimizer's states as `torch.distributed.checkpoint`
writes them, one `__R_0.distcp` file per process and a `.metadata` index (`save_sharded_checkpoint`).
They load on any number of processes (the index maps every shard to its place in the whole tensor),
and into an unsharded model too (`load_checkpoint`).

Every file but `model.safetensors` and `COMPLETE` is optional, so checkpoints written before
`config.json`, `scaler.pt`, `rng-N.pt`, `manifest.json` or run ids existed still load: without
`config.json` the model config is not checked, a process without its own RNG file keeps its
current streams, and a checkpoint without a manifest is loaded unverified.

Atomicity: everything is written into a hidden sibling `root/.tmp-hflm-checkpoint-...`
(`training.state.atomic`), each file is fsynced, `COMPLETE` is written last, and only then is the
folder renamed to its final name (`os.replace`, atomic on POSIX within one file system). A process
killed at any moment leaves either no `checkpoint-N` folder or a complete one; `latest_checkpoint`
also ignores any folder without `COMPLETE`. In distributed training call `save_checkpoint` on the
main process only (`save_sharded_checkpoint` on every process).

Integrity: every file's size and sha256 go to `manifest.json` before `COMPLETE` is written;
`verify_checkpoint` recomputes them, and `load_latest_checkpoint` walks back from the newest
checkpoint to the first intact one, warning with the damaged file's name, or raises
`CorruptCheckpointError` listing what is wrong with each. A file that cannot be read is reported
by name too (also for checkpoints older than manifests).

Finite weights only: `save_checkpoint` refuses a model with a NaN or infinite weight
(`NonFiniteWeightsError`, before anything is written), so the newest checkpoint is always one
that training can continue from. The check is one fused reduction (`max_abs_weight`) and one host
sync per save.

Every `.pt` file holds only tensors and Python primitives, so it loads with
`torch.load(..., weights_only=True)` (no arbitrary unpickling).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import logging
import math
import os
import pickle
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, load_model, save_file, save_model

from .atomic import (
    fsync_dir,
    fsync_file,
    sha256_file,
    staging_path,
    swap_in,
    write_text_synced,
)
from .folders import (
    COMPLETE_MARKER,
    CONFIG_FILE,
    MANIFEST_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
    SCALER_FILE,
    SCHEDULER_FILE,
    SHARDS_DIR,
    STATE_FILE,
    TENSORS_FILE,
    CorruptCheckpointError,
    checkpoint_name,
    latest_run_id,
    list_checkpoints_with_run_ids,
    manifest_text,
    prune_checkpoints,
    rng_file,
    verify_checkpoint,
)
from .stateful import CheckpointState

logger = logging.getLogger(__name__)


class NonFiniteWeightsError(ValueError):
    """The model holds a NaN or infinite weight: it is not saved as a checkpoint."""


_CONFIG_BOOKKEEPING = frozenset(
    {
        "transformers_version",
        "_name_or_path",
        "_commit_hash",
        "architectures",
        "auto_map",
        "dtype",
        "torch_dtype",
        "attn_implementation",
        "_attn_implementation",
        "_attn_implementation_autoset",
        "use_cache",
        "return_dict",
        "output_attentions",
        "output_hidden_states",
    }
)


def _config_dict(model) -> dict | None:
    """The model's transformers config as JSON-normalized data (int dict keys become strings), or None."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_json_string"):
        return None
    return json.loads(config.to_json_string(use_diff=False))


def _with_current_defaults(saved: dict, config) -> dict:
    """The saved config as this version of its class reads it: fields added since the checkpoint
    was written take their defaults (derived as a fresh config derives them), so they are not
    reported as differences; a saved config the class refuses is compared as it is."""
    try:
        upgraded = type(config).from_dict(saved)
    except (TypeError, ValueError):
        return saved
    return json.loads(upgraded.to_json_string(use_diff=False))


def config_differences(saved: dict, current: dict) -> dict[str, tuple[Any, Any]]:
    """The config fields that differ, as `{field: (saved value, current value)}`, bookkeeping ignored.

    A field present on one side only is reported with `None` on the other.
    """
    keys = (saved.keys() | current.keys()) - _CONFIG_BOOKKEEPING
    return {k: (saved.get(k), current.get(k)) for k in sorted(keys) if saved.get(k) != current.get(k)}


def max_abs_weight(model: torch.nn.Module) -> float:
    """The largest |weight| of `model` (NaN if any weight is NaN, inf if any is infinite).

    One fused reduction (`torch.nn.utils.get_total_norm` with the max norm: foreach kernels per
    device and dtype) and one host sync, whatever the number of parameters; cheap next to a save.
    Under FSDP each process reduces its shards and the processes gather their maxima (every process
    must call), so all of them get the same answer.
    """
    from torch.distributed.tensor import DTensor

    params = [p.detach() for p in model.parameters()]
    if not params:
        return 0.0
    sharded = isinstance(params[0], DTensor)
    if not sharded:
        return float(torch.nn.utils.get_total_norm(params, norm_type=math.inf))
    # a small parameter may leave a process an empty shard, whose max norm is undefined
    shards = [s for s in (p.to_local() for p in params) if s.numel()]
    local = torch.nn.utils.get_total_norm(shards, norm_type=math.inf) if shards else params[0].new_zeros(())
    local = local.to_local() if isinstance(local, DTensor) else local
    # gathered, not all-reduced with MAX: a reduction's max need not propagate a NaN
    group = params[0].device_mesh.get_group()
    everyone = [torch.empty_like(local) for _ in range(torch.distributed.get_world_size(group))]
    torch.distributed.all_gather(everyone, local, group=group)
    return float(torch.stack(everyone).max())


def save_checkpoint(
    directory: str | os.PathLike,
    state: CheckpointState,
    *,
    step: int,
    keep_last: int | None = None,
    run_id: str | None = None,
    check_finite: bool = True,
    staged: Path | None = None,
) -> Path:
    """Atomically write the checkpoint of `step`, every part of `state`, to `directory/checkpoint-{step:08d}`.

    Args:
        directory: the root folder holding all checkpoints (created if missing).
        state: the parts to save (`CheckpointState`): the model (`model.safetensors`, shared
            tensors once), and those not None of the optimizer, scheduler, fp16 loss scaler, the RNG
            streams (of every process, one file each: a multi-process run gathers them,
            `RngStates.gathered`), named tensors, the data position and the extras (JSON).
        step: the global step (optimizer updates done), >= 0.
        keep_last: if given, afterwards delete all but the `keep_last` newest (by step) complete
            checkpoints of this run (`run_id`): another run's checkpoints in `directory` are never
            touched. This run's checkpoints with a step above `step` are deleted too: they are a
            future the run abandoned (damaged checkpoints it resumed past, or a rollback).
        run_id: the id of the run writing it (`new_run_id()`; a resumed run keeps its own), stored
            in `state.json` and the manifest. None: a run without an id (pruned only with others
            without one).
        check_finite: refuse a model with a non-finite weight (one fused reduction and one host
            sync). Pass False only when the caller has just checked (the training loop checks on
            every process, so that all of them agree).
        staged: the staging folder in which every process of a sharded run has written its shards
            of the model and optimizer (`save_sharded_checkpoint`): the rest is written into it and
            it is committed; `state.model` then only gives the config.

    Returns:
        The final checkpoint folder.

    Raises:
        ValueError: for a negative `step` or `keep_last < 1`.
        NonFiniteWeightsError: a weight is NaN or infinite (nothing is written).
        TypeError: if the data position or the extras are not JSON-serializable (nothing is left behind).
        OSError, SafetensorError: the disk is full or a write fails; the partial folder is removed
            and every earlier checkpoint kept (a note on the error says so).
    """
    _check_save(state.model, step, keep_last, check_finite)
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_name(step)
    rng_states = state.rng.state_dict() if state.rng is not None else {}
    saved_at = time.time()
    # serialize the JSON first: a TypeError should not cost a half-written temp folder
    record = {
        "step": step,
        "data_state": state.data_state(),
        "extra": state.extra_state(),
        "num_rng_states": len(rng_states),
        "run_id": run_id,
        "saved_at": saved_at,
    }
    state_json = json.dumps(record, indent=2)
    tmp = staged if staged is not None else staging_path(final)
    if staged is None:
        tmp.mkdir()
    try:
        _write_checkpoint_files(tmp, state, rng_states, state_json, record, weights=staged is None)
        swap_in(tmp, final)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(err, Exception):  # a full disk: OSError, or SafetensorError from its writer
            err.add_note(
                f"Could not write the checkpoint of step {step} to {final} (a full disk?): nothing of it is "
                "left behind, and the earlier checkpoints are kept."
            )
        raise
    logger.info("saved checkpoint %s", final)

    if keep_last is not None:
        prune_checkpoints(root, keep_last, run_id=run_id, current_step=step)
    return final


def save_sharded_checkpoint(
    directory: str | os.PathLike, state: CheckpointState, *, step: int, **save_kwargs
) -> Path:
    """`save_checkpoint` for a sharded model (FSDP2): every process must call it.

    Each process writes its shards of the model and optimizer states into one staging folder (its
    name chosen by process 0), with `torch.distributed.checkpoint`; process 0 then writes the rest
    (scheduler, RNG states of every process, state), checksums every file, shards included, in the
    manifest, writes `COMPLETE` and renames the folder into place. A kill at any moment leaves the
    previous checkpoints and a staging folder the next run removes.

    Args:
        state: as for `save_checkpoint`, on every process (its model and optimizer sharded); the
            parts other than those two are read on process 0 only.
        save_kwargs: `save_checkpoint`'s other arguments (`keep_last`, `run_id`), read on process 0.
    """
    import torch.distributed as dist
    from torch.distributed.checkpoint import FileSystemWriter, save
    from torch.distributed.checkpoint.state_dict import get_state_dict

    root = Path(directory)
    main = dist.get_rank() == 0
    staged = [None]
    if main:
        root.mkdir(parents=True, exist_ok=True)
        staged = [staging_path(root / checkpoint_name(step))]
        staged[0].mkdir()
    dist.broadcast_object_list(staged, src=0)
    tmp = Path(staged[0])
    try:
        model_state, optimizer_state = get_state_dict(state.model, state.optimizer)
        writer = FileSystemWriter(tmp / SHARDS_DIR, sync_files=True)
        save({"model": model_state, "optimizer": optimizer_state}, storage_writer=writer)
        dist.barrier()  # every shard and the index are written
        final = None
        if main:  # the weights were checked on every process: a check on one would wait for the others
            save_kwargs = {**save_kwargs, "check_finite": False}
            rest = dataclasses.replace(state, optimizer=None)  # in the shards
            final = save_checkpoint(root, rest, step=step, staged=tmp, **save_kwargs)
    except BaseException:
        if main:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    dist.barrier()  # committed (and pruned) before any process goes on
    return root / checkpoint_name(step) if final is None else final


def _load_shards(path: Path, model: torch.nn.Module, optimizer) -> None:
    """The model's (and optimizer's) states from a sharded checkpoint's `shards/`, resharded to this
    run's processes, or into an unsharded model (each process reads what its tensors need)."""
    from torch.distributed.checkpoint import CheckpointException, FileSystemReader, load
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    if optimizer is None:
        state = {"model": get_model_state_dict(model)}
    else:
        model_state, optimizer_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optimizer": optimizer_state}
    _read_part(
        path,
        SHARDS_DIR,
        lambda folder: load(state, storage_reader=FileSystemReader(folder)),
        errors=_READ_ERRORS + (CheckpointException,),
    )
    if optimizer is None:
        set_model_state_dict(model, state["model"])
    else:
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def _check_save(model: torch.nn.Module, step: int, keep_last: int | None, check_finite: bool) -> None:
    """Refuse a save before anything is written (`save_checkpoint`'s ValueError and NonFiniteWeightsError)."""
    if step < 0:
        raise ValueError(f"`step` must be >= 0, got {step}.")
    if keep_last is not None and keep_last < 1:
        raise ValueError(f"`keep_last` must be >= 1 or None, got {keep_last}.")
    if check_finite:
        largest = max_abs_weight(model)
        if not math.isfinite(largest):
            raise NonFiniteWeightsError(
                f"Not saving the checkpoint of step {step}: the model holds a non-finite weight "
                f"(max |w| = {largest}); training diverged."
            )


def _write_checkpoint_files(
    tmp: Path, state: CheckpointState, rng_states: dict, state_json: str, record: dict, weights: bool = True
) -> None:
    """Every file of a checkpoint into the temporary folder `tmp`, synced; `COMPLETE` last.

    `rng_states`: `{rank: state}` of every process; `record`: what `state_json` holds (its step,
    run id and save time go to the manifest too). `weights`: write `model.safetensors` (False: the
    shards are in `tmp` already).
    """
    config = _config_dict(state.model)
    # the weights are hashed (hashlib releases the GIL) while the optimizer state is written
    hasher = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="checkpoint-sha256")
    try:
        hashing = {}
        if weights:
            save_model(state.model, str(tmp / MODEL_FILE))
            fsync_file(tmp / MODEL_FILE)
            hashing = {MODEL_FILE: hasher.submit(sha256_file, tmp / MODEL_FILE)}
        if config is not None:
            write_text_synced(tmp / CONFIG_FILE, json.dumps(config, indent=2, sort_keys=True))
        for part, file in (
            (state.optimizer, OPTIMIZER_FILE),
            (state.scheduler, SCHEDULER_FILE),
            (state.scaler, SCALER_FILE),
        ):
            if part is not None:
                _torch_save(part.state_dict(), tmp / file)
        for rank, rng_state in rng_states.items():
            _torch_save(rng_state, tmp / rng_file(rank))
        tensors = state.tensors.state_dict() if state.tensors is not None else None
        if tensors:
            save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tmp / TENSORS_FILE))
            fsync_file(tmp / TENSORS_FILE)
        write_text_synced(tmp / STATE_FILE, state_json)
        # the checksums of every file, before COMPLETE: a complete folder always has its manifest
        step = record["step"]
        manifest = manifest_text(tmp, record["run_id"], step, record["saved_at"], hashing)
        write_text_synced(tmp / MANIFEST_FILE, manifest)
        # last: marks every other file complete, and checksums the manifest itself
        write_text_synced(
            tmp / COMPLETE_MARKER, f"{step}\n{MANIFEST_FILE} sha256 {sha256_file(tmp / MANIFEST_FILE)}\n"
        )
        fsync_dir(tmp)
    except BaseException:
        hasher.shutdown(cancel_futures=True)
        raise
    hasher.shutdown()


def load_checkpoint(
    directory: str | os.PathLike, state: CheckpointState, *, strict: bool = True, verify: bool = True
) -> dict:
    """Give every part of `state` its state back from a checkpoint written by `save_checkpoint`.

    The files are first checked against the manifest (`verify_checkpoint`), so a damaged
    checkpoint fails before anything is loaded, naming the file. The model's config is then
    compared with the checkpoint's `config.json`, so a model built with other settings fails with
    the list of differing fields rather than inside `load_state_dict` with tensor shapes.

    Args:
        directory: a `checkpoint-N` folder (see `latest_checkpoint`).
        state: the parts to restore, those not None: the model (on any device; tensors are moved
            to it), an optimizer built over its parameters in the same order, a scheduler built
            over that optimizer, an fp16 `GradScaler` (restored when the checkpoint has `scaler.pt`,
            else a warning: the loss scale restarts from its initial value), the RNG streams of
            process `state.rng.rank` (random draws continue as after the save), the named
            tensors, and the JSON parts (data position, extras), given back last.
        strict: require the weights to match the model's keys exactly.
        verify: check every file against the manifest first (one read of each file). False when
            the caller has just verified the folder (`load_latest_checkpoint`).

    Returns:
        What the checkpoint records: a dict with `step`, `data_state`, `extra`, `run_id`,
        `tensors` (the named tensors, on the CPU; empty if none) and `path`.

    Raises:
        FileNotFoundError: if the folder is not a complete checkpoint, or a requested part
            (optimizer/scheduler state) is missing.
        CorruptCheckpointError: a file differs from the manifest or cannot be read (named in
            the message). Some parts may then hold part of the checkpoint: load another one.
        ValueError: the model's config differs from the one saved with the checkpoint (the message
            lists each field as saved → current).
    """
    path = Path(directory)
    if not (path / COMPLETE_MARKER).is_file():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no {COMPLETE_MARKER} marker).")
    problems = verify_checkpoint(path) if verify else []
    if problems:
        raise CorruptCheckpointError(
            f"Checkpoint {path} is damaged: {'; '.join(problems)}.", {path: problems}
        )
    record = _read_part(path, STATE_FILE, lambda f: json.loads(f.read_text(encoding="utf-8")))
    _check_config(path, state.model)
    if (path / SHARDS_DIR).is_dir():
        _load_shards(path, state.model, state.optimizer)
    else:
        _load_whole(path, state.model, state.optimizer, strict)
    _load_torch_parts(path, state)
    logger.info("loaded checkpoint %s (step %d)", path, record["step"])
    tensors = (
        _read_part(path, TENSORS_FILE, lambda f: load_file(str(f))) if (path / TENSORS_FILE).is_file() else {}
    )
    if state.tensors is not None:
        state.tensors.load_state_dict(tensors)
    state.load_json(record["data_state"], record["extra"])
    return {
        "step": record["step"],
        "data_state": record["data_state"],
        "extra": record["extra"],
        "run_id": record.get("run_id"),
        "tensors": tensors,
        "path": path,
    }


def _check_config(path: Path, model: torch.nn.Module) -> None:
    """Refuse a model whose config differs from the checkpoint's `config.json` (if it has one)."""
    current = _config_dict(model)
    if current is None or not (path / CONFIG_FILE).is_file():
        return
    saved = _with_current_defaults(
        _read_part(path, CONFIG_FILE, lambda f: json.loads(f.read_text(encoding="utf-8"))), model.config
    )
    differences = config_differences(saved, current)
    if differences:
        listed = "; ".join(f"{k}: {old!r} → {new!r}" for k, (old, new) in differences.items())
        raise ValueError(
            f"Cannot resume from {path}: the model differs from the checkpoint's ({listed}; "
            "checkpoint → this run). Resume with the model settings the run was started with (the same "
            "ModelArguments, config_overrides and tokenizer), or start a new run: a fresh output_dir, or "
            "resume=false to train from scratch in this one."
        )


def _load_torch_parts(path: Path, state: CheckpointState) -> None:
    """The scheduler, the loss scaler and this process's RNG streams, each from its own file."""
    if state.scheduler is not None:
        if not (path / SCHEDULER_FILE).is_file():
            raise FileNotFoundError(
                f"{path / SCHEDULER_FILE} is missing: this checkpoint was saved without it."
            )
        state.scheduler.load_state_dict(_read_part(path, SCHEDULER_FILE, _torch_load))
    if state.scaler is not None:
        if (path / SCALER_FILE).is_file():
            state.scaler.load_state_dict(_read_part(path, SCALER_FILE, _torch_load))
        else:
            logger.warning("%s has no GradScaler state: the fp16 loss scale starts afresh", path)
    if state.rng is not None:
        rank = state.rng.rank
        if (path / rng_file(rank)).is_file():
            state.rng.load_state_dict({rank: _read_part(path, rng_file(rank), _torch_load)})
        else:
            logger.warning("%s has no RNG state for process %d: random streams not restored", path, rank)


def _load_whole(path: Path, model: torch.nn.Module, optimizer, strict: bool) -> None:
    """The weights (and optimizer state) of an unsharded checkpoint, on every process."""
    from torch.distributed.tensor import DTensor

    param = next(model.parameters(), None)
    if isinstance(param, DTensor):
        raise ValueError(
            f"{path} was saved by an unsharded run (model.safetensors), and this run shards the model (--fsdp): "
            "resume it as it was saved (without --fsdp), or start a sharded run from its weights with "
            "--init_from on a finished model (a run's final/)."
        )
    device = param.device if param is not None else torch.device("cpu")
    missing, unexpected = _read_part(
        path,
        MODEL_FILE,
        lambda f: load_model(model, str(f), strict=strict, device=str(device)),
        errors=(OSError, SafetensorError),
    )
    if missing or unexpected:
        logger.warning("non-strict load: missing %s, unexpected %s", missing, unexpected)
    if optimizer is not None:
        if not (path / OPTIMIZER_FILE).is_file():
            raise FileNotFoundError(
                f"{path / OPTIMIZER_FILE} is missing: this checkpoint was saved without it."
            )
        optimizer.load_state_dict(_read_part(path, OPTIMIZER_FILE, _torch_load))
        _regroup_stacked_qkv_moments(model, optimizer, path / MODEL_FILE)


def _regroup_stacked_qkv_moments(model: torch.nn.Module, optimizer, weights: Path) -> None:
    """A checkpoint from before the head-grouped attention layout holds `qkv_proj` with rows [all q;
    all k; all v]. Loading the weights regroups them (`Attention`'s load hook); the optimizer's
    per-parameter moments (Adam's averages) are row-aligned with the weight, so they are regrouped
    alike here, or the resumed run would update each row with another row's history."""
    with safe_open(str(weights), "pt") as f:
        stacked = [key for key in f.keys() if ".qkv_proj." in key]  # noqa: SIM118 (safe_open has no __iter__)
    if not stacked:
        return
    params = dict(model.named_parameters())
    for key in stacked:
        name = key.replace(".qkv_proj.", ".query_key_value.")
        param = params.get(name)
        state = optimizer.state.get(param) if param is not None else None
        if not state:
            continue
        order = model.get_submodule(name.rsplit(".", 2)[0]).grouped_order()
        for field, value in state.items():
            if torch.is_tensor(value) and value.shape == param.shape:
                state[field] = value[order.to(value.device)]


def _torch_save(obj: Any, path: Path) -> None:
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def _torch_load(path: Path):
    return torch.load(path, map_location="cpu", weights_only=True)


_READ_ERRORS = (OSError, EOFError, ValueError, RuntimeError, pickle.UnpicklingError, SafetensorError)


def _read_part(folder: Path, name: str, read, errors: tuple[type[BaseException], ...] = _READ_ERRORS):
    """`read(folder / name)`, a failure to parse the file (truncated, empty, garbage) raised as a
    `CorruptCheckpointError` naming it. Only the errors of reading are caught (for the weights,
    whose reader also loads them, not the RuntimeError of a state that does not fit the model)."""
    try:
        return read(folder / name)
    except errors as err:
        problem = f"{name}: unreadable ({type(err).__name__}: {err})"
        raise CorruptCheckpointError(
            f"Checkpoint {folder} is damaged: {problem}.", {folder: [problem]}
        ) from err


def load_latest_checkpoint(
    root: str | os.PathLike, state: CheckpointState, *, run_id: str | None = None
) -> dict | None:
    """Load the newest intact checkpoint of a run under `root`, walking back past damaged ones.

    Each candidate, newest step first, is verified against its manifest (`verify_checkpoint`: one
    read of each file) and then loaded (`load_checkpoint(..., verify=False)`, so nothing is hashed
    twice). A damaged one is reported with a warning naming the file and the previous one tried;
    a later load overwrites everything an earlier, failed one may have put in the parts.

    Args:
        root: the folder of the `checkpoint-N` folders.
        run_id: whose checkpoints to consider; None: the run that saved last (`latest_run_id`),
            which is the run a resume continues (another run's checkpoints are never loaded instead).
        state: the parts to restore, as for `load_checkpoint`.

    Returns:
        `load_checkpoint`'s dict plus `"damaged"`: {path: problems} of the newer checkpoints passed
        over; None when the run has no checkpoint.

    Raises:
        CorruptCheckpointError: the run has checkpoints but none is intact; the message lists what
            is wrong with each.
        ValueError: the newest intact checkpoint belongs to another model config (as `load_checkpoint`).
    """
    run = latest_run_id(root) if run_id is None else run_id
    checkpoints = list_checkpoints_with_run_ids(root)
    candidates = [path for _, path, rid in reversed(checkpoints) if rid == run]
    for _, path, rid in checkpoints:
        if rid is None and run is not None:
            logger.warning(
                "Checkpoint %s names no run (written before run ids, or its manifest and state.json are unreadable): not considered.",
                path,
            )
    damaged: dict[Path, list[str]] = {}
    for path in candidates:
        problems = verify_checkpoint(path)
        if not problems:
            try:
                record = load_checkpoint(path, state, verify=False)
            except (
                CorruptCheckpointError
            ) as err:  # unreadable though its sizes and hashes match (or no manifest)
                problems = err.problems[path]
            else:
                return record | {"damaged": damaged}
        damaged[path] = problems
        logger.warning("Checkpoint %s is damaged (%s): trying the previous one.", path, "; ".join(problems))
    if damaged:
        listed = "\n".join(f"  {path.name}: {'; '.join(problems)}" for path, problems in damaged.items())
        raise CorruptCheckpointError(
            f"No intact checkpoint of run {run} under {root}; what is wrong with each:\n{listed}\n"
            "Restore the files from a copy, or start the run afresh (resume=false).",
            damaged,
        )
    return None
