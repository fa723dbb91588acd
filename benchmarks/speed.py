"""The speed runner: hf_lm measured against transformers' reference (or against itself), one entry
of `benchmarks.speed_entries.ENTRIES` at a time, each in a fresh process (its log in the output
folder's logs/; a failure is recorded and the others go on). How it measures and what each entry
measures: docs/benchmarks.md ("How the speed runner measures").

    python -m benchmarks.speed                                   # the suite: every family, peak, compile
    python -m benchmarks.speed --smoke --output_dir out/smoke    # tiny models: the plumbing, in a minute
    python -m benchmarks.speed --entries sparse --set contexts=1024,4096,8192 --output_dir benchmarks/results/sparse
    python -m benchmarks.speed --list                            # the entries and their options
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from .measure import (
    available_cores,
    environment,
    git_revision,
    parse_entries,
    run_process,
    typed,
)
from .render import write_results

logger = logging.getLogger("benchmarks.speed")

SUITE = ("peak", "gpt2", "llama", "bert", "t5", "bart", "compile")
# every entry's options have these; `profile`: a folder for profiler tables ("": none)
COMMON = {"threads": available_cores(), "seed": 0, "wait_idle": 0.0, "no_memory": False, "profile": ""}


@dataclass(frozen=True)
class Entry:
    """One entry of the speed runner.

    Attributes:
        about: what it measures, against what (one line).
        run: `(options) -> numbers`, in a process of its own (`options`: a namespace).
        report: `(numbers, the whole result) -> Markdown lines`; None: the runner's tables cover it.
        options: the full run's options; `smoke`: the ones `--smoke` changes.
        worker: `(options, *args) -> dict`, a measurement in a fresh process (`--_worker`).
    """

    about: str
    run: Callable
    report: Callable | None
    options: dict
    smoke: dict = field(default_factory=dict)
    worker: Callable | None = None


def entries() -> dict[str, Entry]:
    from .speed_entries import ENTRIES

    return ENTRIES


def entry_options(name: str, smoke: bool, common: dict, overrides: dict[str, str]) -> dict:
    """An entry's options: its full run's, `--smoke`'s on top, the common flags, then `--set`."""
    entry = entries()[name]
    return overridden({**COMMON, **entry.options, **(entry.smoke if smoke else {}), **common}, overrides)


