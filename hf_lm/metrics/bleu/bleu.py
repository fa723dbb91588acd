"""Corpus BLEU computed by sacrebleu, as an `evaluate` metric module.

Load it offline from this folder (or this file); nothing is downloaded:

    >>> import evaluate
    >>> bleu = evaluate.load("hf_lm/metrics/bleu")
    >>> bleu.compute(predictions=["the cat sat on the mat"], references=["the cat sat on the mat"])["score"]
    100.0

sacrebleu (Post, 2018) fixes BLEU's tokenization and settings so that scores are comparable
between papers; the returned `signature` records them. This script depends on nothing else in
hf_lm because `evaluate` copies it alone into its modules cache.
"""

from __future__ import annotations

import datasets
import evaluate
from sacrebleu.metrics import BLEU

_CITATION = """\
@inproceedings{post-2018-call,
  title = "A Call for Clarity in Reporting {BLEU} Scores",
  author = "Post, Matt",
  booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
  year = "2018",
  publisher = "Association for Computational Linguistics",
  url = "https://www.aclweb.org/anthology/W18-6319",
  pages = "186--191",
}
@inproceedings{papineni-etal-2002-bleu,
  title = "{B}leu: a Method for Automatic Evaluation of Machine Translation",
  author = "Papineni, Kishore and Roukos, Salim and Ward, Todd and Zhu, Wei-Jing",
  booktitle = "Proceedings of the 40th Annual Meeting of the Association for Computational Linguistics",
  year = "2002",
  pages = "311--318",
}
"""

_DESCRIPTION = """\
Corpus-level BLEU (Papineni et al., 2002) as computed by sacrebleu: the n-gram matches (n = 1..4,
each hypothesis n-gram counted at most as often as it appears in the reference that has it most)
and the hypothesis n-gram totals are summed over the whole corpus, then
BLEU = 100 * BP * exp(mean_n log(p_n)) with p_n = matches_n / totals_n and the brevity penalty
BP = min(1, exp(1 - ref_len / sys_len)), where ref_len sums, per sentence, the length of the
reference closest in length to the hypothesis. It is not the mean of sentence BLEUs.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of str): the system outputs (detokenized text).
    references (list of str, or list of list of str): one reference per prediction, or a list of
        references per prediction (their number may vary).
    tokenize (str): sacrebleu's tokenizer, "13a" (default, the WMT standard), "intl", "char",
        "zh", "none", "ja-mecab"/"ko-mecab" (need extra packages); the "spm"/"flores" tokenizers
        download a SentencePiece model on first use.
    lowercase (bool): case-insensitive BLEU (default False).
    smooth_method (str): "exp" (default), "floor", "add-k" or "none".
    smooth_value (float): the value of "floor" and "add-k" (default: sacrebleu's).
    force (bool): do not warn about input that looks tokenized already (default False).
    use_effective_order (bool): leave out n-gram orders with no match (for sentence-level BLEU;
        default False).
Returns:
    score (float): BLEU in [0, 100].
    counts (list of int): matched n-grams, n = 1..4.
    totals (list of int): hypothesis n-grams, n = 1..4.
    precisions (list of float): 100 * counts / totals, n = 1..4.
    bp (float): the brevity penalty.
    sys_len (int), ref_len (int): hypothesis and effective reference lengths in tokens.
    signature (str): sacrebleu's reproducibility signature, e.g.
        "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0".
Examples:
    >>> bleu = evaluate.load("hf_lm/metrics/bleu")
    >>> result = bleu.compute(predictions=["the cat is on the mat"], references=[["the cat sat on the mat"]])
    >>> round(result["score"], 2), result["counts"], result["totals"]
    (37.99, [5, 3, 1, 0], [6, 5, 4, 3])
"""

SMOOTH_METHODS = tuple(BLEU.SMOOTH_DEFAULTS)
TOKENIZERS = tuple(BLEU.TOKENIZERS)


def _reference_streams(references: list) -> list[list[str | None]]:
    """Per-prediction references (a str or a list of str each) as sacrebleu's transposed streams.

    sacrebleu takes `K` streams of `N` references, stream `k` holding every prediction's k-th
    reference; a prediction with fewer than `K` references gets `None` in the remaining streams,
    which sacrebleu skips.
    """
    per_prediction = [[refs] if isinstance(refs, str) else list(refs) for refs in references]
    for i, refs in enumerate(per_prediction):
        if not refs:
            raise ValueError(f"Prediction {i} has no reference; every prediction needs at least one.")
    n_streams = max(len(refs) for refs in per_prediction)
    return [[refs[k] if k < len(refs) else None for refs in per_prediction] for k in range(n_streams)]


class Bleu(evaluate.Metric):
    """Corpus BLEU with sacrebleu (scores, n-gram counts, brevity penalty, signature)."""

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
                        "references": datasets.Sequence(
                            datasets.Value("string", id="sequence"), id="references"
                        ),
                    }
                ),
                datasets.Features(
                    {
                        "predictions": datasets.Value("string", id="sequence"),
                        "references": datasets.Value("string", id="sequence"),
                    }
                ),
            ],
            codebase_urls=["https://github.com/mjpost/sacrebleu"],
            reference_urls=["https://aclanthology.org/W18-6319/"],
        )

    def _compute(
        self,
        predictions,
        references,
        tokenize: str = "13a",
        lowercase: bool = False,
        smooth_method: str = "exp",
        smooth_value: float | None = None,
        force: bool = False,
        use_effective_order: bool = False,
    ) -> dict:
        if tokenize not in TOKENIZERS:
            raise ValueError(f"`tokenize` must be one of {list(TOKENIZERS)}, got {tokenize!r}.")
        if smooth_method not in SMOOTH_METHODS:
            raise ValueError(f"`smooth_method` must be one of {list(SMOOTH_METHODS)}, got {smooth_method!r}.")
        if len(predictions) == 0:
            raise ValueError("No examples: `predictions` and `references` are empty.")
        if len(predictions) != len(references):
            raise ValueError(
                f"`predictions` ({len(predictions)}) and `references` ({len(references)}) differ in length."
            )
        metric = BLEU(
            lowercase=lowercase,
            force=force,
            tokenize=tokenize,
            smooth_method=smooth_method,
            smooth_value=smooth_value,
            effective_order=use_effective_order,
        )
        output = metric.corpus_score(list(predictions), _reference_streams(references))
        return {
            "score": float(output.score),
            "counts": [int(c) for c in output.counts],
            "totals": [int(t) for t in output.totals],
            "precisions": [float(p) for p in output.precisions],
            "bp": float(output.bp),
            "sys_len": int(output.sys_len),
            "ref_len": int(output.ref_len),
            "signature": str(metric.get_signature()),
        }
