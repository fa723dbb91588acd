"""The speed runner's `fsdp` entry: FSDP2 (`--fsdp full_shard`) against DDP on CPU processes (gloo):
memory per process by component, step time, and the largest GPT each trains in a memory budget per
process. What is measured and how: `benchmarks/results/fsdp/notes.md`. Every measurement is a torchrun
launch of `python -m benchmarks.speed --_worker fsdp memory ENGINE|timing`.
"""

from __future__ import annotations

import gc
import json
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from .measure import (
    Contention,
    peak_rss_bytes,
    reset_peak_rss,
    rss_bytes,
    run_process,
    trim_heap,
    wait_for_idle,
)
from .render import table
from .speed import Entry

ENGINES = ("ddp", "fsdp")
ENGINE_NAMES = {"ddp": "DDP", "fsdp": "FSDP2 full_shard"}
# component -> its column in the memory table
COMPONENTS = {"parameters": "params", "gradients": "grads", "ddp_buckets": "DDP buckets",
              "optimizer_state": "AdamW state", "activations": "activations",
              "gathered_parameters": "gathered params", "unsharded_gradients": "unsharded grads"}  # fmt: skip
MIB = 2**20
LAUNCH_TIMEOUT_S = 600


# --- Accounting: storages, saved tensors, sampled components ---


