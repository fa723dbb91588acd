"""What the benchmark scripts of this package share: one version of each.

- The machine and the software a result was measured on: `available_cores`, `cpu_model`,
  `load_average`, `versions`, `git_revision`.
- The device a benchmark runs on: `resolve_device` (auto/cuda/cpu), `device_synchronizer` (wait for
  queued GPU work before reading a clock), `accelerator_info` (GPU name, memory, CUDA version), and
  `alternating_rounds`, the A/B timing loop with that wait (`bench_gpu`).
- A/B timing on a CPU (`bench_gpt`, `bench_bert`, `bench_seq2seq`): `time_alternating` (the
  sides alternate round by round; wall and CPU time, page faults), `Contention` and
  `wait_for_idle` (other processes' load, from Linux PSI), `timed_phase`, `summarize`,
  `environment`, `make_train_step`.
- A/B results: `metric_row`, `metric_cell`, `ratio`, `ratio_cell`, `flops_line`,
  `write_ab_report` (the JSON; `AB_METHOD` says how it was measured), `error_text`.
- Peak memory, measured in a fresh process: `rss_bytes`, `reset_peak_rss`, `peak_rss_bytes`,
  `trim_heap`, `measure_peak_rss`, `worker_memory`, `tensor_bytes`, `memory_rows`, and
  `memory_worker_command` / `run_json_worker` to start such a process (`python -m` from the
  repository root).
- Command lines: `comma_list`, `parse_entries`, `resolve`, `add_preset_options`, `preset_table`,
  `command_line`, and the A/B benchmarks' common options (`add_machine_options`,
  `add_warmup_and_memory_options`).
- Text and plots: `markdown_table`, `fmt`, `millions`, `pyplot` (matplotlib, headless),
  `label_bars`, `bar_chart`.
- What the translation and SST-2 leaderboards share: `leaderboard_parser`,
  `parse_leaderboard_args`, `start_leaderboard`, `run_entry_row`, `training_fields`,
  `write_results`, `leaderboard_hardware`, `leaderboard_footer`, `exit_if_failed`,
  `reuse_or_train_tokenizer`.

Only the standard library is imported here at module level (torch, transformers and matplotlib
inside the helpers that need them), so that light parent processes such as `suite` stay light.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import logging
import math
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

logger = logging.getLogger("bench_common")

from .render import bar_chart, fmt, label_bars, markdown_table, millions, pyplot  # noqa: E402,F401  (moved)

REPO_ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------------------------
# The machine and the software
# --------------------------------------------------------------------------------------------


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity mask; all cores where that is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else `platform.processor()`, else "unknown"."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages: /proc/loadavg's (two decimals, as `uptime` prints
    them), else `os.getloadavg()`'s; None where the system has neither."""
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        pass
    try:
        return list(os.getloadavg())
    except (AttributeError, OSError):
        return None


def versions(*packages: str) -> dict[str, str]:
    """`{package: __version__}` for the named packages (imported here), in the order given."""
    return {name: importlib.import_module(name).__version__ for name in packages}


