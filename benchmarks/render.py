"""One renderer for every results folder of `benchmarks/results/`.

A results folder holds `results.json` (what a runner measured, with `"kind"` naming the runner)
and, optionally, `notes.md` (what a person wrote about the figures: analysis and history). Its
`README.md` is never written by hand: it is the runner's Markdown for the JSON, then the notes.

    python -m benchmarks.render                         # re-render every results README
    python -m benchmarks.render benchmarks/results/suite
    python -m benchmarks.render --check                 # exit 1 if a README is not its JSON's rendering

Each runner module named in `KINDS` has `markdown(result: dict, folder: Path) -> list[str]`; the
text and plot helpers below are the ones every runner uses.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from training.state.atomic import atomic_write_text

logger = logging.getLogger("benchmarks.render")

RESULTS_DIR = Path(__file__).resolve().parent / "results"
RESULT_FILE = "results.json"
NOTES_FILE = "notes.md"
README_FILE = "README.md"
# result "kind" -> the runner module whose `markdown(result, folder)` renders it
KINDS = {
    "speed": "benchmarks.speed",
    "leaderboard": "benchmarks.leaderboard",
    "gpu": "benchmarks.gpu",
}


def rendered(folder: Path) -> str:
    """The README of one results folder: its runner's Markdown for results.json, then notes.md."""
    folder = Path(folder)
    result = json.loads((folder / RESULT_FILE).read_text())
    kind = result.get("kind")
    if kind not in KINDS:
        raise ValueError(f"{folder / RESULT_FILE}: 'kind' must be one of {sorted(KINDS)}, got {kind!r}.")
    lines = importlib.import_module(KINDS[kind]).markdown(result, folder)
    notes = folder / NOTES_FILE
    text = "\n".join(lines).rstrip("\n") + "\n"
    if notes.exists():
        text += "\n" + notes.read_text().strip("\n") + "\n"
    return text


def write_results(folder: Path, result: dict) -> Path:
    """Write `result` as folder/results.json and render folder/README.md from it; returns the README."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / RESULT_FILE, json.dumps(result, indent=2, sort_keys=False) + "\n")
    readme = folder / README_FILE
    atomic_write_text(readme, rendered(folder))
    logger.info("Wrote %s", readme)
    return readme


def results_folders(root: Path = RESULTS_DIR) -> list[Path]:
    """Every folder under `root` that holds a results.json."""
    return sorted(p.parent for p in Path(root).rglob(RESULT_FILE))


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str | None = None) -> str:
    """A markdown table: the header, the rule, one line per row; every cell is a string.

    Args:
        align: one letter per column, "l" (rule `---`) or "r" (`---:`); None: every column "l".
            An empty cell is written `| |`.

    Raises:
        ValueError: for an `align` or a row whose length is not the header's.
    """
    align = "l" * len(header) if align is None else align
    if len(align) != len(header) or set(align) - {"l", "r"}:
        raise ValueError(f"`align` needs one of l/r per column ({len(header)}), got {align!r}.")

    def line(cells: Sequence[str]) -> str:
        if len(cells) != len(header):
            raise ValueError(f"A table row has {len(cells)} cells, the header {len(header)}: {cells!r}.")
        return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"

    rule = "|" + "".join("---:|" if a == "r" else "---|" for a in align)
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def percent(value) -> str:
    """A fraction as a percentage with one decimal ("12.5"), None as an em dash."""
    return "—" if value is None else f"{100 * value:.1f}"


def table(
    columns: Sequence[Sequence], rows: Iterable, align: str | int | None = None, failed: bool = False
) -> str:
    """A Markdown table from a column list: one `[header, key, format]` per column.

    Args:
        columns: `key` names a value of the row (a dict), or is a function of the row; `format` is a
            name in `FORMATS`, a format string applied to the value ("{:.2f} x"; None: "—"), a
            function of the value, or None (the value as it is). A string value is written as it is.
        rows: dicts.
        align: one l/r letter per column (`markdown_table`), or the number of leading left-aligned
            columns (the rest right-aligned); None: every column left-aligned.
        failed: a row with an "error" shows its "label" (else its first cell), then `failed: <error>`.
    """

    def cell(row, key, form) -> str:
        value = key(row) if callable(key) else row.get(key)
        if isinstance(value, str) or form is None:
            return str(value)
        if callable(form) or form in FORMATS:
            return (FORMATS.get(form) or form)(value)
        return "—" if value is None else form.format(value)

    def line(row) -> list[str]:
        if failed and "error" in row:
            first = row["label"] if "label" in row else cell(row, *columns[0][1:])
            return [first, f"failed: {row['error']}", *[""] * (len(columns) - 2)]
        return [cell(row, key, form) for _, key, form in columns]

    if isinstance(align, int):
        align = "l" * align + "r" * (len(columns) - align)
    return markdown_table([c[0] for c in columns], [line(row) for row in rows], align)


def fmt(value, digits: int = 2) -> str:
    """A table cell: floats with `digits` decimals, ints with thousands separators, None as an em dash."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def millions(n: int | None) -> str:
    """A parameter count in millions ("2.50M"), None as an em dash."""
    return "—" if n is None else f"{n / 1e6:.2f}M"


