"""Classification accuracy (and precision/recall/F1), as an `evaluate` metric module.

Load it offline from this folder (or this file); nothing is downloaded:

    >>> import evaluate
    >>> accuracy = evaluate.load("hf_lm/metrics/accuracy")
    >>> accuracy.compute(predictions=[0, 1, 1, 0], references=[0, 1, 0, 0])
    {'accuracy': 0.75, 'precision': 0.5, 'recall': 1.0, 'f1': 0.6666666666666666}

The same keys and definitions as the Hub's `accuracy` and `f1` metrics (which need scikit-learn
and a download); this one needs only numpy, and depends on nothing else in hf_lm because
`evaluate` copies the script alone into its modules cache.
"""

from __future__ import annotations

import datasets
import evaluate
import numpy as np

_DESCRIPTION = """\
Accuracy is the share of predictions equal to their reference: (TP + TN) / (TP + TN + FP + FN) for
two classes. Precision, recall and F1 come with it: for two classes those of the positive class
(`average="binary"`, the positive label being `pos_label`); for more, their unweighted mean over
the classes (`average="macro"`) or the mean weighted by each class's number of references
(`average="weighted"`). A ratio with a zero denominator (no positive prediction, say) counts as
0, as scikit-learn's `zero_division=0` does.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of int): predicted class ids.
    references (list of int): true class ids.
    normalize (bool): accuracy as a fraction (default) or as the number of correct predictions.
    sample_weight (list of float): a weight per example (default 1 each), in every returned value.
    average (str or None): "auto" (default: "binary" when every label is 0 or 1, else "macro"),
        "binary", "macro", "weighted", or None for accuracy only.
    pos_label (int): the positive class of `average="binary"` (default 1).
Returns:
    accuracy (float), and unless `average` is None: precision, recall, f1 (floats).
Examples:
    >>> accuracy = evaluate.load("hf_lm/metrics/accuracy")
    >>> accuracy.compute(predictions=[0, 2, 1, 2], references=[0, 1, 1, 2], average=None)
    {'accuracy': 0.75}
"""

AVERAGES = ("auto", "binary", "macro", "weighted", None)


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator elementwise, 0 where the denominator is 0."""
    out = np.zeros_like(numerator, dtype=np.float64)
    np.divide(numerator, denominator, out=out, where=denominator != 0)
    return out


class Accuracy(evaluate.Metric):
    """Accuracy plus binary or class-averaged precision, recall and F1 (numpy only)."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}
            ),
            reference_urls=["https://huggingface.co/spaces/evaluate-metric/accuracy"],
        )

    def _compute(
        self,
        predictions,
        references,
        normalize: bool = True,
        sample_weight=None,
        average: str | None = "auto",
        pos_label: int = 1,
    ) -> dict:
        if average not in AVERAGES:
            raise ValueError(f"`average` must be one of {list(AVERAGES)}, got {average!r}.")
        predictions = np.asarray(predictions, dtype=np.int64)
        references = np.asarray(references, dtype=np.int64)
        weight = (
            np.ones(len(references), dtype=np.float64)
            if sample_weight is None
            else np.asarray(sample_weight, dtype=np.float64)
        )
        if weight.shape != references.shape:
            raise ValueError(
                f"`sample_weight` needs one weight per example ({len(references)}), got shape {weight.shape}."
            )
        if len(references) == 0:
            raise ValueError("No examples: `predictions` and `references` are empty.")

        correct = float((weight * (predictions == references)).sum())
        result = {"accuracy": correct / float(weight.sum()) if normalize else correct}
        if average is None:
            return result

        labels = np.union1d(predictions, references)  # sorted: every class seen on either side
        if average == "auto":
            average = "binary" if np.isin(labels, (0, 1)).all() else "macro"
        if average == "binary":
            if len(labels) > 2 or (len(labels) == 2 and pos_label not in labels):
                raise ValueError(
                    f"`average='binary'` needs two classes, one of them pos_label={pos_label}, got labels "
                    f"{labels.tolist()}; use average='macro' or 'weighted', or set `pos_label`."
                )
            labels = np.asarray([pos_label])

        # per-class counts as (K,) vectors: true positives, predicted positives, actual positives
        is_pred = predictions[None, :] == labels[:, None]  # (K, N)
        is_true = references[None, :] == labels[:, None]  # (K, N)
        tp = (weight * (is_pred & is_true)).sum(-1)
        predicted = (weight * is_pred).sum(-1)
        actual = (weight * is_true).sum(-1)
        precision = _ratio(tp, predicted)
        recall = _ratio(tp, actual)
        f1 = _ratio(2 * tp, predicted + actual)  # = 2PR / (P + R), and 0 where both are 0

        # binary: the single positive class; macro: equal weights; weighted: by support
        class_weight = actual if average == "weighted" else np.ones_like(actual)
        for name, values in (("precision", precision), ("recall", recall), ("f1", f1)):
            result[name] = float((values * class_weight).sum() / class_weight.sum())
        return result
