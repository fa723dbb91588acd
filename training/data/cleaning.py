"""C4-style cleaning and deduplication of a web-like text corpus (Raffel et al., 2020, section 2.2).

T5's "Colossal Clean Crawled Corpus" is Common Crawl text put through a few heuristics; `RULES`
holds them, in the order they run, each a small function with the paper's words in its docstring:

1. `whitespace`: lines are stripped and empty lines dropped (no removal of text, but counted, so
   the report adds up: input = output + everything the rules removed).
2. `lorem_ipsum`, `curly_bracket`, `bad_words` (optional): pages dropped whole.
3. `citations`: Wikipedia citation markers ("[1]", "[citation needed]", "[edit]") cut out.
4. `terminal_punctuation`, `too_few_words`, `javascript`, `policy`: lines dropped.
5. `too_few_sentences`: pages left with fewer than `min_sentences` sentences dropped.
6. `language` (optional): pages a language scorer rates below a threshold dropped.
7. `exact_duplicates`, `near_duplicates` (MinHash + LSH), `span_duplicates` (any three-sentence
   span seen before): corpus-wide, the first occurrence kept.

Rules 1-6 look at one page: they run as a batched `datasets` map (any `num_proc`). Rules 7 need
the pages before: they run in one ordered pass (`_corpus_pass`) holding hash sets and an LSH
index, the same pass for a `Dataset` and, lazily and restarted for every read, an
`IterableDataset` (`--streaming`), so both give the same pages whatever `num_proc` or batching.
A page is registered in the dedup state only once it is kept, so "the first occurrence" is always
one the output holds.

`clean_corpus` returns the cleaned dataset and a `CleaningReport`: per rule the pages, lines and
characters it removed, exact by construction (each rule's counts are the size of the page before
it minus the size after it).

Where this differs from C4: sentences are split by a regular expression (C4 used NLTK's Punkt),
so "Dr. Smith" counts two; the language filter is a documented English stopword heuristic (C4
used langdetect >= 0.99, which needs model files this machine cannot download) or any callable
you plug in; near-duplicate removal (MinHash, Broder 1997; LSH banding, Leskovec et al., "Mining
of Massive Datasets" ch. 3) is not in C4 but in its successors (Lee et al., 2022).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from datasets import Dataset, Features, IterableDataset, Value

from ..state.atomic import atomic_write_text

logger = logging.getLogger(__name__)

DATA_CLEANINGS = ("none", "c4")
LANGUAGES = ("none", "en")  # or "module:function", a callable text -> score
_MAP_BATCH_SIZE = 1000  # pages per batch of the page map; the result does not depend on it

# Raffel et al. (2020), section 2.2; the policy strings as listed there
POLICY_SUBSTRINGS = (
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)
CITATION = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]", re.IGNORECASE)
# a terminal mark, optionally followed by a closing quote: `He said "yes."` and `"Why?"` end a
# sentence; an ellipsis does not ("Read more...")
TERMINAL = re.compile(r"(?<!\.\.)[.!?][\"'\u201d\u2019]?$")
# a sentence ends at . ! or ? (and a closing quote) followed by white space; two fixed-width
# look-behinds, since Python's look-behind cannot vary in width
SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"'\u201d\u2019])\s+")
WORD = re.compile(r"\w+")
LETTERS = re.compile(r"[^\W\d_]+")
# Frequent English function words that are not also frequent words of German, French, Spanish or
# Italian (so no "a", "in", "an", "die", "so"): the `language="en"` heuristic's vocabulary.
ENGLISH_STOPWORDS = frozenset(
    "the of and to is was for that with as on by at from his her its it he she they we you this "
    "which are be been have has had not but or were their there would will can all when who what "
    "more one about than them these into some out up could our your other only also after then "
    "how because any most over such very just those each where should".split()
)
_PRIME_32 = 4294967291  # the largest prime below 2**32: a*x + b < 2**64 for x, a, b below it
_HASH_CHUNK = 4096  # shingles hashed against all permutations at once (bounded memory)


@dataclass(frozen=True)
class C4Options:
    """The settings of the cleaning; each is the training flag `--clean_<name>`.

    Raises:
        ValueError: naming the flag, for a value out of range, `minhash_num_perm` not a multiple of
            `minhash_bands`, an unknown `language`, or a `bad_words_file` that does not exist.
    """

    min_words_per_line: int = 3
    min_sentences: int = 5
    bad_words_file: str | None = None
    language: str = "none"
    language_threshold: float = 0.2
    exact_dedup: bool = True
    near_dedup: bool = True
    span_dedup: bool = True
    minhash_num_perm: int = 128
    minhash_bands: int = 32
    minhash_threshold: float = 0.8
    minhash_ngram: int = 5
    seed: int = 0

    def __post_init__(self) -> None:
        for name in (
            "min_words_per_line",
            "min_sentences",
            "minhash_num_perm",
            "minhash_bands",
            "minhash_ngram",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`clean_{name}` must be a positive integer, got {value!r}.")
        if self.minhash_num_perm % self.minhash_bands:
            raise ValueError(
                f"`clean_minhash_num_perm`={self.minhash_num_perm} must be a multiple of "
                f"`clean_minhash_bands`={self.minhash_bands} (LSH cuts the signature into equal bands)."
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"`clean_seed` must be a non-negative integer, got {self.seed!r}.")
        for name in ("language_threshold", "minhash_threshold"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise ValueError(f"`clean_{name}` must be a number in [0, 1], got {value!r}.")
        if self.bad_words_file is not None and not Path(self.bad_words_file).is_file():
            raise ValueError(f"`clean_bad_words_file`={self.bad_words_file!r} is not a file.")
        language_scorer(self.language)  # an unknown or unimportable scorer fails here


# the run settings a resumed run may not change (training/state/resume.py): they fix the data
CLEANING_SETTINGS = ("data_cleaning", *(f"clean_{f.name}" for f in dataclasses.fields(C4Options)))


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------


def split_sentences(line: str) -> list[str]:
    """The sentences of one line, split after . ! ? (and a closing quote) before white space."""
    return [s for s in SENTENCE_BREAK.split(line) if s]


def _count_sentences(text: str) -> int:
    return sum(len(split_sentences(line)) for line in text.split("\n"))


def _normalize(text: str) -> str:
    """Lower case, words only, one space between them: what counts as "the same" text."""
    return " ".join(WORD.findall(text.lower()))


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def _keep_lines(text: str, drop: Callable[[str], bool]) -> str:
    return "\n".join(line for line in text.split("\n") if line and not drop(line))


@functools.lru_cache(maxsize=8)
def _bad_words(path: str) -> frozenset[str]:
    return frozenset(
        w.strip().lower() for w in Path(path).read_text(encoding="utf-8").splitlines() if w.strip()
    )


def english_score(text: str) -> float:
    """The share of a page's words that are English function words (`ENGLISH_STOPWORDS`), in [0, 1].

    A light, deterministic stand-in for C4's langdetect (which needs downloaded profiles): English
    prose scores about 0.3-0.5, text in other Latin-script languages below 0.1, other scripts 0.
    It is a heuristic, not a language identifier: a list of English names scores 0 too.
    """
    words = LETTERS.findall(text.lower())
    return sum(w in ENGLISH_STOPWORDS for w in words) / len(words) if words else 0.0


@functools.lru_cache(maxsize=8)
def language_scorer(language: str) -> Callable[[str], float] | None:
    """The scorer named by `language`: None for "none", `english_score` for "en", or the callable
    `module:function` (text -> score in [0, 1], kept when >= the threshold), imported."""
    if language in LANGUAGES:
        return None if language == "none" else english_score
    module, _, name = language.partition(":")
    try:
        scorer = getattr(importlib.import_module(module), name) if module and name else None
    except (ImportError, AttributeError):
        scorer = None
    if not callable(scorer):
        raise ValueError(
            f"`clean_language` must be one of {list(LANGUAGES)} or an importable 'module:function', "
            f"got {language!r}."
        )
    return scorer


# ----------------------------------------------------------------------------------------------
# The page rules: text -> text, or None to drop the page
# ----------------------------------------------------------------------------------------------


def strip_whitespace(text: str, options: C4Options) -> str:
    """Strip each line and drop empty ones (C4's line rules see stripped lines)."""
    return "\n".join(s for s in (line.strip() for line in text.splitlines()) if s)


def drop_lorem_ipsum(text: str, options: C4Options) -> str | None:
    """Drop pages with placeholder text.

    C4 (Raffel et al., 2020): "Some pages had placeholder 'lorem ipsum' text; we removed
    any page where the phrase 'lorem ipsum' appeared." (section 2.2)"""
    return None if "lorem ipsum" in text.lower() else text


def drop_curly_bracket(text: str, options: C4Options) -> str | None:
    """Drop pages that look like code.

    C4: "Some pages inadvertently contained code. Since the curly bracket '{' appears in many
    programming languages ... but not in natural text, we removed any pages that contained a curly
    bracket." (section 2.2)"""
    return None if "{" in text else text


def drop_bad_words(text: str, options: C4Options) -> str | None:
    """Drop pages holding a listed word (optional: `bad_words_file`, one word or phrase a line).

    C4: "We removed any page that contained any word on the 'List of Dirty, Naughty, Obscene or
    Otherwise Bad Words'." (section 2.2). hf_lm ships no list."""
    if options.bad_words_file is None:
        return text
    words = set(WORD.findall(text.lower()))
    normalized = f" {_normalize(text)} "
    bad = _bad_words(options.bad_words_file)
    hit = any((w in words) if " " not in w else (f" {w} " in normalized) for w in bad)
    return None if hit else text


def remove_citations(text: str, options: C4Options) -> str:
    """Cut Wikipedia citation markers out of the lines.

    C4: "Since some of the scraped pages were sourced from Wikipedia and had citation markers (e.g.
    [1], [citation needed], etc.), we removed any such markers." (section 2.2)"""
    return "\n".join(s for s in (CITATION.sub("", line).strip() for line in text.split("\n")) if s)


def keep_terminal_punctuation(text: str, options: C4Options) -> str:
    """Keep only lines ending in . ! or ? (a closing quote may follow; an ellipsis does not count).

    C4: "We only retained lines that ended in a terminal punctuation mark (i.e. a period,
    exclamation mark, question mark, or end quotation mark)." (section 2.2)"""
    return _keep_lines(text, lambda line: TERMINAL.search(line) is None)


def keep_lines_with_enough_words(text: str, options: C4Options) -> str:
    """Keep only lines of at least `min_words_per_line` words.

    C4: "...only retained lines that contained at least 3 words." (section 2.2)"""
    return _keep_lines(text, lambda line: len(line.split()) < options.min_words_per_line)


def drop_javascript_lines(text: str, options: C4Options) -> str:
    """Drop lines naming JavaScript.

    C4: "Many of the scraped pages contained warnings stating that Javascript should be enabled so
    we removed any line with the word Javascript." (section 2.2)"""
    return _keep_lines(text, lambda line: "javascript" in line.lower())


def drop_policy_lines(text: str, options: C4Options) -> str:
    """Drop policy-notice lines.

    C4: "Many pages had boilerplate policy notices, so we removed any lines containing the strings
    'terms of use', 'privacy policy', 'cookie policy', 'uses cookies', 'use of cookies', or 'use
    cookies'." (section 2.2)"""
    return _keep_lines(text, lambda line: any(p in line.lower() for p in POLICY_SUBSTRINGS))


def keep_pages_with_enough_sentences(text: str, options: C4Options) -> str | None:
    """Drop pages left with fewer than `min_sentences` sentences by the line rules.

    C4: "We discarded any page with fewer than 5 sentences" (section 2.2)."""
    return text if _count_sentences(text) >= options.min_sentences else None


def filter_language(text: str, options: C4Options) -> str | None:
    """Drop pages a language scorer (optional: `language`) rates below `language_threshold`.

    C4: "We used langdetect to filter out any pages that were not classified as English with a
    probability of at least 0.99." (section 2.2). The scorer maps a text to [0, 1]."""
    scorer = language_scorer(options.language)
    if scorer is None:
        return text
    return text if scorer(text) >= options.language_threshold else None


# ----------------------------------------------------------------------------------------------
# The corpus rules: they see the pages kept before (a `CorpusState`)
# ----------------------------------------------------------------------------------------------


class MinHasher:
    """MinHash signatures of word n-gram shingles (Broder, 1997): P[sig_a[i] == sig_b[i]] = Jaccard(a, b).

    Each of `num_perm` hash functions is `h_i(x) = (a_i x + b_i) mod p` on a 32-bit hash x of the
    shingle (p the prime 2**32 - 5, a_i and b_i drawn from `numpy.random.default_rng(seed)`), so
    every product stays below 2**64: exact uint64 arithmetic, the same on every machine.
    """

    def __init__(self, num_perm: int, ngram: int, seed: int):
        rng = np.random.default_rng(seed)
        self.a = rng.integers(1, _PRIME_32, num_perm, dtype=np.uint64)[:, None]  # (P, 1)
        self.b = rng.integers(0, _PRIME_32, num_perm, dtype=np.uint64)[:, None]  # (P, 1)
        self.ngram = ngram

    def shingles(self, text: str) -> set[str]:
        """The word `ngram`-grams of the normalized text (the whole text if it has fewer words)."""
        words = _normalize(text).split()
        n = min(self.ngram, len(words))
        return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)} if words else set()

    def signature(self, text: str) -> np.ndarray:
        """(num_perm,) uint64, the minimum of each hash function over the shingles."""
        hashed = np.fromiter(
            (
                int.from_bytes(hashlib.blake2b(s.encode(), digest_size=4).digest(), "little")
                for s in sorted(self.shingles(text))
            ),
            dtype=np.uint64,
        ) % np.uint64(_PRIME_32)  # (S,)
        signature = np.full(len(self.a), _PRIME_32, dtype=np.uint64)
        for start in range(0, len(hashed), _HASH_CHUNK):
            chunk = hashed[None, start : start + _HASH_CHUNK]  # (1, S')
            values = (self.a * chunk + self.b) % np.uint64(_PRIME_32)  # (P, S')
            signature = np.minimum(signature, values.min(axis=1))
        return signature


