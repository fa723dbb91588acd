"""What the benchmarks measure with, one version of each (speed, GPU and leaderboard runners): the
machine, A/B timing, peak memory in a fresh process, FLOPs (MFU), command lines. Only the standard
library is imported at module level (torch inside the helpers), so that parent processes stay light.
"""

from __future__ import annotations

import gc
import importlib
import json
import math
import os
import platform
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

# --- The machine and the software ---


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
    """HEAD's commit (abbreviated with `short`), `dirty_mark` appended when tracked files changed;
    `missing` where git or the repository cannot be read."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        head = git("rev-parse", *(["--short"] if short else []), "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return missing
    return head + (dirty_mark if dirty else "")


# --- The device: GPU or CPU ---

DEVICE_CHOICES = ("auto", "cuda", "cpu")


def resolve_device(name: str) -> str:
    """ "auto" -> "cuda" when a CUDA GPU is visible, else "cpu"; ValueError for another name or an absent GPU."""
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
    """A function that waits for the work queued on `device` (GPU kernels run asynchronously: timers
    call it before each clock read); on a CPU it does nothing."""
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
    """Wall seconds per call of each function, one per round: `time_alternating`'s wall times."""
    return {name: s["wall_s"] for name, s in time_alternating(fns, rounds, reps, warmup, synchronize).items()}


# --- A/B timing on a CPU: contention, CPU time, summaries ---


def cpu_pressure() -> dict | None:
    """Linux PSI for the CPU (`some`: the share of time a runnable task waited for a CPU); anything
    else running shows up here, and it distorts timings, OpenMP-threaded ones badly."""
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


def time_alternating(
    fns: Mapping[str, Callable[[], object]],
    rounds: int,
    reps: int,
    warmup: int,
    synchronize: Callable[[], None] = lambda: None,
    stop: Callable[[int], bool] = lambda r: False,
) -> dict:
    """Per call of each function, one sample per round (`reps` calls between two clock reads, each
    read after `synchronize()`), the order reversed every round after `warmup` untimed calls each:
    wall seconds, this process's user/system CPU seconds and minor page faults (getrusage). `stop(r)`
    true ends the rounds before round r."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    synchronize()
    names = list(fns)
    samples = {name: {"wall_s": [], "user_s": [], "sys_s": [], "minor_faults": []} for name in names}
    for r in range(rounds):
        if r and stop(r):
            break
        for name in names if r % 2 == 0 else names[::-1]:
            gc.collect()
            synchronize()
            ru0 = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            for _ in range(reps):
                fns[name]()
            synchronize()
            wall = time.perf_counter() - t0
            ru1 = resource.getrusage(resource.RUSAGE_SELF)
            s = samples[name]
            s["wall_s"].append(wall / reps)
            s["user_s"].append((ru1.ru_utime - ru0.ru_utime) / reps)
            s["sys_s"].append((ru1.ru_stime - ru0.ru_stime) / reps)
            s["minor_faults"].append((ru1.ru_minflt - ru0.ru_minflt) / reps)
    return samples


def summarize(samples: dict, units_per_call: float) -> dict:
    """Median, min, max seconds per call, throughput (`units_per_call` / median), median CPU times
    and page faults of one side's `time_alternating` samples."""
    wall = samples["wall_s"]
    med = statistics.median(wall)
    return {
        "median_s": med,
        "min_s": min(wall),
        "max_s": max(wall),
        "throughput": units_per_call / med,
        "median_user_s": statistics.median(samples["user_s"]),
        "median_sys_s": statistics.median(samples["sys_s"]),
        "median_cpu_s": statistics.median(u + s for u, s in zip(samples["user_s"], samples["sys_s"])),
        "median_minor_faults": statistics.median(samples["minor_faults"]),
    }


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


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None where either is missing or not finite, or b is zero."""
    if a is None or b is None or not b or not math.isfinite(a) or not math.isfinite(b):
        return None
    return a / b


def error_text(err: BaseException) -> str:
    """A failure as one line for a table or a JSON field: its type, message, at most 400 characters."""
    lines = f"{type(err).__name__}: {err}".strip().splitlines()
    return " ".join(line.strip() for line in lines[:3])[:400]


# --- Peak memory, measured in a fresh process ---


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
    """Hand the allocator's free memory back to the kernel (glibc `malloc_trim(0)`): a dropped model's
    pages would otherwise stay resident and be reused by the workload, whose peak above baseline then reads too low."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
        return True
    except (OSError, AttributeError):  # not glibc
        return False


