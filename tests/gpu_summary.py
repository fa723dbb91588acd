"""The pass/fail table of a `pytest -m cuda` run (`make gpu-check`), a pytest plugin that
`conftest.py` registers.

Every test marked `cuda` is one row: its id in `tests/test_cuda.py` is `group/check/precision`
(`loop/gpt/bf16`, `families/gpt-causal-lm/compiled_static/fp32`), its detail the summary the case
returned (`record_property("detail", ...)`), a failure's first line, or the reason it was skipped.
When at least one ran, the table is printed at the end of the run and written to
`<--gpu-check-dir>/summary.md`, with the rows as JSON in `summary.json`. When the run selected
cuda tests alone and there is no CUDA device, it says so in one line (pytest exits 0: every test
was skipped).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest
import torch

RESULTS = ("pass", "FAIL", "skipped")
CUDA_MARK = "gpu_check_row"


@dataclass
class Row:
    group: str
    check: str
    precision: str
    result: str = "pass"  # one of RESULTS
    seconds: float = 0.0
    detail: str = ""


def row_of(nodeid: str) -> Row:
    """The row a test's node id names: `...::test_x[group/check/precision]` (a check's own name may
    hold a slash: `gpt-causal-lm/compiled_static`); any other cuda test is a row of its own."""
    name, _, param = nodeid.partition("[")
    parts = param.rstrip("]").split("/")
    if len(parts) < 3:
        return Row("-", nodeid.split("::")[-1], "-")
    return Row(parts[0], "/".join(parts[1:-1]), parts[-1])


def _first_line(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return (text.strip().splitlines() or [""])[0][:200]


def _skip_reason(report: pytest.TestReport) -> str:
    if isinstance(report.longrepr, tuple):  # (file, line, "Skipped: reason")
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    return _first_line(report)


class GpuCheckSummary:
    """Marks the cuda tests at collection, collects their reports (on the controller under xdist) and
    writes the table."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.rows: dict[str, Row] = {}
        self.other_tests: set[str] = set()

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        # a mark every report of the item carries, also from an xdist worker to the controller
        for item in items:
            if item.get_closest_marker("cuda") is not None:
                item.user_properties.append((CUDA_MARK, True))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if CUDA_MARK not in dict(report.user_properties):
            self.other_tests.add(report.nodeid)
            return
        row = self.rows.setdefault(report.nodeid, row_of(report.nodeid))
        if report.skipped:
            row.result, row.detail = "skipped", _skip_reason(report)
        elif report.failed:
            if row.result != "FAIL":  # the first failure (setup or call) explains the row
                where = "" if report.when == "call" else f"{report.when}: "
                row.detail = where + _first_line(report)
            row.result = "FAIL"
        elif report.when == "call":
            row.seconds = report.duration
            row.detail = str(dict(report.user_properties).get("detail", ""))

    def device_name(self) -> str:
        if self.config.getoption("gpu_check_device") == "cuda" and torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
        return "cpu"

    def table(self) -> str:
        rows = list(self.rows.values())
        lines = [
            f"# gpu-check on {self.device_name()} (torch {torch.__version__})",
            "",
            "| group | check | precision | result | seconds | detail |",
            "|---|---|---|---|---|---|",
        ]
        for r in rows:
            result = "**FAIL**" if r.result == "FAIL" else r.result
            detail = r.detail.replace("|", "\\|")
            lines.append(f"| {r.group} | {r.check} | {r.precision} | {result} | {r.seconds:.1f} | {detail} |")
        counts = {result: sum(r.result == result for r in rows) for result in RESULTS}
        lines += ["", f"{counts['pass']} passed, {counts['FAIL']} failed, {counts['skipped']} skipped."]
        return "\n".join(lines) + "\n"

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "summary.md").write_text(self.table())
        rows = [asdict(r) for r in self.rows.values()]
        summary = {"device": self.device_name(), "torch": torch.__version__, "rows": rows}
        (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.rows:
            return
        if all(r.result == "skipped" for r in self.rows.values()):
            no_cuda = self.config.getoption("gpu_check_device") == "cuda" and not torch.cuda.is_available()
            if no_cuda and not self.other_tests:
                terminalreporter.write_line(
                    f"gpu-check: no CUDA device on this machine, so there is nothing to check (the "
                    f"{len(self.rows)} cuda tests were skipped; `--gpu-check-device cpu` runs them on the CPU)."
                )
            return
        folder = Path(self.config.getoption("gpu_check_dir"))
        if not folder.is_absolute():
            folder = self.config.rootpath / folder
        self.write(folder)
        terminalreporter.write_sep("=", "gpu-check")
        for line in self.table().splitlines():
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"(also in {folder / 'summary.md'} and summary.json)")