def jaccard_estimate(a: np.ndarray, b: np.ndarray) -> float:
    """The MinHash estimate of the Jaccard similarity: the share of equal signature entries."""
    return float(np.mean(a == b))


class CorpusState:
    """What the corpus rules remember of the pages kept so far: hashes, MinHash bands, spans.

    A rule stages what it would add (`stage`); `commit` adds it once the page is kept, so a later
    page is only ever a duplicate of a page in the output.
    """

    def __init__(self, options: C4Options):
        self.options = options
        self.pages: set[bytes] = set()
        self.spans: set[bytes] = set()
        self.minhash = MinHasher(options.minhash_num_perm, options.minhash_ngram, options.seed)
        self.rows = options.minhash_num_perm // options.minhash_bands  # r rows per band
        self.bands: list[dict[bytes, list[int]]] = [{} for _ in range(options.minhash_bands)]
        self.signatures: list[np.ndarray] = []
        self._staged: list[Callable[[], None]] = []

    def stage(self, action: Callable[[], None]) -> None:
        self._staged.append(action)

    def commit(self, kept: bool) -> None:
        for action in self._staged if kept else ():
            action()
        self._staged = []

    def band_keys(self, signature: np.ndarray) -> list[bytes]:
        return [signature[i * self.rows : (i + 1) * self.rows].tobytes() for i in range(len(self.bands))]

    def add_signature(self, signature: np.ndarray) -> None:
        index = len(self.signatures)
        self.signatures.append(signature)
        for band, key in zip(self.bands, self.band_keys(signature)):
            band.setdefault(key, []).append(index)


