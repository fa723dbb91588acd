"""Perplexity of a causal LM on a long token stream, with a sliding window.

The algorithm of transformers' guide "Perplexity of fixed-length models": windows of at most
`max_length` tokens start every `stride` tokens; in each window only the tokens not scored by an
earlier window are targets, so every scored token is scored exactly once, with as much left
context as the window allows (at least `max_length - stride` tokens, except near the start).

Counting. Position 0 of a window has no left context inside the window, so a window starting at
`begin` can score only tokens `begin + 1 .. end - 1`. Window k covers `[k * stride, end_k)` with
`end_k = min(k * stride + max_length, N)` and scores tokens `[max(end_{k-1}, k * stride + 1), end_k)`.

- `stride < max_length`: consecutive windows overlap, so every token but the first is scored:
  `n_tokens = N - 1`.
- `stride == max_length` (disjoint chunks): the first token of every chunk is only context, so
  `n_tokens = N - ceil(N / max_length)`; nothing is double counted.

This is not shipped model code: it works with any model whose forward takes `input_ids` and
returns `.logits` of shape (B, T, V) (a transformers causal LM).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)

LN2 = math.log(2.0)


@dataclass(frozen=True)
class Window:
    """One window of the stream: inputs `[begin, end)`, targets `[first_target, end)`."""

    begin: int
    end: int
    first_target: int


def sliding_windows(num_tokens: int, max_length: int, stride: int) -> list[Window]:
    """The windows `sliding_window_perplexity` evaluates, in order.

    Args:
        num_tokens: N, the length of the token stream.
        max_length: the largest window (the model's context), at least 2.
        stride: how far each window starts after the previous one, in `[1, max_length]`.

    Returns:
        The windows; their target ranges are disjoint and cover `1 .. N-1` when
        `stride < max_length` (see the module docstring for `stride == max_length`).

    Raises:
        ValueError: naming the argument, for a bad `max_length` or `stride`.
    """
    _check_window(max_length, stride)
    return list(_windows(lambda wanted: min(num_tokens, wanted), max_length, stride))


def _check_window(max_length: int, stride: int) -> None:
    if max_length < 2:
        raise ValueError(f"`max_length` must be >= 2 (one context and one target token), got {max_length}.")
    if not 1 <= stride <= max_length:
        raise ValueError(f"`stride` must be in [1, max_length={max_length}], got {stride}.")


def _windows(tokens_up_to: Callable[[int], int], max_length: int, stride: int) -> Iterator[Window]:
    """The windows of a stream whose length is learnt as it is read.

    `tokens_up_to(n)` makes sure the first `n` tokens are read and returns how many there are: `n`,
    or the whole stream's length N when it is shorter. Window k starts at `k * stride` and ends at
    `min(k * stride + max_length, N)`; asking for one token past that end tells the last window
    (the one ending at N) from the others without reading the whole stream first.
    """
    prev_end, begin = 0, 0
    while True:
        available = tokens_up_to(begin + max_length + 1)
        if begin >= available:
            return
        end = min(begin + max_length, available)
        first_target = max(prev_end, begin + 1)
        if first_target < end:
            yield Window(begin, end, first_target)
        prev_end = end
        if end == available:  # the stream's end: `available` is N, not the number asked for
            return
        begin += stride


class _TokenBuffer:
    """The part of a token stream that windows still need, read piece by piece on demand.

    Holds the tokens `[start, read)`: windows read forward (`read_to`), and the tokens before the
    next window's start are dropped (`drop_before`), so a stream of any length needs memory for
    about one batch of windows and one piece.
    """

    def __init__(self, pieces: Iterable):
        self._pieces = iter(pieces)
        self.ids: torch.Tensor | None = None  # (read - start,) the held tokens
        self.start = 0  # the stream index of ids[0]
        self.read = 0  # tokens read so far
        self.ended = False

    def read_to(self, wanted: int) -> int:
        """Read until `wanted` tokens are read or the stream ends; how many there are up to `wanted`."""
        parts = [] if self.ids is None else [self.ids]
        while self.read < wanted and not self.ended:
            piece = next(self._pieces, None)
            if piece is None:
                self.ended = True
                break
            piece = torch.as_tensor(piece, dtype=torch.long)
            if piece.dim() != 1:
                raise ValueError(
                    f"Each piece of `input_ids` must be 1-D token ids, got shape {tuple(piece.shape)}."
                )
            parts.append(piece)
            self.read += piece.shape[0]
        if parts:
            self.ids = parts[0] if len(parts) == 1 else torch.cat(parts)
        return min(self.read, wanted)

    def window(self, begin: int, end: int) -> torch.Tensor:
        """(end - begin,) the stream's tokens `[begin, end)`, which must be held."""
        return self.ids[begin - self.start : end - self.start]

    def drop_before(self, index: int) -> None:
        """Forget the tokens before stream index `index` (no window needs them any more)."""
        if self.ids is not None and index > self.start:
            # a view: the next piece read copies what is held and frees the rest
            self.ids = self.ids[index - self.start :]
            self.start = index


# the window of models without learned positions (n-gram, feed-forward and recurrent LMs): the
# n-gram and feed-forward models see only their own short window anyway, a recurrence any length
DEFAULT_WINDOW = 1024


def default_window(config) -> int:
    """The window `sliding_window_perplexity` uses by default: the model's `max_position_embeddings`,
    or `DEFAULT_WINDOW` for a model that has none."""
    return getattr(config, "max_position_embeddings", None) or DEFAULT_WINDOW


def bits_per_unit(nll_sum: float, count: int | None) -> float | None:
    """Total negative log-likelihood (nats) converted to bits per unit (token, character, word)."""
    if not count:
        return None
    return nll_sum / LN2 / count


def _as_pieces(input_ids: torch.Tensor | Iterable) -> Iterable:
    """The stream as consecutive pieces: a (N,) or (1, N) tensor is one piece, an iterable is its pieces."""
    if not torch.is_tensor(input_ids):
        return input_ids
    if input_ids.dim() == 2 and input_ids.shape[0] == 1:
        input_ids = input_ids[0]
    if input_ids.dim() != 1:
        raise ValueError(f"`input_ids` must be a 1-D token stream (N,), got shape {tuple(input_ids.shape)}.")
    return [input_ids]


def _check_memory(
    model, chunk: list[Window], vocab: int, memory_limit: int, batch_size: int, max_length: int
):
    """Refuse a batch whose logits and fp32 log-probs, (B, L, V) each, need more than `memory_limit` bytes."""
    length = chunk[0].end - chunk[0].begin
    itemsize = getattr(model, "dtype", torch.float32).itemsize
    need = len(chunk) * length * vocab * (itemsize + 4)  # logits, fp32 log-probs
    if need > memory_limit:
        raise ValueError(
            f"A batch of {len(chunk)} window(s) of {length} tokens needs {need / 2**30:.2f} GiB of logits "
            f"({vocab} per token), more than the {memory_limit / 2**30:.2f} GiB available: lower "
            f"`batch_size` or `max_length` (got {batch_size} and {max_length})."
        )


def _log_likelihood(model, ids: torch.Tensor, chunk: list[Window]) -> torch.Tensor:
    """The summed fp64 log-likelihood of the targets of `chunk`'s windows, whose tokens are `ids` (B, L)."""
    length = ids.shape[1]
    logits = model(input_ids=ids).logits  # (B, L, V)
    # position j predicts token j+1: (B, L-1, V) log-probs of targets (B, L-1)
    log_probs = F.log_softmax(logits[:, :-1].float(), dim=-1)
    token_lp = log_probs.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # (B, L-1)
    # target index (within the window) of each of the L-1 predictions is 1..L-1
    target_pos = torch.arange(1, length, device=token_lp.device)  # (L-1,)
    offsets = torch.tensor([w.first_target - w.begin for w in chunk], device=token_lp.device)
    scored = target_pos.unsqueeze(0) >= offsets.unsqueeze(1)  # (B, L-1)
    return token_lp[scored].double().sum()


def _score_windows(
    stream: _TokenBuffer, max_length: int, stride: int, batch_size: int, score: Callable[[list[Window]], None]
) -> tuple[int, int]:
    """Read the stream window by window and `score` them in batches; returns (tokens scored, windows).

    Every window but the last is max_length long: those batch together, in order, and the last one,
    when shorter, goes alone at the end (the order of the sums, so the result, does not depend on
    how the stream was cut into pieces)."""
    n_tokens = n_windows = 0
    full: list[Window] = []
    last: Window | None = None
    for window in _windows(stream.read_to, max_length, stride):
        n_tokens += window.end - window.first_target
        n_windows += 1
        if window.end - window.begin < max_length:
            last = window
            continue
        full.append(window)
        if len(full) == batch_size:
            score(full)
            stream.drop_before(full[-1].begin + stride)  # no later window starts before it
            full = []
    if full:
        score(full)
    if last is not None:
        score([last])
    return n_tokens, n_windows


@torch.inference_mode()
def sliding_window_perplexity(
    model: torch.nn.Module,
    input_ids: torch.Tensor | Iterable,
    max_length: int,
    stride: int,
    device: torch.device | str | None = None,
    batch_size: int = 1,
    num_characters: int | None = None,
    num_words: int | None = None,
    memory_limit: int | None = None,
) -> dict:
    """Score a token stream with a causal LM, every scored token exactly once.

    The log-likelihoods are summed in fp32 from the logits (not averaged by the model), so the
    result is exact whatever the window sizes. The stream can be given whole (a tensor) or in
    pieces read as the windows reach them (any iterable of 1-D token-id lists or tensors, e.g. a
    file tokenized chunk by chunk): then only about `(batch_size - 1) * stride + max_length` tokens
    and one piece are held at a time, and the result is exactly the one of the whole stream.

    Args:
        model: a causal LM; `model(input_ids=(B, T)).logits` is (B, T, V), position t predicting t+1.
        input_ids: (N,) the token stream (a (1, N) tensor is accepted), or an iterable of its
            consecutive pieces.
        max_length: the window size (at most the model's context length).
        stride: the step between window starts, `1 <= stride <= max_length`. Smaller strides give
            more context per scored token (lower perplexity) for more compute.
        device: where to run; defaults to the device of the model's first parameter.
        batch_size: how many equal-length windows go through the model at once.
        num_characters: optional length of the text in characters, for `bits_per_character`.
        num_words: optional length of the text in words, for `bits_per_word`.
        memory_limit: optional bytes (a device's memory): a batch whose logits and fp32 log-probs,
            (B, L, V) each, need more is refused before it runs (a `max_length` beyond any context,
            with a model that has no position table, makes one window of a whole long stream).

    Returns:
        A dict with `nll_sum` (total nats), `n_tokens` (tokens scored), `loss` (mean nats per scored
        token), `perplexity` (exp(loss)), `bits_per_token`, `bits_per_character` and
        `bits_per_word` (None unless the count is given), `n_windows` and `num_input_tokens` (N).
        With no scorable token (N < 2) loss and perplexity are NaN.

    Raises:
        ValueError: for a bad shape, `max_length`, `stride` or `batch_size`, or a batch beyond
            `memory_limit`.
    """
    pieces = _as_pieces(input_ids)
    if batch_size < 1:
        raise ValueError(f"`batch_size` must be >= 1, got {batch_size}.")
    _check_window(max_length, stride)
    if device is None:
        param = next(model.parameters(), None)
        device = param.device if param is not None else torch.device("cpu")
    stream = _TokenBuffer(pieces)

    was_training = model.training
    model.eval()
    # window k scores its tokens [first_target, end): counted on the host, summed on the device
    nll = torch.zeros((), dtype=torch.float64, device=device)  # no host sync until the end
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)

    def score(chunk: list[Window]) -> None:
        nonlocal nll
        if memory_limit is not None and isinstance(vocab, int):
            _check_memory(model, chunk, vocab, memory_limit, batch_size, max_length)
        ids = torch.stack([stream.window(w.begin, w.end) for w in chunk]).to(device)  # (B, L)
        nll -= _log_likelihood(model, ids, chunk)

    try:
        n_tokens, n_windows = _score_windows(stream, max_length, stride, batch_size, score)
    finally:
        model.train(was_training)
    return _summary(nll.item(), n_tokens, n_windows, stream.read, num_characters, num_words)


def _summary(
    nll_sum: float, n_tokens: int, n_windows: int, num_input_tokens: int, num_characters, num_words
) -> dict:
    """`sliding_window_perplexity`'s result from the summed negative log-likelihood and the counts."""
    loss = nll_sum / n_tokens if n_tokens else float("nan")
    logger.debug("scored %d tokens in %d windows: loss %.4f", n_tokens, n_windows, loss)
    return {
        "nll_sum": nll_sum,
        "n_tokens": n_tokens,
        "n_windows": n_windows,
        "num_input_tokens": num_input_tokens,
        "loss": loss,
        "perplexity": math.exp(loss) if n_tokens else float("nan"),
        "bits_per_token": bits_per_unit(nll_sum, n_tokens) if n_tokens else float("nan"),
        "bits_per_character": bits_per_unit(nll_sum, num_characters),
        "bits_per_word": bits_per_unit(nll_sum, num_words),
    }
