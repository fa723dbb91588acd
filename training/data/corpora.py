"""Built-in corpora that need no download: a synthetic Markov-chain English and the stdlib's docstrings.

`SyntheticCorpus` draws English-like sentences ("The old dog saw a red house near the river.")
from a word-level first-order Markov chain (Shannon, 1948, section 3: "the second-order word
approximation" is this chain's idea). Because the source is known, its entropy rate is known
exactly: a language model trained on its text cannot beat `entropy_rate_bits_per_word` bits per
word on average, which makes it a test bed with a known floor for the loss.

`load_builtin_corpus(name)` returns the documents of a corpus by name: "synthetic" or
"stdlib_docstrings" (see `training.data.tokenizer.stdlib_docstrings`).
"""

from __future__ import annotations

import bisect
import functools
import logging
from collections.abc import Sequence

import numpy as np

from .tokenizer import stdlib_docstrings

logger = logging.getLogger(__name__)

BUILTIN_CORPORA = ("synthetic", "stdlib_docstrings")

# The sentence end is a word of the chain too: "." ends one sentence and starts the next.
END = "."

# A few hundred real English words, grouped into rough parts of speech.
WORD_CLASSES: dict[str, tuple[str, ...]] = {
    "DET": tuple("the a this that every some one no each another my our".split()),
    "ADJ": tuple(
        "old young red blue green small large quiet loud bright dark warm cold happy sad quick slow "
        "tall short heavy light clever gentle strange simple busy empty rich poor brave careful calm "
        "wild soft hard sweet bitter ancient modern wooden golden silver narrow wide deep shallow "
        "early late famous humble proud tired hungry curious lazy eager fresh broken hidden distant".split()
    ),
    "NOUN": tuple(
        "dog cat house river tree city child teacher book road garden king queen farmer bird horse "
        "ship window door mountain forest village letter song story friend stranger doctor soldier "
        "painter baker sailor student girl boy woman man lamp table chair bridge field stone wall "
        "tower market school church castle island lake valley hill cloud storm wind fire moon star "
        "sun flower apple bread cup coin key box bag coat hat boat cart train clock bell map picture "
        "mirror candle basket rope sword shield crown wolf fox bear mouse owl fish goat sheep cow pig "
        "duck frog snake lion rabbit deer hunter merchant priest judge thief guard cook miller weaver "
        "singer poet captain pilot nurse farm kitchen office library station harbor meadow orchard "
        "well".split()
    ),
    "VERB": tuple(
        "saw found met followed helped watched carried built painted opened closed visited left loved "
        "feared called heard touched kept lost sold bought wanted needed liked chased caught pushed "
        "pulled moved cleaned fixed broke took gave brought showed told asked answered remembered "
        "forgot noticed admired greeted guarded crossed climbed reached passed walked ran slept "
        "waited laughed cried sang danced smiled rested worked played stayed returned arrived "
        "wandered".split()
    ),
    "ADV": tuple(
        "quickly slowly quietly loudly carefully happily sadly gently suddenly often rarely again "
        "together alone soon later today yesterday there here away home outside inside twice".split()
    ),
    "PREP": tuple(
        "near behind under over beside across through into from with without towards around before "
        "after above below past beyond along".split()
    ),
    "PRON": tuple("he she they we it someone nobody everyone".split()),
    "NAME": tuple(
        "anna ben clara david emma felix grace henry iris jack lucy max nora oscar paul rose sam tom "
        "vera will".split()
    ),
    "CONJ": tuple("and but while because".split()),
}

# Which classes may follow which: a rough English grammar; after "." come DET, PRON or NAME.
# Cycles of length 3 (. DET NOUN .) and 4 (. DET ADJ NOUN .) make the chain aperiodic.
GRAMMAR: dict[str, tuple[str, ...]] = {
    END: ("DET", "PRON", "NAME"),
    "DET": ("ADJ", "NOUN"),
    "ADJ": ("ADJ", "NOUN"),
    "NOUN": ("VERB", "PREP", "CONJ", END),
    "PRON": ("VERB",),
    "NAME": ("VERB", "PREP", END),
    "VERB": ("DET", "NAME", "ADV", "PREP", END),
    "ADV": ("PREP", "CONJ", END),
    "PREP": ("DET", "NAME"),
    "CONJ": ("DET", "PRON", "NAME"),
}


def _reachable(matrix: np.ndarray) -> np.ndarray:
    """(V,) whether each state can be reached from state 0 along positive transitions (BFS)."""
    seen = np.zeros(len(matrix), dtype=bool)
    seen[0], frontier = True, [0]
    while frontier:
        nxt = np.flatnonzero((matrix[frontier] > 0).any(axis=0) & ~seen)
        seen[nxt] = True
        frontier = nxt.tolist()
    return seen