# a format name of a column list (`table`) -> its cell
FORMATS = {
    **{f"f{digits}": (lambda v, digits=digits: fmt(v, digits)) for digits in range(5)},
    "pct": percent,
    "M": millions,
}


def pyplot():
    """matplotlib's pyplot on the headless Agg backend (the benchmarks only write image files)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def label_bars(ax, bars, values: list[float | None]) -> None:
    """Write each value (one decimal) above its bar; None: no label."""
    for bar, value in zip(bars, values):
        if value is not None:
            ax.annotate(
                f"{value:.1f}",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=7,
            )


def bar_chart(
    path: Path,
    labels: list[str],
    series: dict[str, list[float | None]],
    title: str,
    ylabel: str,
    references: list[tuple[str, float]] = (),
    reference_name: str = "published",
) -> Path:
    """Grouped bars, one group per label and one bar per series; `references` as hatched grey bars.

    Missing values (None) leave a gap. Written as a PNG (matplotlib, headless).
    """
    plt = pyplot()
    names = list(series)
    width = 0.8 / max(1, len(names))
    n = len(labels) + len(references)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * n + 2), 4.8))
    for i, name in enumerate(names):
        xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(labels))]
        values = [v if v is not None else 0.0 for v in series[name]]
        bars = ax.bar(xs, values, width, label=name)
        label_bars(ax, bars, series[name])
    if references:
        xs = [len(labels) + j for j in range(len(references))]
        bars = ax.bar(xs, [v for _, v in references], 0.5, color="lightgrey", hatch="//", edgecolor="grey")
        bars.set_label(reference_name)
        label_bars(ax, bars, [value for _, value in references])
    ax.set_xticks(
        range(n), list(labels) + [name for name, _ in references], rotation=30, ha="right", fontsize=8
    )
    tallest = max(
        [v for values in series.values() for v in values if v is not None]
        + [v for _, v in references]
        + [0.0]
    )
    # room above the tallest bar for its value label and a one-row legend that covers no bar
    ax.set_ylim(0, 1.25 * tallest if tallest > 0 else 1.0)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper center", ncol=len(names) + bool(references))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    logger.info("Wrote %s", path)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Render results READMEs from their results.json.")
    p.add_argument("folders", nargs="*", type=Path, help="results folders, or above them (default: all)")
    p.add_argument("--check", action="store_true", help="only compare; exit 1 if a README differs")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    found = {folder: results_folders(folder) for folder in args.folders or [RESULTS_DIR]}
    if not all(found.values()):
        p.error(f"no {RESULT_FILE} in or under {', '.join(str(f) for f, rs in found.items() if not rs)}")
    stale = []
    for folder in [folder for folders in found.values() for folder in folders]:
        text = rendered(folder)
        readme = folder / README_FILE
        if args.check:
            if not readme.exists() or readme.read_text() != text:
                stale.append(str(readme))
        else:
            atomic_write_text(readme, text)
            logger.info("Rendered %s", readme)
    if stale:
        logger.error("Not the rendering of their results.json: %s", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
