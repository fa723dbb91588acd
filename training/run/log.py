"""What a run reports while it trains: `metrics.csv`, the trackers, the progress bar's ETA and the
loss curve's data.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import logging
from pathlib import Path

from ..state.atomic import atomic_write_text
from ..state.resume import run_settings

logger = logging.getLogger(__name__)

CSV_FIELDS = (
    "step",
    "epoch",
    "loss",
    "learning_rate",
    "grad_norm",
    "eval_loss",
    "eval_perplexity",
    "eval_bits_per_token",
    "eval_bits_per_character",
    "eval_bits_per_word",
    "eval_mlm_accuracy",
    "eval_pseudo_perplexity",
    "eval_token_accuracy",
    "tokens",
    "seconds",
)


class CsvLog:
    """`metrics.csv` written by the main process; a resumed run drops the rows after its step.

    Rows are appended as they come; the file is rewritten (atomically) only when rows are dropped,
    at a resume or a rollback. A row cut short by a kill while it was appended is dropped on reading.
    """

    def __init__(self, path: Path, resume_step: int | None, enabled: bool) -> None:
        self.path, self.enabled, self.rows = path, enabled, []
        if resume_step is not None and path.is_file():
            self.rows = [r for r in _read_csv_rows(path) if int(r["step"]) <= resume_step]
        self._rewrite()

    def _rewrite(self) -> None:
        if self.enabled:
            text = io.StringIO()
            writer = csv.DictWriter(text, fieldnames=CSV_FIELDS)
            writer.writeheader()
            writer.writerows(self.rows)
            atomic_write_text(self.path, text.getvalue())

    def truncate(self, step: int) -> None:
        """Drop the rows after `step` (a rollback to the checkpoint of `step`)."""
        self.rows = [r for r in self.rows if int(r["step"]) <= step]
        self._rewrite()

    def write(self, row: dict) -> None:
        row = {k: row.get(k, "") for k in CSV_FIELDS}
        self.rows.append(row)
        if self.enabled:
            with open(self.path, "a", newline="") as f:
                csv.DictWriter(f, fieldnames=CSV_FIELDS).writerow(row)

    def curves(self) -> dict[str, tuple[list[int], list[float]]]:
        curves = {}
        for name, column in (("train", "loss"), ("eval", "eval_loss")):
            points = [
                (int(r["step"]), float(r[column])) for r in self.rows if r.get(column) not in ("", None)
            ]
            if points:
                curves[name] = ([s for s, _ in points], [v for _, v in points])
        return curves


def _read_csv_rows(path: Path) -> list[dict]:
    """The rows of a `metrics.csv`, without a last line cut short (no newline: a kill mid-append) or
    a row whose step is not an integer."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    return [r for r in csv.DictReader(io.StringIO(text, newline="")) if (r.get("step") or "").isdigit()]


def trackers(train_args) -> list[str]:
    names = []
    if "tensorboard" in train_args.trackers:
        if importlib.util.find_spec("tensorboard") or importlib.util.find_spec("tensorboardX"):
            names.append("tensorboard")
        else:
            logger.warning("report_to has 'tensorboard' but the package is not installed: skipped.")
    return names


def hparams(*args_objects) -> dict:
    """Flat scalar hyperparameters for the trackers (tensorboard takes scalars and strings only)."""
    return {
        key: value if isinstance(value, (int, float, str, bool)) else str(value)
        for key, value in run_settings(*args_objects).items()
    }


def projected_steps(start_step: int, step: int, max_steps: int, elapsed: float, budget_s: float) -> int:
    """The step at which a run with a wall-clock budget will stop, at the pace so far (evaluations
    included): `max_steps` if that comes first. The progress bar's total, so its ETA is the budget's."""
    done = step - start_step
    if done <= 0 or elapsed <= 0:
        return max_steps
    return max(step, min(max_steps, start_step + int(done * budget_s / elapsed)))


def log_step(bar, row: dict, step: int, max_steps: int) -> None:
    """The training loss of a logged step, on the progress bar and in the log."""
    bar.set_postfix(loss=f"{row['loss']:.4f}")
    logger.info("step %d/%d  loss %.4f  lr %.2e", step, max_steps, row["loss"], row["learning_rate"])


def log_evaluation(step: int, evaluation: dict) -> None:
    logger.info(
        "step %d  %s",
        step,
        "  ".join(f"{k.removeprefix('eval_')} {v:.4f}" for k, v in evaluation.items() if v is not None),
    )