def overridden(options: dict, overrides: dict[str, str]) -> dict:
    """`options` with the `--set` values of the keys it has, each typed like the value it replaces."""
    for key, text in overrides.items():
        if key in options:
            try:
                options[key] = typed(text, options[key])
            except ValueError as err:
                raise ValueError(f"`--set {key}={text}`: {err}") from None
    return options


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--entries", default=",".join(SUITE), help="comma-separated entry names (--list)")
    p.add_argument("--smoke", action="store_true", help="each entry's smoke options: tiny sizes, few rounds")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="change an option")
    p.add_argument("--threads", type=int, default=None, help=f"torch threads (default {COMMON['threads']})")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--wait_idle", type=float, default=None, help="before each timed phase wait up to this many seconds "
        "for an idle CPU (PSI avg10 < 5%%)"
    )  # fmt: skip
    p.add_argument("--no_memory", action="store_true", default=None, help="skip the memory subprocesses")
    p.add_argument("--profile", default=None, metavar="DIR", help="also write profiler tables to DIR")
    p.add_argument("--timeout", type=float, default=None, help="seconds per entry (default 3600; smoke 600)")
    p.add_argument("--output_dir", help="results.json, README.md, logs (default out/speed[_smoke])")
    p.add_argument("--title", default=None, help="the README's title (default: the folder's)")
    p.add_argument("--list", action="store_true", help="list the entries and the options they would run with")
    p.add_argument("--_entry", help=argparse.SUPPRESS)
    p.add_argument("--_worker", nargs="+", help=argparse.SUPPRESS)
    p.add_argument("--_options", help=argparse.SUPPRESS)
    p.add_argument("--_out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.common = {k: getattr(args, k) for k in COMMON if getattr(args, k) is not None}
    try:
        args.names = parse_entries(args.entries, entries())
        args.overrides = dict(item.partition("=")[::2] for item in args.set)
        # `--set threads=1` is `--threads 1` (the README's environment too); every value typed here, not mid-run
        args.common.update(overridden({k: COMMON[k] for k in args.overrides if k in COMMON}, args.overrides))
        for name in args.names:
            entry_options(name, args.smoke, args.common, args.overrides)
    except ValueError as err:
        p.error(str(err))
    if (args.common.get("threads", 1) or 0) < 1:  # `none` too
        p.error(f"`--threads` must be at least 1, got {args.common['threads']}.")
    known = {key for name in args.names for key in entry_options(name, args.smoke, {}, {})}
    unknown = set(args.overrides) - known
    if unknown:
        p.error(f"`--set`: no selected entry has the option(s) {sorted(unknown)}.")
    if args.timeout is None:
        args.timeout = 600.0 if args.smoke else 3600.0
    args.output_dir = args.output_dir or "out/speed" + "_smoke" * args.smoke  # a full run's folder stays
    return args


def run_in_process(name: str, options: dict, out: Path, timeout: float) -> dict:
    """Run one entry in a fresh process; its numbers, or `{"error": ...}`, with the run's wall time."""
    path = out / f"{name}.json"
    path.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "benchmarks.speed", "--_entry", name, "--_options", json.dumps(options)]
    (out / "logs").mkdir(exist_ok=True)
    run = run_process([*cmd, "--_out", str(path)], out / "logs" / f"{name}.log", timeout)
    data = {"error": run["error"]} if run["error"] else json.loads(path.read_text())
    path.unlink(missing_ok=True)
    return {"options": options, **data, "wall_s": run["wall_s"]}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    args = parse_args(argv)
    if args._entry or args._worker:
        options = json.loads(args._options)
        if args._worker:
            data = entries()[args._worker[0]].worker(SimpleNamespace(**options), *args._worker[1:])
        else:  # an entry, in this process
            import torch

            torch.set_num_threads(options["threads"])
            data = entries()[args._entry].run(SimpleNamespace(**options))
        if data is not None:  # None: a torchrun process other than the first
            text = json.dumps(data, default=str)
            if args._out:
                Path(args._out).write_text(text)
            else:
                print(text)
        return 0
    if args.list:
        for name, entry in entries().items():
            print(f"{name}: {entry.about}\n  {entry_options(name, args.smoke, args.common, args.overrides)}")
        return 0
    import torch

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    options = {name: entry_options(name, args.smoke, args.common, args.overrides) for name in args.names}
    threads = sorted({o["threads"] for o in options.values()})  # what the entries run with (serve: 1)
    torch.set_num_threads(threads[-1])
    threads = threads[0] if len(threads) == 1 else "/".join(map(str, threads))
    previous = out / "results.json"  # a folder re-run keeps its title
    title = args.title or (json.loads(previous.read_text()).get("title") if previous.exists() else None)
    result = {
        "kind": "speed",
        "title": title,
        "mode": "smoke" if args.smoke else "full",
        "command": shlex.join(["python", "-m", "benchmarks.speed", *argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "git": git_revision(short=True, dirty_mark=" (with uncommitted changes)", missing="unknown"),
        "environment": environment(threads),
        "entries": {},
    }
    t0 = time.perf_counter()
    for name in args.names:
        logger.info("%s: %s", name, entries()[name].about)
        data = result["entries"][name] = run_in_process(name, options[name], out, args.timeout)
        if data.get("error"):
            logger.warning("%s failed: %s (log: %s)", name, data["error"], out / "logs" / f"{name}.log")
        else:
            logger.info("%s done in %.0fs", name, data["wall_s"])
    result["wall_s"] = time.perf_counter() - t0
    readme = write_results(out, result)
    print(readme.read_text())
    return 1 if any(data.get("error") for data in result["entries"].values()) else 0


def markdown(result: dict, folder: Path) -> list[str]:
    """The README of a speed results folder: what ran where, then each entry's report."""
    from .speed_entries import ENTRIES, suite_tables

    names, env = list(result["entries"]), result.get("environment")
    when = [result["date"]] if result.get("date") else []
    if env:
        when += [
            f"torch {env['torch']}, transformers {env['transformers']}, {env['threads']} threads, "
            f"{env['cpu_model']} ({env['cpu_capability']}), {env['cores_available']} cores available",
            f"Python {env['python']}",
        ]
    if result.get("git"):
        when.append(f"hf_lm at {result['git']}")
    lines = [
        f"# {result.get('title') or 'Speed: ' + ', '.join(names)}"
        + (" (smoke run)" if result.get("mode") == "smoke" else ""),
        "",
        f"`{result['command']}`",
        "",
        *([("; ".join(when) + "."), ""] if when else []),
    ]
    lines += suite_tables(result)
    for name, data in result["entries"].items():
        if data.get("error"):
            lines += [f"## {name}", "", f"Failed: {data['error']}", ""]
        elif name in ENTRIES and ENTRIES[name].report:
            lines += ENTRIES[name].report(data, result)
    return lines


if __name__ == "__main__":
    sys.exit(main())