class MarkovSource:
    """A first-order Markov chain over words, with its exact entropy rate.

    Args:
        words: the chain's states, one word each (distinct).
        transition_matrix: (V, V) row-stochastic matrix, `P[i, j] = p(next = words[j] | words[i])`.

    Raises:
        ValueError: if the shapes disagree, a row is not a probability distribution, the words are
            not distinct, or the chain is not irreducible (then its stationary distribution, and so
            its entropy rate, would not be unique).
    """

    def __init__(self, words: Sequence[str], transition_matrix) -> None:
        self.words = tuple(words)
        matrix = np.array(transition_matrix, dtype=np.float64)  # (V, V)
        v = len(self.words)
        if len(set(self.words)) != v or v == 0:
            raise ValueError(f"`words` must be a non-empty sequence of distinct words, got {v} words.")
        if matrix.shape != (v, v):
            raise ValueError(f"`transition_matrix` must have shape ({v}, {v}), got {matrix.shape}.")
        if (matrix < 0).any() or not np.allclose(matrix.sum(axis=1), 1.0, atol=1e-9):
            raise ValueError("`transition_matrix` rows must be probability distributions (>= 0, sum 1).")
        self.transition_matrix = matrix / matrix.sum(axis=1, keepdims=True)
        if not self.is_irreducible:
            raise ValueError("The chain is not irreducible: some word cannot be reached from some other.")
        self.stationary_distribution = self._stationary()
        # H = -sum_i pi_i sum_j P_ij log2 P_ij, with 0 log 0 = 0
        p = self.transition_matrix
        row_entropy = -np.sum(np.where(p > 0, p * np.log2(np.where(p > 0, p, 1.0)), 0.0), axis=1)  # (V,)
        self.entropy_rate_bits_per_word = float(self.stationary_distribution @ row_entropy)
        # cumulative rows for sampling: a successor list and its cumulative weights per word
        self._successors = [np.flatnonzero(row) for row in p]
        self._cumulative = [np.cumsum(row[s]).tolist() for row, s in zip(p, self._successors)]

    @property
    def vocab_size(self) -> int:
        """Number of words (states), the sentence end included."""
        return len(self.words)

    @property
    def is_irreducible(self) -> bool:
        """Whether every word can reach every other: state 0 reaches all, and all reach state 0."""
        p = self.transition_matrix
        return bool(_reachable(p).all() and _reachable(p.T).all())

    @property
    def period(self) -> int:
        """The chain's period: gcd of its cycle lengths (1 means aperiodic), from BFS levels."""
        p = self.transition_matrix
        level = np.full(len(p), -1)
        level[0], frontier, depth = 0, [0], 0
        while frontier:
            depth += 1
            nxt = np.flatnonzero((p[frontier] > 0).any(axis=0) & (level < 0))
            level[nxt] = depth
            frontier = nxt.tolist()
        src, dst = np.nonzero(p > 0)
        return int(np.gcd.reduce(np.abs(level[src] + 1 - level[dst])))

    def _stationary(self) -> np.ndarray:
        """pi P = pi, sum(pi) = 1: the least-squares solution of the stacked linear system.

        Unique for an irreducible chain; unlike power iteration it also holds for periodic chains.
        """
        v = len(self.transition_matrix)
        system = np.vstack([self.transition_matrix.T - np.eye(v), np.ones((1, v))])  # (V + 1, V)
        rhs = np.zeros(v + 1)
        rhs[-1] = 1.0
        pi, *_ = np.linalg.lstsq(system, rhs, rcond=None)
        pi = np.clip(pi, 0.0, None)
        return pi / pi.sum()

    def sample(self, num_steps: int, seed, start: int = 0) -> list[int]:
        """State indices of a walk of `num_steps` steps from state `start` (excluded); same seed, same walk."""
        rng = np.random.default_rng(seed)
        uniforms = rng.random(num_steps).tolist()
        state, out = start, []
        for u in uniforms:
            cum = self._cumulative[state]
            state = int(self._successors[state][min(bisect.bisect_right(cum, u * cum[-1]), len(cum) - 1)])
            out.append(state)
        return out