def local_tensor(t):
    """The part of `t` this process holds: a DTensor's local shard, any other tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def storage_key(t) -> int:
    """The identity of the storage under `t` (the same for every view of it, and across a resize)."""
    return local_tensor(t).untyped_storage()._cdata


def storage_bytes(tensors: Iterable) -> int:
    """Bytes of the distinct storages under `tensors` (Nones skipped): a storage viewed by several
    tensors (FSDP2's gradient shards of one unit, tied weights) counts once, whole."""
    import torch

    seen: dict[int, int] = {}
    for t in tensors:
        if torch.is_tensor(t):
            storage = local_tensor(t).untyped_storage()
            seen[storage._cdata] = storage.nbytes()
    return sum(seen.values())


class _Saved:
    """What autograd holds for a saved tensor while the counter watches: the tensor, and the
    release of its storage's count when the graph drops it (after the op's backward)."""

    __slots__ = ("counter", "key", "tensor")

    def __init__(self, counter: SavedTensorCounter, key: int, tensor) -> None:
        self.counter, self.key, self.tensor = counter, key, tensor

    def __del__(self) -> None:
        self.counter.release(self.key)


class SavedTensorCounter:
    """The bytes of the tensors autograd saves for the backward, live at each moment (`hooks()`): a
    storage counts once from its first save until the backward releases its last saved view, filed
    under `category(tensor)`; storages with `excluded(key)` (parameters) are left out; `on_change` is
    called after every change."""

    def __init__(
        self,
        excluded: Callable[[int], bool] = lambda key: False,
        category: Callable[[object], str] = lambda t: "all",
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.excluded, self.category, self.on_change = excluded, category, on_change
        self.live: dict[int, list] = {}  # key -> [references, bytes, category]
        self.by_category: dict[str, int] = {}
        self.peak = 0

    @property
    def bytes(self) -> int:
        return sum(self.by_category.values())

    def pack(self, tensor):
        key = storage_key(tensor)
        if self.excluded(key):
            return tensor
        entry = self.live.get(key)
        if entry is not None:
            entry[0] += 1
            return _Saved(self, key, tensor)
        nbytes, name = tensor.untyped_storage().nbytes(), self.category(tensor)
        self.live[key] = [1, nbytes, name]
        self.by_category[name] = self.by_category.get(name, 0) + nbytes
        self.peak = max(self.peak, self.bytes)
        self.on_change()
        return _Saved(self, key, tensor)

    @staticmethod
    def unpack(saved):
        return saved.tensor if isinstance(saved, _Saved) else saved

    def release(self, key: int) -> None:
        entry = self.live[key]
        entry[0] -= 1
        if entry[0] == 0:
            del self.live[key]
            self.by_category[entry[2]] -= entry[1]
            self.on_change()

    def hooks(self):
        import torch

        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)


class MemoryMeter:
    """Samples components: `sources` maps a component to a function returning its bytes now, by
    part (`{"all": n}`, or `{"root": r, "blocks": b}`...). Keeps each component's peak with its
    parts at that moment, and the peak of the total with every component then."""

    def __init__(self, sources: Mapping[str, Callable[[], dict[str, int]]]) -> None:
        self.sources = dict(sources)
        self.reset()

    def reset(self) -> None:
        self.start: dict[str, int] | None = None  # the components at the first sample
        self.peak = {name: 0 for name in self.sources}
        self.peak_parts: dict[str, dict[str, int]] = {name: {} for name in self.sources}
        self.total_peak, self.at_total_peak, self.samples = 0, {}, 0

    def sample(self) -> None:
        self.samples += 1
        parts = {name: source() for name, source in self.sources.items()}
        totals = {name: sum(p.values()) for name, p in parts.items()}
        if self.start is None:
            self.start = totals
        for name, value in totals.items():
            if value > self.peak[name]:
                self.peak[name], self.peak_parts[name] = value, parts[name]
        if sum(totals.values()) > self.total_peak:
            self.total_peak, self.at_total_peak = sum(totals.values()), totals

    def result(self) -> dict:
        return {
            "peak_bytes": dict(self.peak),
            "peak_parts": {name: dict(p) for name, p in self.peak_parts.items()},
            "sum_of_peaks_bytes": sum(self.peak.values()),
            "total_peak_bytes": self.total_peak,
            "at_total_peak_bytes": dict(self.at_total_peak),
            "start_bytes": sum((self.start or {}).values()),
            "samples": self.samples,
        }


# --- The GPT family and the cost model ---


def family_config(k: int, vocab: int, block: int) -> dict:
    """Shape k: k layers of width 64k, k heads of 64, MLP 4x, learned positions (GPT-2's layout)."""
    if k < 1:
        raise ValueError(f"The family's shape `k` must be at least 1, got {k}.")
    return dict(
        vocab_size=vocab,
        hidden_size=64 * k,
        num_hidden_layers=k,
        num_attention_heads=k,
        intermediate_size=256 * k,
        max_position_embeddings=block,
    )


def shape_numels(config: Mapping) -> dict:
    """The parameter count of a GPT of `config` (built on the meta device: no memory), of one
    Transformer block, and of the root (embeddings, final norm, the tied head)."""
    import torch

    from hf_lm import HfLmGPTConfig, HfLmGPTForCausalLM

    with torch.device("meta"):
        model = HfLmGPTForCausalLM(HfLmGPTConfig(**config))
    total = sum(p.numel() for p in model.parameters())
    blocks = [m for m in model.modules() if is_block(m)]
    block = sum(p.numel() for p in blocks[0].parameters())
    return {
        "total": total,
        "block": block,
        "root": total - block * len(blocks),
        "layers": config["num_hidden_layers"],
        "hidden": config["hidden_size"],
    }


def part_scale(component: str, part: str, ref: Mapping, new: Mapping) -> float:
    """How a measured part of a component grows from shape `ref` to shape `new` (`shape_numels`)."""
    if component == "activations":
        # per token: the blocks' saved tensors are a few widths per layer (attention's per head,
        # and heads grow with the width); logits and log-softmax are vocabulary-wide
        return {
            "blocks": new["layers"] * new["hidden"] / (ref["layers"] * ref["hidden"]),
            "vocab": 1.0,
        }.get(part, new["hidden"] / ref["hidden"])
    if part in ("root", "blocks"):
        key = "root" if part == "root" else "block"
        return new[key] / ref[key]
    return new["total"] / ref["total"]


def predict_peaks(peak_parts: Mapping[str, Mapping[str, int]], ref: Mapping, new: Mapping) -> dict[str, int]:
    """Each component's peak at shape `new`, from its measured parts at shape `ref` (`part_scale`)."""
    return {
        component: round(sum(b * part_scale(component, part, ref, new) for part, b in parts.items()))
        for component, parts in peak_parts.items()
    }


def allocator_peak(events: Iterable[tuple[int, int]]) -> int:
    """The most bytes torch's allocator held above where it started, from its allocation events
    `(time, +bytes allocated or -bytes freed)` (the profiler's "[memory]" events), taken in time order."""
    held = peak = 0
    for _, nbytes in sorted(events, key=lambda e: e[0]):
        held += nbytes
        peak = max(peak, held)
    return peak


def profiled_allocator_peak(prof) -> int:
    """`allocator_peak` of a `torch.profiler.profile(profile_memory=True)` run's CPU allocations."""
    events = prof.profiler.kineto_results.events()
    return allocator_peak((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")


def largest_in_budget(sizes: Iterable[int], cost: Callable[[int], float], budget: float) -> int | None:
    """The largest size whose `cost` is within `budget`, None if none is."""
    fitting = [k for k in sizes if cost(k) <= budget]
    return max(fitting) if fitting else None


def worst_process(per_rank: list[dict]) -> dict:
    """Per component, the peak (and its parts) of the process that holds most; totals likewise."""
    worst: dict = {"peak_bytes": {}, "peak_parts": {}}
    for name in per_rank[0]["peak_bytes"]:
        top = max(per_rank, key=lambda r: r["peak_bytes"][name])
        worst["peak_bytes"][name] = top["peak_bytes"][name]
        worst["peak_parts"][name] = top["peak_parts"][name]
    worst["sum_of_peaks_bytes"] = sum(worst["peak_bytes"].values())
    for key in WORST:  # the figures of the memory table's last columns
        if key in per_rank[0]:
            worst[key] = max(r[key] for r in per_rank)
    return worst


# --- One process of a launch: building, measuring, timing ---


def train_args():
    """The loop's training arguments, at a constant learning rate (no warm-up: every step updates)."""
    import dataclasses

    from training.args import TrainArguments

    return dataclasses.replace(TrainArguments(), lr_scheduler="constant", warmup_steps=0)


def init_local_(model) -> None:
    """Initialize a model materialized from the meta device, shard by shard: matrices N(0, 0.02),
    norm gains 1, biases 0 (the values do not matter to memory; they keep the loss finite)."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            local = local_tensor(p)
            if name.endswith("bias"):
                local.zero_()
            elif p.dim() < 2:
                local.fill_(1.0)
            else:
                local.normal_(0.0, 0.02)


def build_engine(engine: str, config: Mapping, seed: int, meta: bool = False):
    """The GPT of `config` wrapped by `engine` on this process, and the loop's AdamW; `meta` (FSDP2):
    built on the meta device, sharded, materialized shard by shard, as a model too large for one process."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from hf_lm import HfLmGPTConfig, HfLmGPTForCausalLM
    from training.run.optimizer import build_optimizer
    from training.sharding import requested_plugin, shard_model

    cfg = HfLmGPTConfig(**config)
    if engine == "fsdp" and meta:
        with torch.device("meta"):
            model = HfLmGPTForCausalLM(cfg)
        if any(True for _ in model.buffers()):
            raise ValueError("A meta-device build needs a model without buffers (they would stay empty).")
        shard_model(model, requested_plugin("full_shard"), torch.device("cpu"), "no")
        model.to_empty(device="cpu")
        if model.lm_head.weight is not model.model.embed_tokens.weight:
            raise RuntimeError("Materializing the sharded model untied the head from the embeddings.")
        init_local_(model)
    else:
        torch.manual_seed(seed)  # the same initial weights on every process and for both engines
        model = HfLmGPTForCausalLM(cfg)
        if engine == "ddp":
            model = DistributedDataParallel(model)  # accelerate's defaults: 25 MiB buckets, no bucket views
        else:
            shard_model(model, requested_plugin("full_shard"), torch.device("cpu"), "no")
    model.train()
    optimizer, _ = build_optimizer(model, train_args())
    return model, optimizer


def make_batch(vocab: int, batch: int, block: int, seed: int, rank: int) -> dict:
    """A fixed batch of random tokens, different on every process, the same for both engines."""
    import torch

    g = torch.Generator().manual_seed(seed * 1000 + rank)
    ids = torch.randint(0, vocab, (batch, block), generator=g)  # (B, T)
    return {"input_ids": ids, "labels": ids}


def train_step(model, optimizer, batch: dict, sample: Callable[[], None] = lambda: None):
    """The loop's step: forward, backward, clipping to 1.0 (over the shards under FSDP2), AdamW,
    `zero_grad(set_to_none=True)`; `sample` is called between the phases. Returns the loss."""
    from training.sharding import clip_grad_norm

    loss = model(**batch).loss
    sample()
    loss.backward()
    sample()
    clip_grad_norm(model.parameters(), 1.0)
    optimizer.step()
    sample()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def is_block(module) -> bool:
    """A Transformer block, also once FSDP2 has made it an `FSDPTransformerBlock` (a subclass)."""
    from training.sharding import BLOCK_CLASS

    return any(cls.__name__ == BLOCK_CLASS for cls in type(module).__mro__)


def fsdp_params(model) -> list[tuple[str, object]]:
    """FSDP2's per-parameter records (`FSDPParam`), each with its unit: "root" or "blocks"."""
    from torch.distributed.fsdp import FSDPModule

    found = []
    for module in model.modules():
        if isinstance(module, FSDPModule):
            unit = "root" if module is model else "blocks"
            for group in module._get_fsdp_state()._fsdp_param_groups:
                found.extend((unit, fp) for fp in group.fsdp_params)
    return found


def _unsharded(fsdp: list[tuple[str, object]], tensors: Callable) -> dict[str, int]:
    """Per unit, the bytes of `tensors(fsdp_param)` FSDP2 holds now (freed storages hold 0 bytes)."""
    return {
        unit: storage_bytes(t for u, fp in fsdp if u == unit for t in tensors(fp))
        for unit in ("root", "blocks")
    }


def _gathered_tensors(fp) -> list:
    return [*fp.all_gather_outputs, getattr(fp, "_unsharded_param", None)]


def _unsharded_grad_tensors(fp) -> list:
    param = getattr(fp, "_unsharded_param", None)
    return [None if param is None else param.grad, fp.unsharded_accumulated_grad]


class StepAccounting:
    """Everything `MemoryMeter` samples for one engine's model and optimizer, and the hooks that
    sample it during a step. Install after a warm-up step (FSDP2 creates its unsharded parameters
    and AdamW its moments at the first step), then run one step inside `measuring()`."""

    def __init__(self, model, optimizer, engine: str, vocab: int) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        self.model, self.optimizer, self.engine, self.vocab = model, optimizer, engine, vocab
        self.params = list(model.parameters())
        self.fsdp = fsdp_params(model) if engine == "fsdp" else []
        self.buckets: dict[int, object] = {}  # bucket index -> its flat gradient buffer
        self.depth = 0  # inside a Transformer block's forward
        self.after_head = False  # the head and the loss have started
        if engine == "ddp":

            def hook(state, bucket):  # the default all-reduce, noting the bucket's buffer
                self.buckets[bucket.index()] = bucket.buffer()
                return allreduce_hook(state, bucket)

            model.register_comm_hook(None, hook)
        self.meter = MemoryMeter(
            {
                "parameters": lambda: {"all": storage_bytes(self.params)},
                "gradients": lambda: {"all": storage_bytes(p.grad for p in self.params)},
                "ddp_buckets": lambda: {"all": self._bucket_bytes()},
                "optimizer_state": lambda: {
                    "all": storage_bytes(v for s in optimizer.state.values() for v in s.values())
                },
                "activations": lambda: dict(self.counter.by_category),
                "gathered_parameters": lambda: _unsharded(self.fsdp, _gathered_tensors),
                "unsharded_gradients": lambda: _unsharded(self.fsdp, _unsharded_grad_tensors),
            }
        )
        self.counter = SavedTensorCounter(category=self._category, on_change=self.meter.sample)

    def _bucket_bytes(self) -> int:
        """DDP's buckets that are not the gradients themselves (with bucket views they would be)."""
        grads = {storage_key(p.grad) for p in self.params if p.grad is not None}
        return storage_bytes(b for b in self.buckets.values() if storage_key(b) not in grads)

    def _category(self, tensor) -> str:
        """Where a saved tensor comes from, for how it grows with the shape: inside a block,
        vocabulary-wide (the head's logits and the loss's log-softmax), or other (embeddings,
        the head's input)."""
        if self.depth:
            return "blocks"
        vocab_wide = self.after_head and tensor.dim() and tensor.shape[-1] == self.vocab
        return "vocab" if vocab_wide else "other"

    def measuring(self):
        """Hooks for one measured step: the saved-tensor counter (parameters and gathered
        parameters excluded), block depth for its categories, a sample after each gradient is
        accumulated."""
        import contextlib

        excluded = {storage_key(p) for p in self.params}
        excluded |= {storage_key(t) for _, fp in self.fsdp for t in fp.all_gather_outputs}
        self.counter.excluded = excluded.__contains__
        leaves = [fp._unsharded_param for _, fp in self.fsdp] if self.fsdp else self.params

        @contextlib.contextmanager
        def context():
            handles = [p.register_post_accumulate_grad_hook(lambda p: self.meter.sample()) for p in leaves]
            for name, module in self.model.named_modules():
                if is_block(module):
                    handles.append(module.register_forward_pre_hook(lambda *a: self._enter(1)))
                    handles.append(module.register_forward_hook(lambda *a: self._enter(-1)))
                elif name.split(".")[-1] == "lm_head":
                    handles.append(
                        module.register_forward_pre_hook(lambda *a: setattr(self, "after_head", True))
                    )
            self.depth, self.after_head = 0, False
            self.meter.reset()
            self.meter.sample()
            try:
                with self.counter.hooks():
                    yield self.meter
            finally:
                for handle in handles:
                    handle.remove()

        return context()

    def _enter(self, step: int) -> None:
        self.depth += step


def _gather(value):
    import torch.distributed as dist

    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, value)
    return everyone


def measure_memory(engine: str, config: Mapping, o, rank: int, meta: bool = False) -> dict:
    """One warm-up step, then one measured step of `engine` on the GPT of `config` (this process):
    the components (`StepAccounting`), and torch's allocator peak (the profiler's allocation
    events, on top of the components held at the step's start)."""
    from torch.profiler import ProfilerActivity, profile

    model, optimizer = build_engine(engine, config, o.seed, meta=meta)
    batch = make_batch(o.vocab, o.batch, o.block, o.seed, rank)
    accounting = StepAccounting(model, optimizer, engine, o.vocab)
    losses = [train_step(model, optimizer, batch)]
    cpu = [ProfilerActivity.CPU]
    with accounting.measuring() as meter, profile(activities=cpu, profile_memory=True) as prof:
        losses.append(train_step(model, optimizer, batch, meter.sample))
    result = meter.result()
    # every byte torch allocated during the step, temporaries included, on top of what was held at its start
    result["allocator_peak_bytes"] = result["start_bytes"] + profiled_allocator_peak(prof)
    result["losses"] = losses
    gc.collect()
    trim_heap()  # hand the freed heap back: what stays resident is what the process holds
    result["rss_after_step_trimmed_bytes"] = rss_bytes()
    if engine == "ddp":
        result["ddp_bucket_count"] = len(accounting.buckets)
    del model, optimizer, accounting, meter
    gc.collect()
    return result


def memory_worker(o, rank: int, world: int) -> dict:
    """One process of a memory launch: the reference's memory (with the process's peak RSS), the cost model, and
    the largest shape in the budget, built and measured."""
    import hf_lm  # noqa: F401  (everything the model needs imported: the RSS before it is built)
    import training.run.optimizer  # noqa: F401
    import training.sharding  # noqa: F401

    before = rss_bytes()
    ref_config = family_config(o.size, o.vocab, o.block)
    mine = measure_memory(o.engine, ref_config, o, rank)
    mine["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    mine["rss_before_model_bytes"] = before
    per_rank = _gather(mine)
    reference = worst_process(per_rank)

    ref_shape = shape_numels(ref_config)
    shapes = {k: shape_numels(family_config(k, o.vocab, o.block)) for k in range(1, o.max_size + 1)}
    predictions = {k: predict_peaks(reference["peak_parts"], ref_shape, s) for k, s in shapes.items()}
    budget = o.budget_mib * MIB
    chosen = largest_in_budget(shapes, lambda k: sum(predictions[k].values()), budget)

    tried = []
    k = chosen
    while k is not None and k >= 1 and len(tried) < o.verify_tries:
        trim_heap()
        reset_ok = reset_peak_rss()
        got = measure_memory(o.engine, family_config(k, o.vocab, o.block), o, rank, meta=True)
        got["peak_rss_since_reset_bytes"] = peak_rss_bytes(reset_ok)
        got["rss_peak_method"] = "VmHWM after clear_refs" if reset_ok else "ru_maxrss (process lifetime)"
        everyone = _gather(got)
        worst = worst_process(everyone)
        row = {
            "k": k,
            "parameters": shapes[k]["total"],
            "predicted_sum_of_peaks_bytes": sum(predictions[k].values()),
            "measured_sum_of_peaks_bytes": worst["sum_of_peaks_bytes"],
            "measured_total_peak_bytes": worst["total_peak_bytes"],
            "measured_allocator_peak_bytes": worst["allocator_peak_bytes"],
            "measured_peak_bytes": worst["peak_bytes"],
            "peak_rss_since_reset_bytes": max(r["peak_rss_since_reset_bytes"] for r in everyone),
            "rss_peak_method": got["rss_peak_method"],
            "losses_rank0": everyone[0]["losses"],
            "fits": worst["sum_of_peaks_bytes"] <= budget,
        }
        tried.append(row)
        if row["fits"]:
            break
        k -= 1
    return {
        "engine": o.engine,
        "processes": world,
        "reference": {"k": o.size, "config": ref_config, "numels": ref_shape, "worst": reference},
        "per_rank": per_rank,
        "budget_bytes": budget,
        "predicted_sum_of_peaks_bytes": {k: sum(p.values()) for k, p in predictions.items()},
        "shapes": shapes,
        "largest_predicted_k": chosen,
        "next_k": None if chosen is None or chosen + 1 not in shapes else chosen + 1,
        "verification": tried,
    }


def timing_worker(o, rank: int, world: int) -> dict:
    """One process of a timing launch: DDP and FSDP2 side by side in the same processes, steps alternating."""
    import torch
    import torch.distributed as dist

    config = family_config(o.size, o.vocab, o.block)
    sides = {engine: build_engine(engine, config, o.seed) for engine in ENGINES}
    batch = make_batch(o.vocab, o.batch, o.block, o.seed, rank)
    losses = {engine: [] for engine in ENGINES}
    for _ in range(o.warmup):
        for engine, (model, opt) in sides.items():
            losses[engine].append(train_step(model, opt, batch))
    times = {engine: [] for engine in ENGINES}
    with Contention() as busy:  # the timed rounds alone
        for r in range(o.rounds):
            for engine in ENGINES if r % 2 == 0 else ENGINES[::-1]:
                model, opt = sides[engine]
                gc.collect()
                dist.barrier()
                t0 = time.perf_counter()
                losses[engine].append(train_step(model, opt, batch))
                slowest = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
                dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
                times[engine].append(float(slowest))
    gap = torch.tensor([max(abs(a - b) for a, b in zip(losses["ddp"], losses["fsdp"]))], dtype=torch.float64)
    dist.all_reduce(gap, op=dist.ReduceOp.MAX)
    return {
        "processes": world,
        "step_s": times,
        "median_s": {e: statistics.median(t) for e, t in times.items()},
        "losses_rank0": losses,
        "max_loss_gap": float(gap),
        "contention": busy.result,
    }


def mib(n: int | None) -> str:
    return "—" if n is None else f"{n / MIB:.1f}"


STATE = ("parameters", "gradients", "ddp_buckets", "optimizer_state")  # what grows with the parameters
# a process's worst figures and the verified size's: key -> header in the tables
WORST = {
    "total_peak_bytes": "sampled peak",
    "allocator_peak_bytes": "allocator peak",
    "peak_rss_bytes": "peak RSS",
    "rss_before_model_bytes": "RSS before model",
    "rss_after_step_trimmed_bytes": "RSS after step, trimmed",
}
VERIFIED = {
    "predicted_sum_of_peaks_bytes": "predicted",
    "measured_sum_of_peaks_bytes": "measured sum of peaks",
    "measured_total_peak_bytes": "measured sampled peak",
    "measured_allocator_peak_bytes": "measured allocator peak",
}


def runs(memory: dict):
    """(N, engine, its memory launch) for every process count and engine."""
    return ((n, engine, run) for n, engines in memory.items() for engine, run in engines.items())


def memory_table(memory: dict) -> str:
    rows = [
        {"engine": ENGINE_NAMES[e], "N": str(n), **run["reference"]["worst"]} for n, e, run in runs(memory)
    ]
    columns = [
        ["engine", "engine", None],
        ["N", "N", None],
        *([header, lambda w, c=c: w["peak_bytes"][c] or "0", mib] for c, header in COMPONENTS.items()),
        ["sum of peaks", "sum_of_peaks_bytes", lambda v: f"**{mib(v)}**"],
        *([header, key, mib] for key, header in WORST.items()),
    ]
    return table(columns, rows, 2)


def ratio_lines(memory: dict) -> list[str]:
    lines = []
    for n, engines in memory.items():
        ddp, fsdp = (engines[e]["reference"]["worst"] for e in ENGINES)
        state, grown = ({e: sum(w["peak_bytes"][c] for c in STATE) for e, w in (("d", ddp), ("f", fsdp))},
                        {e: w["rss_after_step_trimmed_bytes"] - w["rss_before_model_bytes"] for e, w in (("d", ddp), ("f", fsdp))})  # fmt: skip
        lines.append(
            f"- N={n}: sum of peaks FSDP2/DDP {fsdp['sum_of_peaks_bytes'] / ddp['sum_of_peaks_bytes']:.3f}; "
            f"parameters + gradients + buckets + AdamW state FSDP2/DDP {state['f'] / state['d']:.3f}; "
            f"peak RSS FSDP2/DDP {fsdp['peak_rss_bytes'] / ddp['peak_rss_bytes']:.3f}; RSS after the step "
            f"(trimmed) above the RSS before the model, FSDP2/DDP {grown['f'] / grown['d']:.3f}."
        )
    return lines


TIMING_COLUMNS = [  # `render.table`'s [header, key, format] of a timing launch
    ["N", "N", None],
    ["DDP step (s, median)", lambda r: r["median_s"]["ddp"], "{:.2f}"],
    ["FSDP2 step (s, median)", lambda r: r["median_s"]["fsdp"], "{:.2f}"],
    ["FSDP2/DDP", lambda r: r["median_s"]["fsdp"] / r["median_s"]["ddp"], "**{:.3f}**"],
    ["FSDP2/DDP (fastest steps)", lambda r: min(r["step_s"]["fsdp"]) / min(r["step_s"]["ddp"]), "{:.3f}"],
    ["max |loss gap|", "max_loss_gap", "{:.1e}"],
    ["CPU pressure", lambda r: r.get("contention", {}).get("cpu_pressure_share"), "{:.0%}"],
]


def timing_table(timing: dict) -> str:
    """Step times; CPU pressure: the share of the launch's wall time some task waited for a CPU."""
    return table(TIMING_COLUMNS, [{"N": str(n), **run} for n, run in timing.items()], 1)


def shape_name(k: int, numels: Mapping) -> str:
    return f"k={k}: {k} x {64 * k}, {numels['total'] / 1e6:.1f}M"


def fitted(run: dict) -> dict | None:
    """The largest size built and trained within the budget, None if none was."""
    return next((row for row in run["verification"] if row["fits"]), None)


def budget_row(n, engine: str, run: dict) -> dict:
    """A budget table's row: the largest size that fits (its verified figures) and the next one."""
    shapes = {int(k): v for k, v in run["shapes"].items()}
    final, nxt = fitted(run), run["next_k"]
    tried = ", ".join(
        f"k={row['k']} {mib(row['measured_sum_of_peaks_bytes'])}" + ("" if row["fits"] else " (over)")
        for row in run["verification"]
    )
    return {
        **(final or {}),
        "engine": ENGINE_NAMES[engine],
        "N": str(n),
        "largest": "none" if final is None else f"**{shape_name(final['k'], shapes[final['k']])}**",
        "tried": tried or "—",
        "next": "—"
        if nxt is None
        else f"{shape_name(nxt, shapes[nxt])}: " + mib(run["predicted_sum_of_peaks_bytes"][str(nxt)]),
    }


def budget_table(memory: dict) -> str:
    columns = [
        ["engine", "engine", None],
        ["N", "N", None],
        ["largest GPT in budget", "largest", None],
        *([header, key, mib] for key, header in VERIFIED.items()),
        ["built and trained (sum of peaks)", "tried", None],
        ["next size (predicted)", "next", None],
    ]
    return table(columns, [budget_row(*run) for run in runs(memory)], "llrrrrrll")


def limit_lines(memory: dict) -> list[str]:
    """What fills the budget at each engine's largest size: the state that scales with the
    parameters, and the activations, which neither engine shards."""
    lines = []
    for n, engine, run in runs(memory):
        if (final := fitted(run)) is None:
            continue
        peaks = final["measured_peak_bytes"]
        lines.append(
            f"- {ENGINE_NAMES[engine]}, N={n}, k={final['k']}: parameters, gradients, buckets and AdamW "
            f"state {mib(sum(peaks[c] for c in STATE))} MiB, activations {mib(peaks['activations'])} MiB, gathered "
            f"parameters and unsharded gradients {mib(peaks['gathered_parameters'] + peaks['unsharded_gradients'])} MiB."
        )
    return lines


def cost_lines(memory: dict, tokens: int) -> list[str]:
    lines = []
    for n, engine, run in runs(memory):
        worst, numels = run["reference"]["worst"], run["reference"]["numels"]
        acts, gathered = worst["peak_parts"]["activations"], worst["peak_parts"]["gathered_parameters"]
        kib = {part: f"{acts.get(part, 0) / tokens / 1024:.1f}" for part in ("blocks", "vocab", "other")}
        line = (
            f"- {ENGINE_NAMES[engine]}, N={n}: {sum(worst['peak_bytes'][c] for c in STATE) / numels['total']:.2f} bytes "
            f"per model parameter (parameters, gradients, buckets, AdamW); activations "
            f"{sum(acts.values()) / tokens / 1024:.1f} KiB per token (in blocks {kib['blocks']}, vocabulary-wide "
            f"{kib['vocab']}, other {kib['other']})"
        )
        if engine == "fsdp":
            line += (
                f"; gathered {mib(worst['peak_bytes']['gathered_parameters'])} MiB = root {mib(gathered.get('root', 0))} "
                f"+ blocks {mib(gathered.get('blocks', 0))} (one block: {mib(4 * numels['block'])})"
            )
        lines.append(line + ".")
    return lines


# --- The entry: launches, tables ---


def worker(o, kind: str, engine: str | None = None) -> dict | None:
    """`--_worker fsdp memory ENGINE|timing`: one process of a launch (the first returns the figures)."""
    import torch
    import torch.distributed as dist

    o.engine = engine
    torch.set_num_threads(o.threads_per_process)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    report = {"memory": memory_worker, "timing": timing_worker}[kind](o, rank, dist.get_world_size())
    dist.barrier()
    dist.destroy_process_group()
    return report if rank == 0 else None


def launch(o, processes: int, work: list[str], folder: Path) -> dict:
    """Run the worker `work` on `processes` processes (torchrun, standalone) and read its JSON."""
    out = folder / f"{'_'.join(work)}_{processes}.json"
    per_process = max(1, o.threads // processes)
    options = json.dumps({**vars(o), "threads_per_process": per_process})
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes),
        "-m", "benchmarks.speed", "--_worker", "fsdp", *work, "--_options", options, "--_out", str(out),
    ]  # fmt: skip
    done = run_process(cmd, out.with_suffix(".log"), LAUNCH_TIMEOUT_S, {"OMP_NUM_THREADS": str(per_process)})
    if done["error"]:
        log = Path(done["log"]).read_text()[-4000:]
        raise RuntimeError(f"{' '.join(work)} on {processes} processes failed ({done['error']}):\n{log}")
    result = json.loads(out.read_text())
    result["launch_s"] = done["wall_s"]
    print(f"  {' '.join(work)} x{processes}: {result['launch_s']:.0f}s", flush=True)
    return result


def run(o) -> dict:
    """For each process count: the timing launch, then a memory launch per engine."""
    import tempfile

    for name in ("size", "vocab", "block", "batch", "budget_mib", "max_size", "rounds"):
        if getattr(o, name) < 1:
            raise ValueError(f"`{name}` must be at least 1, got {getattr(o, name)}.")
    t0, memory, timing = time.perf_counter(), {}, {}
    with tempfile.TemporaryDirectory(prefix="speed_fsdp_") as tmp:
        for n in o.processes:
            waited = wait_for_idle(o.wait_idle)
            timing[n] = launch(o, n, ["timing"], Path(tmp))
            timing[n]["contention"]["waited_s"] = waited
            memory[n] = {engine: launch(o, n, ["memory", engine], Path(tmp)) for engine in ENGINES}
    ref = next(iter(memory[o.processes[0]].values()))["reference"]
    reference = {"k": o.size, "config": ref["config"], "numels": ref["numels"]}
    return {"reference": reference, "memory": memory, "timing": timing, "seconds": time.perf_counter() - t0}


def report(data: dict, result: dict) -> list[str]:
    """The tables; what each column counts is in the results folder's notes."""
    o, ref = data["options"], data["reference"]
    numels, config = ref["numels"], ref["config"]
    per_process = ", ".join(
        f"{max(1, o['threads'] // n)} torch thread(s) per process at N={n}" for n in o["processes"]
    )
    return [
        "## FSDP2 against DDP: memory per process, step time, largest GPT in a budget",
        "",
        f"{per_process}; gloo, fp32. GPT (hf_lm `HfLmGPTForCausalLM`): {config['num_hidden_layers']} layers, hidden "
        f"{config['hidden_size']}, {config['num_attention_heads']} heads, MLP {config['intermediate_size']}, "
        f"vocabulary {o['vocab']} (tied head), {o['block']} positions: {numels['total'] / 1e6:.2f}M parameters "
        f"({numels['block'] / 1e6:.2f}M per block, {numels['root'] / 1e6:.2f}M in the root). Micro-batch "
        f"{o['batch']} x {o['block']} tokens per process; {data['seconds']:.0f} s in all.",
        "",
        "### Memory per process (MiB)",
        "",
        memory_table(data["memory"]),
        "",
        *ratio_lines(data["memory"]),
        "",
        "### Step time",
        "",
        f"{o['warmup']} warm-up steps per engine, then {o['rounds']} rounds.",
        "",
        timing_table(data["timing"]),
        "",
        f"### Largest GPT in {o['budget_mib']} MiB per process",
        "",
        budget_table(data["memory"]),
        "",
        "At the largest sizes (measured; sums of component peaks):",
        "",
        *limit_lines(data["memory"]),
        "",
        "Costs measured on the reference:",
        "",
        *cost_lines(data["memory"], o["batch"] * o["block"]),
        "",
    ]


ENTRY = Entry(
    "FSDP2 against DDP on CPU processes: memory by component, step time, largest GPT in a budget",
    run,
    report,
    {"processes": [2, 4], "size": 8, "vocab": 8192, "block": 256, "batch": 2, "budget_mib": 1024, "max_size": 32,
     "verify_tries": 2, "warmup": 2, "rounds": 5},
    {"size": 2, "vocab": 512, "block": 64, "budget_mib": 16, "max_size": 6, "warmup": 1, "rounds": 2},
    worker,
)  # fmt: skip