def git_revision(short: bool = False, dirty_mark: str = "+dirty", missing: str | None = None) -> str | None:
    """The repository's HEAD commit, with `dirty_mark` appended when tracked files have changes.

    Args:
        short: the abbreviated hash (`git rev-parse --short HEAD`) instead of the full one.
        dirty_mark: appended when `git status` lists uncommitted changes to tracked files.
        missing: what to return where git or the repository cannot be read.
    """
    try:
        head = subprocess.run(
            ["git", "rev-parse", *(["--short"] if short else []), "HEAD"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return missing
    return head + (dirty_mark if dirty else "")


# --------------------------------------------------------------------------------------------
# The device: GPU or CPU
# --------------------------------------------------------------------------------------------

DEVICE_CHOICES = ("auto", "cuda", "cpu")


def resolve_device(name: str) -> str:
    """ "auto" -> "cuda" when a CUDA GPU is visible, else "cpu"; "cuda" and "cpu" are returned as given.

    Raises:
        ValueError: for another name, or "cuda" where torch sees no CUDA GPU.
    """
    import torch

    if name not in DEVICE_CHOICES:
        raise ValueError(f"`device` must be one of {DEVICE_CHOICES}, got {name!r}.")
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "`device` is 'cuda' but torch sees no CUDA GPU (torch.cuda.is_available() is False)."
        )
    return name


def device_synchronizer(device) -> Callable[[], None]:
    """A no-argument function that waits until the work queued on `device` is done.

    GPU kernels run asynchronously: a clock read right after a call measures the launches, not the
    work. Timers call this before each clock read. On a CPU it does nothing.
    """
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def accelerator_info(device) -> dict:
    """What a GPU result was measured on: the GPU's name, compute capability, memory and count, the
    CUDA and cuDNN versions torch was built with; `{"device": "cpu"}` on a CPU."""
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return {"device": device.type}
    index = device.index if device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    return {
        "device": f"cuda:{index}",
        "gpu_name": props.name,
        "gpu_count": torch.cuda.device_count(),
        "compute_capability": f"{props.major}.{props.minor}",
        "gpu_memory_bytes": props.total_memory,
        "multiprocessors": props.multi_processor_count,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
    }


def alternating_rounds(
    fns: Mapping[str, Callable[[], object]],
    rounds: int,
    reps: int,
    warmup: int,
    synchronize: Callable[[], None] = lambda: None,
) -> dict[str, list[float]]:
    """Wall seconds per call of each function, one sample per round, the order reversed every round.

    `warmup` calls of each function first (untimed). A sample is `reps` back-to-back calls between
    two clock reads, each read preceded by `synchronize()` (`device_synchronizer`): queued GPU work is
    waited for once per sample, not after every call, so the GPU is kept busy as in training.

    Returns:
        `{name: [seconds per call, one per round]}`.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    synchronize()
    names = list(fns)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            gc.collect()
            synchronize()
            t0 = time.perf_counter()
            for _ in range(reps):
                fns[name]()
            synchronize()
            samples[name].append((time.perf_counter() - t0) / reps)
    return samples


# --------------------------------------------------------------------------------------------
# A/B timing on a CPU: contention, CPU time, summaries (bench_gpt, bench_bert, bench_seq2seq)
# --------------------------------------------------------------------------------------------


def cpu_pressure() -> dict | None:
    """Linux PSI for the CPU: `some` = share of time at least one runnable task waited for a CPU.

    On an otherwise idle machine a run with threads == cores keeps it near 0; anything else running
    (other jobs, test suites) shows up here, and it distorts timings, OpenMP-threaded ones badly.
    """
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    fields = dict(kv.split("=") for kv in line.split()[1:])
    return {
        "avg10": float(fields["avg10"]),
        "avg60": float(fields["avg60"]),
        "total_us": int(fields["total"]),
    }


class Contention:
    """Share of a phase's wall time during which some task waited for a CPU (from PSI), and load."""

    def __enter__(self):
        self.p0, self.t0 = cpu_pressure(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        wall = time.perf_counter() - self.t0
        p1 = cpu_pressure()
        self.result = {"wall_s": wall, "loadavg_end": load_average()}
        if self.p0 and p1:
            self.result["cpu_pressure_share"] = (p1["total_us"] - self.p0["total_us"]) / 1e6 / wall
        return False


def wait_for_idle(max_wait_s: float, threshold: float = 5.0) -> float:
    """Wait (at most `max_wait_s`) until PSI cpu `some avg10` drops below `threshold` percent."""
    t0 = time.perf_counter()
    while max_wait_s > 0 and time.perf_counter() - t0 < max_wait_s:
        p = cpu_pressure()
        if p is None or p["avg10"] < threshold:
            break
        time.sleep(2.0)
    return time.perf_counter() - t0


def busy_note(result: dict) -> str:
    """The printed note on a phase's CPU contention (a `Contention` result); "" where PSI is missing."""
    share = result.get("cpu_pressure_share")
    if share is None:
        return ""
    note = f" (CPU pressure {share:.0%} of the time"
    if share > 0.05:
        note += "; the machine was busy: timings are noisy, ratios from alternating rounds less so"
    return note + ")"


def environment(threads: int) -> dict:
    """Versions, threads, cores, CPU and its load: the `environment` of every A/B benchmark's JSON."""
    import torch

    return {
        **versions("torch", "transformers"),
        "python": platform.python_version(),
        "threads": threads,
        "cores_available": available_cores(),
        "cpu_model": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "platform": platform.platform(),
        "loadavg_start": load_average(),
        "cpu_pressure_start": cpu_pressure(),
    }


def environment_line(env: dict) -> str:
    """The line an A/B benchmark prints first: versions, threads and CPU."""
    return (
        f"torch {env['torch']}, transformers {env['transformers']}, {env['threads']} threads, "
        f"{env['cpu_model']} ({env['cpu_capability']})"
    )


def time_alternating(fns: Mapping[str, Callable[[], object]], rounds: int, reps: int, warmup: int) -> dict:
    """Per call of each function, one sample per round (the order alternates every round):
    wall seconds, and this process's user/system CPU seconds and minor page faults (getrusage).

    The CPU counterpart of `alternating_rounds`: on a shared CPU the work a side does (its CPU time)
    is steadier than its wall time, and page faults show a side that allocates more per call.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    names = list(fns)
    samples = {name: {"wall_s": [], "user_s": [], "sys_s": [], "minor_faults": []} for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            gc.collect()
            ru0 = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            for _ in range(reps):
                fns[name]()
            wall = time.perf_counter() - t0
            ru1 = resource.getrusage(resource.RUSAGE_SELF)
            s = samples[name]
            s["wall_s"].append(wall / reps)
            s["user_s"].append((ru1.ru_utime - ru0.ru_utime) / reps)
            s["sys_s"].append((ru1.ru_stime - ru0.ru_stime) / reps)
            s["minor_faults"].append((ru1.ru_minflt - ru0.ru_minflt) / reps)
    return samples


def summarize(samples: dict, units_per_call: float) -> dict:
    """Median, min and max seconds per call, throughput (`units_per_call` / median), median CPU
    times and page faults of one side's `time_alternating` samples (kept under `samples`)."""
    wall = samples["wall_s"]
    med = statistics.median(wall)
    return {
        "median_s": med,
        "min_s": min(wall),
        "max_s": max(wall),
        "throughput": units_per_call / med,
        "median_user_s": statistics.median(samples["user_s"]),
        "median_sys_s": statistics.median(samples["sys_s"]),
        "median_minor_faults": statistics.median(samples["minor_faults"]),
        "samples": samples,
    }


def summarize_with_cpu(samples: dict, units_per_call: float) -> dict:
    """`summarize` plus the median CPU time (user + sys) per call: on a shared machine the work a
    side does is steadier than its wall time, which includes waiting for a CPU."""
    result = summarize(samples, units_per_call)
    result["median_cpu_s"] = statistics.median(u + s for u, s in zip(samples["user_s"], samples["sys_s"]))
    return result


def timed_phase(
    fns: Mapping[str, Callable[[], object]],
    args,
    reps: int,
    units: float,
    contention: dict,
    key: str,
    label: str | None = None,
    summary: Callable[[dict, float], dict] = summarize_with_cpu,
) -> dict:
    """One timed phase of an A/B benchmark: wait for an idle CPU (`--wait-idle`), time the sides
    alternately (`--rounds`, `reps` calls per sample, `--warmup`), record the contention under
    `contention[key]`, print the time it took (as `label`, default `  key`).

    Returns:
        `{side: summary(samples, units)}`; `units` is what one call processes (tokens, positions).
    """
    t0 = time.perf_counter()
    contention["waited_s"][key] = wait_for_idle(args.wait_idle)
    with Contention() as c:
        samples = time_alternating(fns, args.rounds, reps, args.warmup)
    contention[key] = c.result
    label = f"  {key}" if label is None else label
    print(f"{label} timed in {time.perf_counter() - t0:.0f}s{busy_note(c.result)}", flush=True)
    return {side: summary(s, units) for side, s in samples.items()}


def make_train_step(model, batch: Mapping, lr: float):
    """The A/B benchmarks' training step on a fixed batch (which holds the labels): forward,
    backward, AdamW step, `zero_grad`; returns the detached loss. `step.optimizer` is the AdamW,
    for its state's size."""
    import torch

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)

    def step():
        loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    step.optimizer = opt
    return step


# --------------------------------------------------------------------------------------------
# A/B results: rows, ratios, the table, the JSON report
# --------------------------------------------------------------------------------------------

AB_METHOD = (
    "{design} alternating rounds in one process after warm-up, median per side; {order}. "
    "Contention: share of each phase's wall time with a task waiting for a CPU (/proc/pressure/cpu). "
    "Memory: fresh subprocess per {memory}, peak RSS above the pre-workload RSS (VmHWM reset via "
    "/proc/self/clear_refs)."
)


def metric_row(values: dict, unit: str, higher_is_better: bool) -> dict:
    """One row of an A/B benchmark's `results`: a value per side, its unit and which way is better."""
    return {**values, "unit": unit, "higher_is_better": higher_is_better}


def metric_cell(value: float, unit: str) -> str:
    """A value of an A/B table in its unit: bytes as MiB, seconds as ms, GFLOP/s with two decimals,
    counts and throughputs as whole numbers."""
    if unit == "MiB":
        return f"{value / 2**20:.1f}"
    if unit == "ms":
        return f"{value * 1e3:.1f}"
    if unit == "GFLOP/s":
        return f"{value:.2f}"
    return f"{value:,.0f}"


def ratio_cell(ratio: float | None) -> str:
    """A ratio cell: three decimals, "n/a" where the denominator was zero."""
    return "n/a" if ratio is None else f"{ratio:.3f}"


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None where either is missing or not finite, or b is zero."""
    if a is None or b is None or not b or not math.isfinite(a) or not math.isfinite(b):
        return None
    return a / b


def error_text(err: BaseException) -> str:
    """A failure as one line for a table or a JSON field: its type, message, at most 400 characters."""
    lines = f"{type(err).__name__}: {err}".strip().splitlines()
    return " ".join(line.strip() for line in lines[:3])[:400]


def flops_line(flops: dict) -> str:
    """The printed FLOPs of one training step per side (`count_train_step_flops` results)."""
    return "FLOPs per training step (forward + backward, optimizer not counted): " + ", ".join(
        f"{side} {counted['total'] / 1e9:.2f} G" for side, counted in flops.items()
    )


def write_ab_report(path: str | Path, env: dict, args, body: dict, profiles: list[str], method: str) -> None:
    """Write an A/B benchmark's JSON: `environment`, `args` (those not starting with "_"), then
    `body`'s sections in order, `profiles` and `method`; print where it went."""
    path = Path(path)
    report = {
        "environment": env,
        "args": {k: v for k, v in vars(args).items() if not k.startswith("_")},
        **body,
        "profiles": profiles,
        "method": method,
    }
    path.write_text(json.dumps(report, indent=2, default=str))
    print(f"\nwrote {path}")


# --------------------------------------------------------------------------------------------
# Peak memory, measured in a fresh process
# --------------------------------------------------------------------------------------------


def rss_bytes() -> int:
    """This process's resident set size now (/proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS counter (VmHWM) of this process; False where that is refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM (Linux >= 4.0)
        return True
    except OSError:
        return False


def peak_rss_bytes(reset_ok: bool) -> int:
    """The peak RSS since `reset_peak_rss()` (VmHWM) if that worked, else over the process lifetime."""
    if reset_ok:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux


def trim_heap() -> bool:
    """Hand the allocator's free memory back to the kernel (glibc `malloc_trim(0)`).

    Where a model is built by converting another one that is then dropped, the dead model's pages
    otherwise stay resident: they raise the baseline by the size of a model and are reused by the
    workload, so its peak *above baseline* reads too low.
    """
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
        return True
    except (OSError, AttributeError):  # not glibc
        return False


def measure_peak_rss(fn: Callable[[], object], calls: int, trim: bool = False) -> dict:
    """The peak RSS of `calls` calls of `fn`, above the RSS this process had just before them.

    Collects garbage (with `trim`, also hands the freed heap back: `trim_heap`), reads the RSS,
    resets the kernel's peak counter, runs the workload and reads the peak.

    Returns:
        `baseline_rss_bytes`, `peak_rss_bytes`, `peak_rss_delta_bytes`, `peak_method`, and with
        `trim`, `heap_trimmed` (whether the trim worked).
    """
    gc.collect()
    trimmed = trim_heap() if trim else None
    base = rss_bytes()
    reset_ok = reset_peak_rss()
    for _ in range(calls):
        fn()
    peak = peak_rss_bytes(reset_ok)
    result = {
        "baseline_rss_bytes": base,
        "peak_rss_bytes": peak,
        "peak_rss_delta_bytes": peak - base,
        "peak_method": "VmHWM after clear_refs" if reset_ok else "ru_maxrss (process lifetime)",
    }
    if trim:
        result["heap_trimmed"] = trimmed
    return result


def run_json_worker(cmd: list[str], what: str, timeout: float | None = None) -> dict:
    """Run a worker process (offline) that prints its result as JSON on its last stdout line.

    Raises:
        RuntimeError: naming `what`, with the end of the worker's stderr, if it exits non-zero.
    """
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(  # from the repository root, where `python -m benchmarks.<script>` is found
        cmd, cwd=REPO_ROOT, capture_output=True, text=True, env=env, check=False, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def tensor_bytes(tensors) -> int:
    """Bytes of the distinct tensors among `tensors` (a tensor seen twice, as tied weights are, once)."""
    import torch

    seen, total = set(), 0
    for t in tensors:
        if torch.is_tensor(t) and t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total


def optimizer_state_bytes(optimizer) -> int:
    """Bytes of an optimizer's state tensors (AdamW: both moments and the step counts)."""
    return tensor_bytes(t for state in optimizer.state.values() for t in state.values())


def memory_rows(train: dict, sides, steps: int, suffix: str = "") -> dict:
    """The `results` rows of the training memory workers (`train`: side -> worker result):
    parameters + AdamW state, and the peak RSS of `steps` training steps above baseline."""
    return {
        f"parameters + AdamW state{suffix}": metric_row(
            {s: train[s]["param_bytes"] + train[s]["optimizer_state_bytes"] for s in sides}, "MiB", False
        ),
        f"train peak RSS above baseline ({steps} steps){suffix}": metric_row(
            {s: train[s]["peak_rss_delta_bytes"] for s in sides}, "MiB", False
        ),
    }


def worker_memory(
    model,
    workload: str,
    make_step: Callable[[], Callable[[], object]],
    make_other: Callable[[], Callable[[], object]],
    steps: int,
    trim: bool = False,
) -> dict:
    """What an A/B benchmark's memory worker reports for one side: the parameter bytes, then the
    peak RSS (`measure_peak_rss`) of `steps` training steps (`make_step()`, with the AdamW state's
    bytes) for `workload` "train", else of one call of `make_other()` (generation, inference)."""
    result = {"param_bytes": tensor_bytes(model.parameters())}
    if workload != "train":
        result.update(measure_peak_rss(make_other(), 1, trim=trim))
        return result
    step = make_step()
    result.update(measure_peak_rss(step, steps, trim=trim))
    result["optimizer_state_bytes"] = optimizer_state_bytes(step.optimizer)
    return result


def memory_worker_command(module: str, workload: list[str], args, options: list[str]) -> list[str]:
    """The command that reruns `python -m module` as a memory worker for `workload`
    (`--_memory-worker ...`), passing on the `options` of `args` (the ones it needs to rebuild the
    same model and inputs). `run_json_worker` runs it."""
    cmd = [sys.executable, "-m", module, "--_memory-worker", *workload]
    return cmd + [f"--{name.replace('_', '-')}={getattr(args, name)}" for name in options]


# --------------------------------------------------------------------------------------------
# Command lines
# --------------------------------------------------------------------------------------------


def comma_list(text: str) -> list[str]:
    """The stripped, non-empty items of a comma-separated list: "a, b,,c" -> ["a", "b", "c"]."""
    return [item.strip() for item in text.split(",") if item.strip()]


def parse_entries(value: str | None, known: Mapping) -> list[str]:
    """`--entries`: comma-separated names of `known` (all of them when empty), in the order given."""
    if not value:
        return list(known)
    names = comma_list(value)
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise ValueError(f"`--entries`: unknown {unknown}; choose from {list(known)} (comma-separated).")
    return list(dict.fromkeys(names))


def resolve(args, preset: dict) -> dict:
    """The preset's settings with every command-line flag that was given (not None) on top."""
    return {
        key: getattr(args, key) if getattr(args, key, None) is not None else value
        for key, value in preset.items()
    }


def preset_table(rows: Mapping[str, tuple]) -> tuple[dict[str, dict], dict[str, str]]:
    """A leaderboard's presets and their help from one table, a row per setting:
    `{name: (full value, smoke value, help)}` -> `({"full": {...}, "smoke": {...}}, {name: help})`."""
    presets = {
        "full": {name: full for name, (full, _, _) in rows.items()},
        "smoke": {name: smoke for name, (_, smoke, _) in rows.items()},
    }
    return presets, {name: text for name, (_, _, text) in rows.items()}


def add_preset_options(parser: argparse.ArgumentParser, presets: dict, helps: dict[str, str]) -> None:
    """A `--key` option for every setting in `helps`, typed like the value in `presets["full"]`, in
    a group of their own; absent from the parsed arguments unless given, so that `resolve` takes
    the preset's value. The help names both presets' values (`"full"` and `"smoke"`)."""
    full, smoke = presets["full"], presets["smoke"]
    group = parser.add_argument_group(
        "settings (default: the full preset's value, or the smoke preset's with --smoke)"
    )
    for key, text in helps.items():
        group.add_argument(
            f"--{key}",
            type=type(full[key]) if full[key] is not None else int,
            default=argparse.SUPPRESS,
            help=f"{text} (full: {full[key]}; smoke: {smoke[key]}).",
        )


def command_line(module: str, argv: list[str] | None = None) -> str:
    """The shell command that reproduces a run: `python -m module argv...` (None: this process's
    own arguments, `sys.argv[1:]`)."""
    return shlex.join(["python", "-m", module, *(sys.argv[1:] if argv is None else argv)])


def add_warmup_and_memory_options(p: argparse.ArgumentParser) -> None:
    """`--warmup`, `--memory-steps`, `--no-memory`: the same in every A/B benchmark."""
    p.add_argument("--warmup", type=int, default=2, help="warm-up calls per side before timing")
    p.add_argument("--memory-steps", type=int, default=3, help="training steps in the memory subprocess")
    p.add_argument("--no-memory", action="store_true", help="skip the memory subprocesses")


def add_machine_options(p: argparse.ArgumentParser) -> None:
    """`--threads`, `--seed`, `--wait-idle`: the same in every A/B benchmark."""
    p.add_argument("--threads", type=int, default=available_cores())
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        help="before each timed phase wait up to this many seconds for the CPU to go idle (PSI avg10 < 5%%)",
    )