def drop_exact_duplicates(text: str, state: CorpusState) -> str | None:
    """Exact document deduplication: a page whose normalized text (`_normalize`) hashes like a page
    kept before is dropped (C4's span rule would drop most of it; here it is counted as what it is)."""
    if not state.options.exact_dedup:
        return text
    key = _digest(_normalize(text))
    if key in state.pages:
        return None
    state.stage(lambda: state.pages.add(key))
    return text


def drop_near_duplicates(text: str, state: CorpusState) -> str | None:
    """Near-duplicate deduplication: MinHash (Broder, 1997) with LSH banding (b bands of r rows, a
    candidate shares one band; Leskovec et al., "Mining of Massive Datasets", section 3.4). A page
    whose estimated Jaccard similarity to a kept candidate is at least `minhash_threshold` is
    dropped (Lee et al., 2022, "Deduplicating training data makes language models better")."""
    if not state.options.near_dedup:
        return text
    signature = state.minhash.signature(text)
    keys = state.band_keys(signature)
    candidates = sorted({i for band, key in zip(state.bands, keys) for i in band.get(key, ())})
    threshold = state.options.minhash_threshold
    if any(jaccard_estimate(signature, state.signatures[i]) >= threshold for i in candidates):
        return None
    state.stage(lambda: state.add_signature(signature))
    return text