def measure_peak_rss(fn: Callable[[], object], calls: int, trim: bool = False) -> dict:
    """The peak RSS of `calls` calls of `fn` above the RSS just before them (garbage collected first;
    with `trim`, `trim_heap` too): `baseline_rss_bytes`, `peak_rss_bytes`, `peak_rss_delta_bytes`,
    `peak_method`, and with `trim` `heap_trimmed`."""
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
    """Run a worker process (offline) that prints its result as JSON on its last stdout line;
    RuntimeError naming `what`, with the end of its stderr, if it fails."""
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


def run_process(cmd: list[str], log_path: Path, timeout: float, env: Mapping[str, str] | None = None) -> dict:
    """Run `cmd` from the repository root in its own session, output to `log_path` (on timeout the whole
    group is killed): `command`, `log`, `wall_s`, `error` (None, the exit status and the log's telling line, or the timeout)."""
    t0 = time.perf_counter()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", **(env or {}))
    with open(log_path, "w") as log:
        log.write("$ " + shlex.join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=timeout)
            error = None if rc == 0 else f"exit status {rc}: {last_error_line(log_path)}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            error = f"timed out after {timeout:.0f}s"
    return {
        "command": shlex.join(cmd),
        "log": str(log_path),
        "wall_s": time.perf_counter() - t0,
        "error": error,
    }


def last_error_line(log_path: Path) -> str:
    """The most telling line of a failed run's log: the exception, or else the last line."""
    lines = [line.strip() for line in Path(log_path).read_text(errors="replace").splitlines() if line.strip()]
    for line in reversed(lines):
        if "Error" in line or "error" in line or "FAILED" in line or "disagree" in line:
            return line[:300]
    return lines[-1][:300] if lines else "no output"


# --- FLOPs: one training step's (counted), the machine's peak (measured); MFU is their quotient ---
# Model FLOP/s utilization (PaLM, Chowdhery et al. 2022, appendix B) counts only the model's matrix
# multiplications. FlopCounterMode has no formula for CPU's fused attention kernel
# (`aten._scaled_dot_product_flash_attention_for_cpu`, which `F.scaled_dot_product_attention` runs on
# a CPU) and would count attention as zero; `cpu_sdpa_formulas` adds torch's own SDPA formulas for
# it. Like torch's GPU formulas they count the full T x T score matrix, causal or not.


def cpu_sdpa_formulas() -> dict:
    """FlopCounterMode formulas for the CPU flash-attention kernel and its backward (passed shapes)."""
    import torch
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    aten = torch.ops.aten

    def forward(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return sdpa_flop_count(query_shape, key_shape, value_shape)

    def backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs):
        return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)

    return {
        aten._scaled_dot_product_flash_attention_for_cpu: forward,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: backward,
    }