# --------------------------------------------------------------------------------------------
# What the translation and SST-2 leaderboards share
# --------------------------------------------------------------------------------------------


def leaderboard_hardware() -> dict:
    """The machine and software a leaderboard ran on (recorded in results.json)."""
    import torch

    return {
        "cpu_model": cpu_model(),
        "cores_available": available_cores(),
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "loadavg_start": load_average(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        **versions("torch", "transformers"),
    }


def leaderboard_footer(result: dict, extra_commands: Sequence[str] = ()) -> list[str]:
    """The last lines of a leaderboard's results.md: the hardware line (`leaderboard_hardware`),
    seed, start and duration, then the commands: the leaderboard's, `extra_commands`, every entry's."""
    hw = result["hardware"]
    return [
        f"Hardware: {hw['cpu_model']}, {hw['cores_available']} cores available, {hw['torch_threads']} torch threads"
        + (f", GPU {hw['gpu']}" if hw["gpu"] else "")
        + f"; torch {hw['torch']}, transformers {hw['transformers']}. Seed {result['seed']}. "
        f"Started {result['started']}, {result['total_seconds']:.0f} s in all.",
        "",
        "## Commands",
        "",
        "```",
        result["command"],
        *extra_commands,
        *[f"{row['name']}: {row['command']}" for row in result["entries"]],
        "```",
        "",
    ]


def leaderboard_parser(
    description: str,
    data_dir: str,
    data_help: str,
    output_dir: str,
    entries: tuple[str | None, str],
    smoke_help: str,
    seed_help: str,
    presets: tuple[dict, dict[str, str]],
) -> argparse.ArgumentParser:
    """A fine-tuning leaderboard's parser with the options they all have: `--data_dir`,
    `--output_dir`, `--entries` (`entries`: its default and help), `--smoke`, `--seed`,
    `--num_threads`, and one per preset setting (`presets`: `preset_table`'s presets and help,
    `add_preset_options`); defaults shown in the help."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--data_dir", default=data_dir, help=data_help)
    parser.add_argument("--output_dir", default=output_dir, help="Where results and runs go.")
    parser.add_argument("--entries", default=entries[0], help=entries[1])
    parser.add_argument("--smoke", action="store_true", help=smoke_help)
    parser.add_argument("--seed", type=int, default=0, help=seed_help)
    parser.add_argument(
        "--num_threads", type=int, default=None, help="torch threads (default: torch's choice)."
    )
    add_preset_options(parser, *presets)
    return parser


def parse_leaderboard_args(
    parser: argparse.ArgumentParser, argv: list[str] | None, entries: Mapping, data_hint: str
) -> tuple[argparse.Namespace, list[str]]:
    """Parse a leaderboard's command line (`leaderboard_parser`) and start its logging.

    Returns:
        `(args, the entries to run)`; `parser.error` for unknown entries or a missing `--data_dir`
        (`data_hint` says where the data lives). `--num_threads` is applied here.
    """
    import torch

    args = parser.parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    try:
        names = parse_entries(args.entries, entries)
    except ValueError as err:
        parser.error(str(err))
    if not Path(args.data_dir).is_dir():
        parser.error(f"--data_dir {args.data_dir!r} is not a folder ({data_hint}).")
    if args.num_threads is not None:
        torch.set_num_threads(args.num_threads)
    return args, names


def start_leaderboard(output_dir: str | Path) -> tuple[Path, str, float, dict]:
    """Create the output folder and note the start: `(folder, start time (UTC, ISO), perf_counter
    reading, leaderboard_hardware())`."""
    import datetime

    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return folder, started, time.perf_counter(), leaderboard_hardware()


def run_entry_row(name: str, module: str, argv: list[str], run: Callable, failed: Mapping) -> dict:
    """One entry of a leaderboard, run in this process as `run(name, argv)`; its row, with the
    command that reproduces it (`python -m module argv`). A failing entry must not lose the others'
    results: its row is `failed` (name, label, ...) with the error, and the leaderboard goes on."""
    command = command_line(module, argv)
    logger.info("=== %s: %s", name, command)
    try:
        row = run(name, argv)
    except Exception as err:  # recorded in the row; `exit_if_failed` ends the leaderboard after all
        logger.exception("Entry %s failed.", name)
        row = {"name": name, **failed, "error": repr(err)}
    row["command"] = command
    return row


def write_results(output_dir: Path, result: dict, markdown_lines: Callable[[dict], list[str]]) -> str:
    """Write a leaderboard's results.json and results.md (the lines `markdown_lines(result)`);
    returns the markdown."""
    (output_dir / "results.json").write_text(json.dumps(result, indent=2, default=str))
    markdown = "\n".join(markdown_lines(result))
    (output_dir / "results.md").write_text(markdown, encoding="utf-8")
    return markdown


def training_fields(metrics: dict) -> dict:
    """The training part of a leaderboard row, from a fine-tuning run's final metrics: size,
    steps, epochs, seconds, whether the wall-clock budget ended it, and the training loss."""
    return {
        "num_parameters": metrics["num_parameters"],
        "train_steps": metrics["train_steps"],
        "train_epochs": metrics["train_epochs"],
        "train_seconds": metrics["train_runtime"],
        "train_budget_reached": metrics["train_budget_reached"],
        "train_loss": metrics.get("train_loss"),
    }


def exit_if_failed(rows: list[dict], output_dir: Path) -> None:
    """End a leaderboard with `SystemExit` naming the entries that failed (their rows hold `error`)."""
    failed = [row["name"] for row in rows if "error" in row]
    if failed:
        raise SystemExit(f"Entries failed: {failed}; see the log and {output_dir / 'results.json'}.")


def reuse_or_train_tokenizer(
    folder: Path, settings: dict, train: Callable[[], object]
) -> tuple[object, bool]:
    """The tokenizer saved in `folder` if it was trained with `settings`, else `train()` saved there.

    Returns:
        `(tokenizer, reused)`.
    """
    from transformers import AutoTokenizer

    stamp = folder / "leaderboard_settings.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == settings:
        logger.info("Reusing the tokenizer in %s (same settings).", folder)
        return AutoTokenizer.from_pretrained(folder), True
    tokenizer = train()
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder)
    stamp.write_text(json.dumps(settings, indent=2))
    logger.info("Trained and saved the shared tokenizer (%d tokens) to %s.", len(tokenizer), folder)
    return tokenizer, False


def translation_tokenizer(args, settings: dict, folder: Path) -> tuple[object, bool]:
    """Train (or reuse) the joint byte-level BPE tokenizer (BART's special tokens, `<mask>` included)
    on both sides of `args.data_dir`'s German-English training pairs: the translation benchmarks'
    shared tokenizer. `settings`: `vocab_size`, `max_train_samples`, `max_length`. Returns
    `(tokenizer, reused)`."""
    from training.tokenizer import BART_SPECIAL_TOKENS, train_tokenizer
    from training.translation_data import (
        TranslationDataArguments,
        ensure_eos,
        load_translation_dataset,
        sides,
    )

    data_args = TranslationDataArguments(
        data_dir=str(args.data_dir),
        validation_split="",
        test_split="",
        max_train_samples=settings["max_train_samples"],
    )
    stamp = {
        "data_dir": str(Path(args.data_dir).resolve()),
        "kind": "byte_bpe",
        "vocab_size": settings["vocab_size"],
        "max_train_samples": settings["max_train_samples"],
        "max_length": settings["max_length"],
    }

    def train():
        train_pairs = load_translation_dataset(data_args)["train"]
        tokenizer = train_tokenizer(
            sides(train_pairs, "de") + sides(train_pairs, "en"),
            kind="byte_bpe",
            vocab_size=settings["vocab_size"],
            special_tokens=BART_SPECIAL_TOKENS,
            model_max_length=settings["max_length"],
            padding_side="right",
        )
        ensure_eos(tokenizer)  # saved with it: every entry encodes "... </s>" identically
        return tokenizer

    return reuse_or_train_tokenizer(folder, stamp, train)