def drop_duplicate_spans(text: str, state: CorpusState) -> str | None:
    """Drop every three-sentence span seen before, then pages left too short.

    C4: "To deduplicate the data set, we discarded all but one of any three-sentence span occurring
    more than once in the data set." (section 2.2). Every window of three consecutive (normalized)
    sentences seen before, in a kept page or earlier in this one, loses its three sentences; a page
    left with fewer than `min_sentences` sentences is dropped."""
    if not state.options.span_dedup:
        return text
    lines = [split_sentences(line) for line in text.split("\n")]
    flat = [(i, s) for i, sentences in enumerate(lines) for s in sentences]  # (line, sentence)
    keys = [_normalize(s) for _, s in flat]
    seen, drop = set(), set()
    for j in range(len(flat) - 2):
        span = _digest("\x1f".join(keys[j : j + 3]))
        if span in state.spans or span in seen:
            drop.update(range(j, j + 3))
        seen.add(span)
    if drop:
        kept = [[] for _ in lines]
        for j, (i, sentence) in enumerate(flat):
            if j not in drop:
                kept[i].append(sentence)
        # a line that lost no sentence stays as it was; one that lost some is its rest, one space apart
        originals = text.split("\n")
        text = "\n".join(
            " ".join(k) if len(k) < len(s) else line for k, s, line in zip(kept, lines, originals) if k
        )
        if len(flat) - len(drop) < state.options.min_sentences:
            return None
    state.stage(lambda: state.spans.update(seen))
    return text


