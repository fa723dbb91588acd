"""ROUGE computed by Google's `rouge-score` package, as an `evaluate` metric module.

Load it offline from this folder (or this file); nothing is downloaded:

    >>> import evaluate
    >>> rouge = evaluate.load("hf_lm/metrics/rouge")
    >>> rouge.compute(predictions=["the cat is on the mat"], references=["the cat sat on the mat"])
    {'rouge1': 0.8333333333333334, 'rouge2': 0.6, 'rougeL': 0.8333333333333334, 'rougeLsum': 0.8333333333333334}

The same keys and per-example scores as the Hub's `rouge` metric. The aggregate differs in one
way on purpose: it is the plain mean of the per-example F-measures, where the Hub's module
reports the median of a random bootstrap resampling (close to the mean, but not reproducible
bit for bit). This script depends on nothing else in hf_lm because `evaluate` copies it alone
into its modules cache.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import datasets
import evaluate
from rouge_score import rouge_scorer

_CITATION = """\
@inproceedings{lin-2004-rouge,
  title = "{ROUGE}: A Package for Automatic Evaluation of Summaries",
  author = "Lin, Chin-Yew",
  booktitle = "Text Summarization Branches Out",
  year = "2004",
  publisher = "Association for Computational Linguistics",
  url = "https://aclanthology.org/W04-1013",
  pages = "74--81",
}
"""

_DESCRIPTION = """\
ROUGE (Lin, 2004) measures the overlap of a prediction with a reference: ROUGE-N the n-grams
(rouge1, rouge2, ...), ROUGE-L the longest common subsequence of the two token sequences, and
ROUGE-Lsum the union-LCS over sentences (summary-level LCS, sentences separated by newlines
"\\n"; without newlines it equals ROUGE-L). Each score is an F-measure, the harmonic mean of
precision (overlap / prediction length) and recall (overlap / reference length). The default
tokenizer lowercases and keeps only [a-z0-9] runs, so text in other scripts needs `tokenizer=`.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of str): the system outputs.
    references (list of str, or list of list of str): one reference per prediction, or several;
        with several, each score is that of the reference with the best F-measure.
    rouge_types (list of str): any of "rouge1" ... "rouge9", "rougeL", "rougeLsum" (default
        ["rouge1", "rouge2", "rougeL", "rougeLsum"]).
    use_stemmer (bool): Porter-stem the words before matching (default False).
    use_aggregator (bool): the mean over the examples (default True) or one score per example.
    tokenizer (callable): str -> list of str, replacing rouge-score's default tokenizer.
Returns:
    One entry per rouge type: the mean F-measure in [0, 1] (float), or the list of per-example
    F-measures with use_aggregator=False.
Examples:
    >>> rouge = evaluate.load("hf_lm/metrics/rouge")
    >>> rouge.compute(predictions=["a b c"], references=[["a b d", "x y z"]], rouge_types=["rouge1"])
    {'rouge1': 0.6666666666666666}
"""

DEFAULT_ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
_ROUGE_TYPE = re.compile(r"rouge[1-9]|rougeL|rougeLsum")


class _CallableTokenizer:
    """rouge-score wants an object with `.tokenize(text)`; this wraps a plain function."""

    def __init__(self, tokenize: Callable[[str], list[str]]):
        self._tokenize = tokenize

    def tokenize(self, text: str) -> list[str]:
        return self._tokenize(text)


class Rouge(evaluate.Metric):
    """ROUGE-N / ROUGE-L / ROUGE-Lsum F-measures with rouge-score, averaged over the examples."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            # the first schema whose types match the first example is used: several references
            # per prediction, or one
            features=[
                datasets.Features(
                    {
                        "predictions": datasets.Value("string", id="sequence"),
                        "references": datasets.Sequence(datasets.Value("string", id="sequence")),
                    }
                ),
                datasets.Features(
                    {
                        "predictions": datasets.Value("string", id="sequence"),
                        "references": datasets.Value("string", id="sequence"),
                    }
                ),
            ],
            codebase_urls=["https://github.com/google-research/google-research/tree/master/rouge"],
            reference_urls=["https://aclanthology.org/W04-1013/"],
        )

    def _compute(
        self,
        predictions,
        references,
        rouge_types=None,
        use_stemmer: bool = False,
        use_aggregator: bool = True,
        tokenizer: Callable[[str], list[str]] | None = None,
    ) -> dict:
        if rouge_types is None:
            rouge_types = DEFAULT_ROUGE_TYPES
        if isinstance(rouge_types, str) or not isinstance(rouge_types, (list, tuple)) or not rouge_types:
            raise ValueError(f"`rouge_types` must be a non-empty list of rouge types, got {rouge_types!r}.")
        for rouge_type in rouge_types:
            if not isinstance(rouge_type, str) or not _ROUGE_TYPE.fullmatch(rouge_type):
                raise ValueError(
                    f"Unknown rouge type {rouge_type!r}; use 'rouge1' ... 'rouge9', 'rougeL' or 'rougeLsum'."
                )
        rouge_types = list(rouge_types)
        if len(predictions) == 0:
            raise ValueError("No examples: `predictions` and `references` are empty.")
        if len(predictions) != len(references):
            raise ValueError(
                f"`predictions` ({len(predictions)}) and `references` ({len(references)}) differ in length."
            )
        if tokenizer is not None and not callable(tokenizer):
            raise ValueError(
                f"`tokenizer` must be a function str -> list of str, got {type(tokenizer).__name__}."
            )

        scorer = rouge_scorer.RougeScorer(
            rouge_types,
            use_stemmer=use_stemmer,
            tokenizer=None if tokenizer is None else _CallableTokenizer(tokenizer),
        )
        per_example = {rouge_type: [] for rouge_type in rouge_types}
        for i, (prediction, refs) in enumerate(zip(predictions, references)):
            refs = [refs] if isinstance(refs, str) else list(refs)
            if not refs:
                raise ValueError(f"Prediction {i} has no reference; every prediction needs at least one.")
            # several references: rouge-score keeps, per rouge type, the one with the best F-measure
            scores = (
                scorer.score_multi(refs, prediction) if len(refs) > 1 else scorer.score(refs[0], prediction)
            )
            for rouge_type in rouge_types:
                per_example[rouge_type].append(float(scores[rouge_type].fmeasure))
        if not use_aggregator:
            return per_example
        return {rouge_type: sum(values) / len(values) for rouge_type, values in per_example.items()}
