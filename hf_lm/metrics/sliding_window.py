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
    if max_length < 2:
        raise ValueError(f"`max_length` must be >= 2 (one context and one target token), got {max_length}.")
    if not 1 <= stride <= max_length:
        raise ValueError(f"`stride` must be in [1, max_length={max_length}], got {stride}.")
    windows = []
    prev_end = 0
    for begin in range(0, num_tokens, stride):
        end = min(begin + max_length, num_tokens)
        first_target = max(prev_end, begin + 1)
        if first_target < end:
            windows.append(Window(begin, end, first_target))
        prev_end = end
        if end == num_tokens:
            break
    return windows


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


@torch.inference_mode()
def sliding_window_perplexity(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    max_length: int,
    stride: int,
    device: torch.device | str | None = None,
    batch_size: int = 1,
    num_characters: int | None = None,
    num_words: int | None = None,
) -> dict:
    """Score a token stream with a causal LM, every scored token exactly once.

    The log-likelihoods are summed in fp32 from the logits (not averaged by the model), so the
    result is exact whatever the window sizes.

    Args:
        model: a causal LM; `model(input_ids=(B, T)).logits` is (B, T, V), position t predicting t+1.
        input_ids: (N,) the token stream (a (1, N) tensor is accepted).
        max_length: the window size (at most the model's context length).
        stride: the step between window starts, `1 <= stride <= max_length`. Smaller strides give
            more context per scored token (lower perplexity) for more compute.
        device: where to run; defaults to the device of the model's first parameter.
        batch_size: how many equal-length windows go through the model at once.
        num_characters: optional length of the text in characters, for `bits_per_character`.
        num_words: optional length of the text in words, for `bits_per_word`.

    Returns:
        A dict with `nll_sum` (total nats), `n_tokens` (tokens scored), `loss` (mean nats per scored
        token), `perplexity` (exp(loss)), `bits_per_token`, `bits_per_character` and
        `bits_per_word` (None unless the count is given), and `n_windows`. With no scorable token
        (N < 2) loss and perplexity are NaN.

    Raises:
        ValueError: for a bad shape, `max_length`, `stride` or `batch_size`.
    """
    if input_ids.dim() == 2 and input_ids.shape[0] == 1:
        input_ids = input_ids[0]
    if input_ids.dim() != 1:
        raise ValueError(f"`input_ids` must be a 1-D token stream (N,), got shape {tuple(input_ids.shape)}.")
    if batch_size < 1:
        raise ValueError(f"`batch_size` must be >= 1, got {batch_size}.")
    if device is None:
        param = next(model.parameters(), None)
        device = param.device if param is not None else torch.device("cpu")
    windows = sliding_windows(input_ids.shape[0], max_length, stride)

    was_training = model.training
    model.eval()
    # window k scores its tokens [first_target, end): counted on the host, summed on the device
    n_tokens = sum(w.end - w.first_target for w in windows)
    nll = torch.zeros((), dtype=torch.float64, device=device)  # no host sync until the end
    try:
        # windows of equal length batch together; only the last one can be shorter
        groups: dict[int, list[Window]] = {}
        for window in windows:
            groups.setdefault(window.end - window.begin, []).append(window)
        for length, group in groups.items():
            for start in range(0, len(group), batch_size):
                chunk = group[start : start + batch_size]
                ids = torch.stack([input_ids[w.begin : w.end] for w in chunk]).to(device)  # (B, L)
                logits = model(input_ids=ids).logits  # (B, L, V)
                # position j predicts token j+1: (B, L-1, V) log-probs of targets (B, L-1)
                log_probs = F.log_softmax(logits[:, :-1].float(), dim=-1)
                token_lp = log_probs.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # (B, L-1)
                # target index (within the window) of each of the L-1 predictions is 1..L-1
                target_pos = torch.arange(1, length, device=token_lp.device)  # (L-1,)
                offsets = torch.tensor([w.first_target - w.begin for w in chunk], device=token_lp.device)
                scored = target_pos.unsqueeze(0) >= offsets.unsqueeze(1)  # (B, L-1)
                nll -= token_lp[scored].double().sum()
    finally:
        model.train(was_training)
    nll_sum = nll.item()

    loss = nll_sum / n_tokens if n_tokens else float("nan")
    logger.debug("scored %d tokens in %d windows: loss %.4f", n_tokens, len(windows), loss)
    return {
        "nll_sum": nll_sum,
        "n_tokens": n_tokens,
        "n_windows": len(windows),
        "loss": loss,
        "perplexity": math.exp(loss) if n_tokens else float("nan"),
        "bits_per_token": bits_per_unit(nll_sum, n_tokens) if n_tokens else float("nan"),
        "bits_per_character": bits_per_unit(nll_sum, num_characters),
        "bits_per_word": bits_per_unit(nll_sum, num_words),
    }
