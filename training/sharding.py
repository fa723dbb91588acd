"""Fully sharded data parallelism (FSDP2) in the training loop: which engine a launch asks for, the
sharding of a model, and what the loop does differently on sharded parameters.

    torchrun --nproc_per_node 4 -m training.train --fsdp full_shard ...
    accelerate launch --config_file fsdp2.yaml -m training.train ...    # distributed_type: FSDP, fsdp_version: 2

Every process holds 1/N of each parameter, of its gradient and of the optimizer's state
(`torch.distributed.fsdp.fully_shard`, one unit per Transformer block and one for the rest): a
block's parameters are gathered for its forward and backward and freed after them, and the
gradients are reduce-scattered, so each process updates only its own shard.

**One path on every device.** The plan comes from accelerate's `FullyShardedDataParallelPlugin`
(`fsdp_version=2`: built from `--fsdp`, or read from an accelerate config's environment), but the
sharding is applied here (`shard_model`), not by `accelerator.prepare`: accelerate runs CPU
processes as MULTI_CPU and drops the plugin there, so its own path would silently train unsharded
on the CPU and sharded on GPUs. Here the same `fully_shard` calls run on a gloo mesh of CPU
processes and on an NCCL mesh of GPUs, and the CPU tests check that each process holds about 1/N.

**No silent fallback.** An engine this loop does not run (DeepSpeed, Megatron-LM, FSDP1) is refused
on every device (`requested_plugin`), and `--fsdp` on a family without Transformer blocks (the
recurrent, feed-forward and n-gram models) is refused by name (`check_shardable`).

**What the loop does differently** (`training.train`): gradient accumulation skips the reduce-scatter
of the micro-steps before the last (`set_requires_gradient_sync`); gradient clipping reduces the
norm over the shards (`clip_grad_norm`); the weight check reduces over them (`max_abs_weight` in
`training.state.checkpoint`); an evaluation runs the same number of forwards on every process
(`Lockstep`: each forward gathers parameters collectively); checkpoints are sharded
(`training.state.checkpoint`, `SHARDS_DIR`); `best/` and `final/` hold the consolidated weights
(`consolidated_model`). Mixed precision is FSDP2's own: bf16 parameters in the forward and backward,
fp32 gradient reduction and fp32 master weights (`MixedPrecisionPolicy`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import torch
import torch.distributed as dist
from accelerate.utils import FullyShardedDataParallelPlugin

logger = logging.getLogger(__name__)

# Trainer's `--fsdp` words this loop takes: full_shard (ZeRO-3: parameters freed after each block's
# forward), shard_grad_op (ZeRO-2: kept until the backward), offload (shards and optimizer step on the CPU)
FSDP_OPTIONS = ("full_shard", "shard_grad_op", "offload")
# the module every Transformer family stacks: one FSDP unit each (`HfLmPreTrainedModel._no_split_modules`)
BLOCK_CLASS = "TransformerBlock"

_WAY_OUT = (
    "hf_lm's loop shards with FSDP2: `--fsdp full_shard` (or an accelerate config with `distributed_type: FSDP` "
    "and `fsdp_version: 2`); without sharding, launch with torchrun (DDP)."
)


def _env_true(name: str) -> bool:
    return os.environ.get(name, "false").strip().lower() in ("true", "1", "yes")


def parse_fsdp(value: str) -> tuple[str, ...]:
    """The words of `--fsdp` ("full_shard offload"), checked. Empty: no sharding.

    Raises:
        ValueError: an unknown word (Trainer's `hybrid_shard`, `auto_wrap`... are named with what
            this loop does instead), or both `full_shard` and `shard_grad_op`.
    """
    words = tuple(value.replace(",", " ").split())
    for word in words:
        if word == "auto_wrap":
            raise ValueError(
                "`--fsdp auto_wrap`: this loop always wraps each Transformer block in its own FSDP unit; drop "
                f"`auto_wrap`. --fsdp takes {' | '.join(FSDP_OPTIONS)}."
            )
        if word not in FSDP_OPTIONS:
            raise ValueError(
                f"`--fsdp` got {word!r}; it takes {', '.join(FSDP_OPTIONS)} (Trainer's names; e.g. "
                "`--fsdp full_shard` or `--fsdp 'full_shard offload'`)."
            )
    if "full_shard" in words and "shard_grad_op" in words:
        raise ValueError("`--fsdp` takes one of full_shard and shard_grad_op, not both.")
    if words == ("offload",):
        words = ("full_shard", "offload")
    return words


def requested_plugin(
    fsdp: str, gradient_checkpointing: bool = False
) -> FullyShardedDataParallelPlugin | None:
    """The FSDP2 plugin a run asks for, from `--fsdp` or from an accelerate config (its
    `ACCELERATE_USE_FSDP` environment); None: no sharding.

    Raises:
        ValueError: on every device, for DeepSpeed and Megatron-LM (accelerate configs), FSDP1 (an
            accelerate config without `fsdp_version: 2`), and an unknown `--fsdp` word.
    """
    if _env_true("ACCELERATE_USE_DEEPSPEED"):
        raise ValueError(
            "The launch asks for DeepSpeed (ACCELERATE_USE_DEEPSPEED=true, an accelerate config with "
            f"`distributed_type: DEEPSPEED`): training.train does not run DeepSpeed. {_WAY_OUT}"
        )
    if _env_true("ACCELERATE_USE_MEGATRON_LM"):
        raise ValueError(
            "The launch asks for Megatron-LM (ACCELERATE_USE_MEGATRON_LM=true, an accelerate config with "
            f"`distributed_type: MEGATRON_LM`): training.train does not run Megatron-LM. {_WAY_OUT}"
        )
    words = parse_fsdp(fsdp)
    if words:
        return FullyShardedDataParallelPlugin(
            fsdp_version=2,
            reshard_after_forward="shard_grad_op" not in words,
            cpu_offload="offload" in words,
            activation_checkpointing=gradient_checkpointing,
        )
    if not _env_true("ACCELERATE_USE_FSDP"):
        return None
    version = os.environ.get("FSDP_VERSION", "1").strip()
    if version != "2":
        raise ValueError(
            f"The launch asks for FSDP version {version} (an accelerate config with `distributed_type: FSDP` and "
            "no `fsdp_version: 2`): training.train runs FSDP2 only (per-parameter sharding, sharded checkpoints "
            f"that resume on any number of processes). Set `fsdp_version: 2` in the config. {_WAY_OUT}"
        )
    plugin = FullyShardedDataParallelPlugin()  # the config's FSDP_* environment
    if gradient_checkpointing:
        plugin.activation_checkpointing = True
    return plugin


def describe(plugin: FullyShardedDataParallelPlugin) -> str:
    """The plan in Trainer's words, for the log and the model card: "FSDP2 full_shard offload"."""
    words = ["full_shard" if plugin.reshard_after_forward else "shard_grad_op"]
    if is_offloaded(plugin):
        words.append("offload")
    if plugin.activation_checkpointing:
        words.append("activation checkpointing")
    return "FSDP2 " + " ".join(words)