def count_flops(fn: Callable[[], object]) -> dict:
    """Run `fn` once under FlopCounterMode (with the CPU attention formulas): `{"total", "by_op"}`."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False, custom_mapping=cpu_sdpa_formulas())
    with counter:
        fn()
    by_op = {str(op): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    return {"total": int(counter.get_total_flops()), "by_op": by_op}


def count_train_step_flops(model, batch: dict) -> dict:
    """FLOPs of one training step's forward (with labels) + backward, not the optimizer's (`count_flops`'s
    dict plus `"counted"`); the gradients are cleared afterwards, the model left as it was."""
    was_training = model.training
    model.train()
    result = count_flops(lambda: model(**batch).loss.backward())
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    result["counted"] = (
        "forward (with labels) + backward, torch.utils.flop_counter.FlopCounterMode (+ CPU SDPA formulas): "
        "matmuls and attention only, full T x T scores; optimizer step not counted"
    )
    return result


def analytic_decoder_train_flops(
    matmul_params: int, num_layers: int, hidden_size: int, batch: int, seq: int, fused_attention: bool = True
) -> int:
    """Forward + backward FLOPs of a decoder-only Transformer as FlopCounterMode counts them:
    6 N B T (N: weights inside matmuls, a tied lm head once more; Kaplan et al. 2020) + 14 L d B T^2
    for attention at full T x T (the fused CPU kernel's backward recomputes Q K^T; eager: 12, PaLM's)."""
    attention = 14 if fused_attention else 12
    return 6 * matmul_params * batch * seq + attention * num_layers * hidden_size * batch * seq * seq


def measure_peak_flops(
    sizes: tuple[int, ...] = (1024, 2048, 4096),
    repeats: int = 5,
    min_time: float = 0.25,
    threads: int | None = None,
    dtype=None,
    seed: int = 0,
    device="cpu",
) -> dict:
    """The best FLOP/s of square `torch.mm` (2 n^3 FLOPs) over `sizes` on `device` in `dtype` (default
    fp32): each size warmed up, a sample calibrated to last `min_time` s, the best of `repeats` samples
    (a shared machine only ever makes a sample slower). ValueError for empty sizes or repeats < 1."""
    import torch

    dtype = torch.float32 if dtype is None else dtype
    if threads is not None:
        torch.set_num_threads(threads)
    if not sizes or min(sizes) < 1 or repeats < 1:
        raise ValueError("sizes must be positive and repeats >= 1")
    device = torch.device(device)
    synchronize = device_synchronizer(device)
    g = torch.Generator().manual_seed(seed)  # on the CPU: the same operands on every device

    def time_mm(a, b, out, iters: int) -> float:
        synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            torch.mm(a, b, out=out)
        synchronize()  # a GPU queues the multiplications: wait for them before reading the clock
        return time.perf_counter() - t0

    by_size = {}
    for n in sizes:
        a, b = (torch.randn(n, n, generator=g).to(device=device, dtype=dtype) for _ in range(2))
        out = torch.empty(n, n, dtype=dtype, device=device)
        once = min(time_mm(a, b, out, 1), time_mm(a, b, out, 1))  # the first call warms up
        iters = max(1, int(min_time / max(once, 1e-9)))
        samples = [time_mm(a, b, out, iters) / iters for _ in range(repeats)]
        by_size[n] = {"flops": 2 * n**3 / min(samples), "iters": iters, "samples_s": samples}
    best = max(by_size, key=lambda n: by_size[n]["flops"])
    return {
        "peak_flops": by_size[best]["flops"],
        "best_size": best,
        "by_size": by_size,
        "threads": torch.get_num_threads(),
        "dtype": str(dtype).replace("torch.", ""),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "repeats": repeats,
        "min_time_s": min_time,
        "method": "square torch.mm(out=...), 2 n^3 FLOPs; calibrated iterations per sample (device "
        "synchronized before each clock read); best sample per size, best size",
    }


# --- Command lines ---


def comma_list(text: str) -> list[str]:
    """The stripped, non-empty items of a comma-separated list: "a, b,,c" -> ["a", "b", "c"]."""
    return [item.strip() for item in text.split(",") if item.strip()]


def typed(text: str, like):
    """A command-line value as the type of `like`, its default: a bool from true/false/1/0/yes/no;
    "none" is None (but for text); a list or tuple from comma-separated items typed like its first; a
    number, an int where the text reads as one, for a default of None."""
    if isinstance(like, bool):  # a switch is on or off, never None
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(f"expected true or false, got {text!r}")
        return text.lower() in ("true", "1", "yes")
    if text.lower() == "none" and not isinstance(like, str):
        return None
    if isinstance(like, (list, tuple)):
        return type(like)(typed(item, like[0] if like else "") for item in comma_list(text))
    if like is None:
        return int(text) if text.strip().lstrip("+-").isdigit() else float(text)
    return type(like)(text)


def parse_entries(value: str | None, known: Mapping) -> list[str]:
    """`--entries`: comma-separated names of `known` (all of them when empty), in the order given."""
    if not value:
        return list(known)
    names = comma_list(value)
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise ValueError(f"`--entries`: unknown {unknown}; choose from {list(known)} (comma-separated).")
    return list(dict.fromkeys(names))


def command_line(module: str, argv: list[str] | None = None) -> str:
    """The shell command that reproduces a run: `python -m module argv...` (None: this process's
    own arguments, `sys.argv[1:]`)."""
    return shlex.join(["python", "-m", module, *(sys.argv[1:] if argv is None else argv)])