def build_transition_matrix(
    word_classes: dict[str, tuple[str, ...]], grammar: dict[str, tuple[str, ...]], seed: int
) -> tuple[list[str], np.ndarray]:
    """A sparse, skewed, irreducible word-level transition matrix following `grammar`.

    Each word picks its next class with random weights, then a few random words of that class
    (3 to 8) with random weights: sparse rows look like real collocations and keep the entropy
    rate low enough for a small model to approach. Words no walk from "." can reach are then
    linked from a random reachable predecessor, so the chain is irreducible.

    Returns:
        The words ("." first, then the classes in order) and the (V, V) transition matrix.
    """
    rng = np.random.default_rng(seed)
    words = [END] + [w for c in word_classes for w in word_classes[c]]
    index = {w: i for i, w in enumerate(words)}
    members = {c: [index[w] for w in ws] for c, ws in word_classes.items()}
    members[END] = [0]
    word_class = {0: END} | {index[w]: c for c, ws in word_classes.items() for w in ws}
    matrix = np.zeros((len(words), len(words)))
    for i in range(len(words)):
        targets = grammar[word_class[i]]
        class_weights = rng.random(len(targets)) + 0.2
        for target, cw in zip(targets, class_weights / class_weights.sum()):
            pool = members[target]
            k = min(len(pool), int(rng.integers(3, 9)))
            chosen = rng.choice(pool, size=k, replace=False)
            w = rng.random(k) ** 2 + 0.05  # skewed: a few favourite successors
            matrix[i, chosen] += cw * w / w.sum()
    # irreducibility: link every unreachable word from a reachable word of an allowed class
    predecessors = {c: [s for s, ts in grammar.items() if c in ts] for c in members}
    while True:
        reach = _reachable(matrix)
        if reach.all():
            break
        j = int(np.flatnonzero(~reach)[0])
        pool = [i for pc in predecessors[word_class[j]] for i in members[pc] if reach[i]]
        i = pool[int(rng.integers(len(pool)))]
        matrix[i, j] = matrix[i][matrix[i] > 0].min()
        matrix[i] /= matrix[i].sum()
    return words, matrix


class SyntheticCorpus(MarkovSource):
    """Deterministic English-like text from a seeded word-level Markov chain with a known entropy rate.

    The chain's transition structure follows `GRAMMAR` over `WORD_CLASSES` ("." is a word: it ends
    a sentence); `seed` fixes the transitions, `generate`'s seed fixes the text. Sentences are
    written capitalized with the "." attached; both are functions of the chain's states, so the
    text's entropy rate per word is the chain's.

    Args:
        seed: seed of the transition structure.
        sentences_per_document: sentences per generated document.

    Example:
        >>> corpus = SyntheticCorpus()
        >>> docs = corpus.generate(1000, seed=0)
        >>> round(corpus.entropy_rate_bits_per_word, 3) > 0
        True
    """

    def __init__(self, seed: int = 0, sentences_per_document: int = 8) -> None:
        if sentences_per_document < 1:
            raise ValueError(f"`sentences_per_document` must be >= 1, got {sentences_per_document!r}.")
        words, matrix = build_transition_matrix(WORD_CLASSES, GRAMMAR, seed)
        super().__init__(words, matrix)
        self.seed = seed
        names = set(WORD_CLASSES["NAME"])
        self._display = [w.capitalize() if w in names else w for w in self.words]
        self.sentences_per_document = sentences_per_document

    def generate(self, num_words: int, seed: int = 0) -> list[str]:
        """Documents of whole sentences, `num_words` chain steps or slightly more.

        The walk starts after a sentence end and runs `num_words` steps ("." counts as a word),
        then on to the end of the current sentence, so every sentence is complete.

        Args:
            num_words: chain steps to draw, at least.
            seed: seed of the walk; the same seed gives the same text.

        Returns:
            Documents of `sentences_per_document` sentences (the last may have fewer), each
            sentence capitalized and ended by ".", sentences joined by one space.
        """
        if isinstance(num_words, bool) or not isinstance(num_words, int) or num_words < 1:
            raise ValueError(f"`num_words` must be a positive integer, got {num_words!r}.")
        states = self.sample(num_words, seed)
        while states[-1] != 0:  # finish the last sentence, from a second stream of the same seed
            states += self.sample(100, seed=[seed, len(states)], start=states[-1])
            states = states[: states.index(0, num_words - 1) + 1] if 0 in states[num_words - 1 :] else states
        sentences, current = [], []
        for s in states:
            if s == 0:
                if current:
                    sentence = " ".join(current)
                    sentences.append(sentence[0].upper() + sentence[1:] + ".")
                current = []
            else:
                current.append(self._display[s])
        n = self.sentences_per_document
        return [" ".join(sentences[i : i + n]) for i in range(0, len(sentences), n)]


@functools.cache
def _synthetic_documents() -> tuple[str, ...]:
    # seconds of sampling, and the same text every time: drawn once per process
    return tuple(SyntheticCorpus(seed=0).generate(1_000_000, seed=0))


def load_builtin_corpus(name: str) -> list[str]:
    """The documents of a built-in corpus, deterministic and offline.

    Args:
        name: "synthetic" (`SyntheticCorpus(seed=0)`, 1,000,000 words, about 15k documents of 8
            sentences) or "stdlib_docstrings" (all of `training.data.tokenizer.stdlib_docstrings`).

    Returns:
        The documents, in a fixed order.

    Raises:
        ValueError: for another name, listing the allowed names.
    """
    if name == "synthetic":
        return list(_synthetic_documents())  # a copy: callers may edit their list
    if name == "stdlib_docstrings":
        return stdlib_docstrings()
    raise ValueError(f"Unknown built-in corpus {name!r}; allowed names: {list(BUILTIN_CORPORA)}.")