@dataclass(frozen=True)
class Rule:
    """One cleaning rule: its name in the report, its function, and whether it needs the corpus."""

    name: str
    apply: Callable
    corpus: bool = False


RULES: tuple[Rule, ...] = (
    Rule("whitespace", strip_whitespace),
    Rule("lorem_ipsum", drop_lorem_ipsum),
    Rule("curly_bracket", drop_curly_bracket),
    Rule("bad_words", drop_bad_words),
    Rule("citations", remove_citations),
    Rule("terminal_punctuation", keep_terminal_punctuation),
    Rule("too_few_words", keep_lines_with_enough_words),
    Rule("javascript", drop_javascript_lines),
    Rule("policy", drop_policy_lines),
    Rule("too_few_sentences", keep_pages_with_enough_sentences),
    Rule("language", filter_language),
    Rule("exact_duplicates", drop_exact_duplicates, corpus=True),
    Rule("near_duplicates", drop_near_duplicates, corpus=True),
    Rule("span_duplicates", drop_duplicate_spans, corpus=True),
)
PAGE_RULES = tuple(r for r in RULES if not r.corpus)
CORPUS_RULES = tuple(r for r in RULES if r.corpus)
COUNTS = ("pages", "lines", "chars")


def _size(text: str | None) -> tuple[int, int, int]:
    """(pages, lines, characters) of a page; (0, 0, 0) for a dropped one."""
    return (0, 0, 0) if text is None else (1, len(text.splitlines()), len(text))


def _run_rules(text: str, rules, context, counts: np.ndarray) -> str | None:
    """Apply `rules` in order, adding to `counts` (R, 3) what each removed; None once one drops the page."""
    for k, rule in enumerate(rules):
        before = _size(text)
        text = rule.apply(text, context)
        counts[k] += np.subtract(before, _size(text))
        if text is None:
            return None
    return text


# ----------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------


@dataclass
class CleaningReport:
    """Pages, lines and characters: in the input, removed by each rule (in `RULES` order), in the output.

    `input == output + removed.sum(rules)` holds exactly, per column.
    """

    options: C4Options
    input: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3, dtype=np.int64))
    removed: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((len(RULES), 3), dtype=np.int64))
    output: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3, dtype=np.int64))

    def as_dict(self) -> dict:
        """The JSON-ready report: counts as plain ints, keyed by rule name, in rule order."""
        return {
            "cleaning": "c4",
            "options": dataclasses.asdict(self.options),
            "input": dict(zip(COUNTS, self.input.tolist())),
            "removed": {r.name: dict(zip(COUNTS, row)) for r, row in zip(RULES, self.removed.tolist())},
            "output": dict(zip(COUNTS, self.output.tolist())),
        }

    def table(self) -> str:
        """The report as a text table, for the log."""
        rows = [("rule", *COUNTS), ("input", *self.input.tolist())]
        rows += [(r.name, *row) for r, row in zip(RULES, self.removed.tolist())]
        rows.append(("output", *self.output.tolist()))
        return "\n".join(
            f"{name:<22}" + "".join(f"{v:>14,}" if isinstance(v, int) else f"{v:>14}" for v in values)
            for name, *values in rows
        )

    def write(self, path: str | Path) -> None:
        """Write `as_dict()` to `path`, all at once."""
        atomic_write_text(path, json.dumps(self.as_dict(), indent=2) + "\n")