def is_offloaded(plugin: FullyShardedDataParallelPlugin) -> bool:
    from torch.distributed.fsdp import CPUOffloadPolicy

    return isinstance(plugin.cpu_offload, CPUOffloadPolicy)


def not_shardable(family: str) -> str:
    """The refusal of `--fsdp` for a family without Transformer blocks (by flag or by accelerate config)."""
    return (
        f"`--fsdp` shards a model's Transformer blocks, and family {family!r} has none (the recurrent, "
        "feed-forward and n-gram models are small enough to replicate): drop --fsdp and train it with DDP "
        "(torchrun)."
    )


def check_shardable(model: torch.nn.Module, family: str) -> None:
    """Refuse sharding a model without Transformer blocks: FSDP's units are the blocks."""
    if not any(type(m).__name__ == BLOCK_CLASS for m in model.modules()):
        raise ValueError(not_shardable(family))


def ensure_process_group(device: torch.device) -> None:
    """A process group of one where the launch started none: FSDP2's mesh needs a group even alone
    (one GPU: the same sharded path, mixed precision and checkpoints as N)."""
    if dist.is_initialized():
        return
    backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)


def mixed_precision_policy(mixed_precision: str):
    """FSDP2's precision for accelerate's `mixed_precision`: bf16 parameters in the forward and
    backward, gradients reduced in fp32; the sharded master weights and optimizer stay fp32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if mixed_precision == "bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if mixed_precision == "no":
        return MixedPrecisionPolicy()
    raise ValueError(
        f"`mixed_precision`={mixed_precision!r} with --fsdp: FSDP2 runs bf16 (bf16 parameters, fp32 gradient "
        "reduction) or no mixed precision; fp16 would need a sharded loss scaler. Use mixed_precision='bf16'."
    )


def shard_model(
    model: torch.nn.Module, plugin: FullyShardedDataParallelPlugin, device: torch.device, mixed_precision: str
) -> torch.nn.Module:
    """Shard `model` in place over every process: one FSDP unit per Transformer block, then the root
    (embeddings, final norm, heads: tied weights stay one parameter, in the root's unit).

    Activation checkpointing (the plugin's) recomputes each block in the backward (transformers'
    `gradient_checkpointing_enable`, non-reentrant), applied before sharding as FSDP2 asks.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    ensure_process_group(device)
    if plugin.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    options = {
        "mesh": mesh,
        "mp_policy": mixed_precision_policy(mixed_precision),
        # pinned host memory speeds the copies to a GPU; there is none to pin for on CPU processes
        "offload_policy": CPUOffloadPolicy(pin_memory=device.type == "cuda")
        if is_offloaded(plugin)
        else OffloadPolicy(),
    }
    blocks = [m for m in model.modules() if type(m).__name__ == BLOCK_CLASS]
    for block in blocks:
        fully_shard(block, reshard_after_forward=plugin.reshard_after_forward, **options)
    # the root's parameters are used first and last: kept gathered after the forward (FSDP2's default)
    fully_shard(model, **options)
    logger.info(
        "%s over %d processes: %d blocks and the root sharded.", describe(plugin), mesh.size(), len(blocks)
    )
    return model


def is_sharded(model: torch.nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def _held(t: torch.Tensor) -> int:
    """The elements of `t` this process holds: its shard of a DTensor, else all of them."""
    from torch.distributed.tensor import DTensor

    return t.to_local().numel() if isinstance(t, DTensor) else t.numel()


def local_numel(model: torch.nn.Module) -> int:
    """The parameters this process holds (its shards under FSDP; tied weights once)."""
    return sum(_held(p) for p in model.parameters())


def memory_shares(model: torch.nn.Module, optimizer) -> dict[str, int]:
    """The parameters and optimizer-state elements this process holds, against the model's total:
    about 1/N of both under FSDP, all of them under DDP (`final_metrics.json`'s "sharding")."""
    moments = [
        v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v) and v.dim()
    ]
    return {
        "parameters": local_numel(model),
        "optimizer_state": sum(_held(v) for v in moments),
        "model_parameters": sum(p.numel() for p in model.parameters()),
    }


def clip_grad_norm(parameters, max_norm: float) -> float:
    """Clip the gradients to a total norm of `max_norm`; returns the norm before clipping, the same on
    every process (over the shards of every process under FSDP)."""
    norm = torch.nn.utils.clip_grad_norm_(list(parameters), max_norm)
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """The whole model's state dict on the CPU of process 0 (None elsewhere); every process must call."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)
    return state if dist.get_rank() == 0 else None


def consolidated_model(
    model: torch.nn.Module, build: Callable[[], torch.nn.Module]
) -> torch.nn.Module | None:
    """An unsharded copy of `model` on the CPU of process 0 (None elsewhere), for `best/` and
    `final/`; every process must call.

    `build` makes a fresh model of the same architecture; it runs under a forked RNG, so that the
    copy's initialization takes no random number from the run's streams (a resumed run draws what
    an uninterrupted one did).
    """
    state = full_state_dict(model)
    if state is None:
        return None
    with torch.random.fork_rng(devices=[]):
        copy = build()
    copy.load_state_dict(state)
    return copy.eval() if not model.training else copy


class Lockstep:
    """A sharded model as an evaluation calls it: every process makes as many forwards, since each
    forward gathers parameters with a collective and a process that stopped early would leave the
    others waiting (the evaluations deal their blocks round-robin, so their counts differ).

    An evaluation announces each phase's forwards (`plan_forwards`: one reduction, while every
    process is at the same point), runs its own, then repeats its last forward up to the busiest
    process's count (`catch_up`); the repeats' outputs are discarded.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.calls, self.target, self.last = model, 0, 0, None

    def __call__(self, *args, **kwargs):
        self.calls, self.last = self.calls + 1, (args, kwargs)
        return self.model(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.model, name)

    def plan(self, forwards: int, device: torch.device) -> None:
        most = torch.tensor([self.calls + forwards], device=device)
        dist.all_reduce(most, op=dist.ReduceOp.MAX)
        self.target = int(most.item())

    @torch.no_grad()
    def catch_up(self) -> None:
        if self.calls < self.target and self.last is None:
            raise RuntimeError(
                "An evaluation under --fsdp gave this process no block while others had some: set "
                "max_eval_blocks (or the eval split) to at least one block per process."
            )
        while self.calls < self.target:
            args, kwargs = self.last
            self(*args, **kwargs)


def plan_forwards(model, forwards: int, device: torch.device) -> None:
    """At the start of an evaluation's phase: this process will make `forwards` forwards (`Lockstep`;
    a plain model needs nothing)."""
    if isinstance(model, Lockstep):
        model.plan(forwards, device)


def catch_up(model) -> None:
    """At the end of the phase: as many forwards as the busiest process (`Lockstep`)."""
    if isinstance(model, Lockstep):
        model.catch_up()