# ----------------------------------------------------------------------------------------------
# The pipeline: a batched map (page rules), then one ordered pass (corpus rules)
# ----------------------------------------------------------------------------------------------


def _clean_pages(batch: dict, options: C4Options) -> dict:
    """The page rules on a batch: the cleaned text ("" if dropped), whether kept, and the counts
    (input size, then 3 per page rule) flattened in "c4_counts"."""
    texts, kept, counts = [], [], []
    for text in batch["text"]:
        text = text or ""
        page_counts = np.zeros((len(PAGE_RULES), 3), dtype=np.int64)
        cleaned = _run_rules(text, PAGE_RULES, options, page_counts)
        texts.append(cleaned or "")
        kept.append(cleaned is not None)
        counts.append([*_size(text), *page_counts.ravel().tolist()])
    return {"text": texts, "c4_kept": kept, "c4_counts": counts}


def _corpus_pass(rows: Iterable[dict], options: C4Options, report: CleaningReport) -> Iterator[str]:
    """The corpus rules over the page map's rows, in order; yields the kept texts, fills `report`."""
    state = CorpusState(options)
    n_page = len(PAGE_RULES)
    for row in rows:
        counts = np.asarray(row["c4_counts"], dtype=np.int64)
        report.input += counts[:3]
        report.removed[:n_page] += counts[3:].reshape(n_page, 3)
        if not row["c4_kept"]:
            continue
        text = _run_rules(row["text"], CORPUS_RULES, state, report.removed[n_page:])
        state.commit(kept=text is not None)
        if text is not None:
            report.output += _size(text)
            yield text


def _clean_stream(pages: IterableDataset, options: C4Options, report_path: str | None):
    """The cleaned stream, from its start on every read; at its end the report is logged and
    written to `report_path` (each complete read gives the same report)."""
    report = CleaningReport(options)
    for text in _corpus_pass(pages, options, report):
        yield {"text": text}
    logger.info("C4-style cleaning of the stream (a complete pass):\n%s", report.table())
    if report_path is not None:
        report.write(report_path)


def clean_corpus(
    dataset: Dataset | IterableDataset,
    options: C4Options | None = None,
    *,
    num_proc: int | None = None,
    report_path: str | Path | None = None,
) -> tuple[Dataset | IterableDataset, CleaningReport | None]:
    """Clean and deduplicate a corpus of pages with the C4 rules (`RULES`).

    Args:
        dataset: rows with a string column "text", one page each.
        options: the rules' settings (`C4Options()`, the paper's, by default).
        num_proc: processes of the page map (a `Dataset` only); the result does not depend on it.
        report_path: where the report is written (a `Dataset`: now; a stream: at the end of each
            complete read of it), or None.

    Returns:
        `(cleaned, report)`: a dataset of one column "text" with the kept pages, in order, and the
        `CleaningReport` (None for a stream: it exists once the stream has been read through).
    """
    options = options or C4Options()
    pages = dataset.map(
        _clean_pages,
        batched=True,
        batch_size=_MAP_BATCH_SIZE,
        fn_kwargs={"options": options},
        remove_columns=[c for c in (dataset.column_names or ["text"])],
        **({} if isinstance(dataset, IterableDataset) else {"num_proc": num_proc, "desc": "C4 page rules"}),
    )
    path = None if report_path is None else str(report_path)
    if isinstance(dataset, IterableDataset):
        cleaned = IterableDataset.from_generator(
            _clean_stream,
            features=Features({"text": Value("string")}),
            gen_kwargs={"pages": pages, "options": options, "report_path": path},
        )
        return cleaned, None
    report = CleaningReport(options)
    rows = (
        dict(zip(batch, values))
        for batch in pages.iter(batch_size=_MAP_BATCH_SIZE)
        for values in zip(*batch.values())
    )
    texts = list(_corpus_pass(rows, options, report))
    if path is not None:
        report.write(path)
    return Dataset.from_dict({"text": texts}, features=Features({"text": Value("string")})), report
