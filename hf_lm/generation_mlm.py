"""Generating text from a masked LM: BERT as a Markov random field (Wang & Cho, 2019).

Wang & Cho ("BERT has a Mouth, and It Must Speak") read a masked LM as the conditionals of a Markov
random field over the tokens of a sequence: with every other token fixed, masking position i and
applying the softmax of the MLM gives p(x_i | x_-i). Gibbs sampling then repeatedly picks a position,
masks it and draws a new token from that conditional. Starting from all-[MASK] and sweeping left to
right ("sequential") or in a random order, N sweeps give samples of the model's text distribution.

A function, not a `generate()` method of the masked-LM head: transformers' `generate()` is the
left-to-right decoding contract (`GenerationMixin`, `max_new_tokens`, caches, stopping criteria) and
pipelines such as `text-generation` assume it; a masked LM's `can_generate()` is False there too.
So the sampler lives beside the model in hf_lm (not shipped code), takes any model whose forward
returns `logits` (B, T, V) for `input_ids`, e.g. `HfLmBertForMaskedLM`, and stays on its device.

    >>> from hf_lm.generation_mlm import gibbs_sample, mrf_prompt
    >>> ids = mrf_prompt(tokenizer, length=12, batch_size=4)           # [CLS] [MASK]*12 [SEP]
    >>> out = gibbs_sample(model, ids, mask_token_id=tokenizer.mask_token_id, num_sweeps=20, seed=0)
    >>> tokenizer.batch_decode(out, skip_special_tokens=True)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SWEEP_ORDERS = ("sequential", "random")


@dataclass
class GibbsTrace:
    """What `gibbs_sample(..., return_trace=True)` returns besides the samples.

    Attributes:
        sequences: (B, T) the final samples.
        positions: (S, B) the position resampled at each of the S steps.
        states: (S, B, T) the sequences after each step.
    """

    sequences: torch.Tensor
    positions: torch.Tensor
    states: torch.Tensor


def mrf_prompt(tokenizer, length: int, batch_size: int = 1, prefix: str = "", device=None) -> torch.Tensor:
    """(B, T) `input_ids` to sample from: `prefix`'s tokens then `length` masks, between the
    tokenizer's start and end tokens ([CLS] and [SEP] for BERT, else bos and eos where it has them).

    The masks are the positions `gibbs_sample` resamples; the prefix and the special tokens stay fixed.
    """
    prefix_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"] if prefix else []
    start = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    end = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    ids = (
        [start] * (start is not None)
        + prefix_ids
        + [tokenizer.mask_token_id] * length
        + [end] * (end is not None)
    )
    return torch.tensor([ids] * batch_size, dtype=torch.long, device=device)


def _free_positions(input_ids: torch.Tensor, mask_token_id: int) -> torch.Tensor:
    """(B, K) the positions holding `mask_token_id` in each row, in order; every row must have K of them."""
    free = input_ids == mask_token_id
    counts = free.sum(dim=1)
    if not bool(free.any()) or bool((counts != counts[0]).any()):
        raise ValueError(
            "`input_ids` must hold the same number (at least one) of `mask_token_id` per row: "
            f"the positions to sample; got {counts.tolist()}."
        )
    K = int(counts[0])
    # stable sort puts the free positions first, in their order
    return free.int().argsort(dim=1, descending=True, stable=True)[:, :K]  # (B, K)


def _sweep_order(positions: torch.Tensor, order: str, generator: torch.Generator) -> torch.Tensor:
    """(B, K) the positions in the order one sweep visits them (each row its own random order)."""
    if order == "sequential":
        return positions
    keys = torch.rand(positions.shape, generator=generator, device=positions.device)
    return positions.gather(1, keys.argsort(dim=1))


def _conditional(logits: torch.Tensor, temperature: float, top_k: int | None, banned: list[int]):
    """(B, V) logits at the masked positions -> (B, V) sampling probabilities."""
    logits = logits.float() / temperature
    logits = logits.index_fill(-1, torch.tensor(banned, dtype=torch.long, device=logits.device), -torch.inf)
    if top_k is not None:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, -torch.inf)
    return logits.softmax(dim=-1)


@torch.no_grad()
def gibbs_sample(
    model,
    input_ids: torch.Tensor,
    mask_token_id: int,
    num_sweeps: int = 10,
    order: str = "sequential",
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
    attention_mask: torch.Tensor | None = None,
    banned_token_ids: list[int] | None = None,
    return_trace: bool = False,
) -> torch.Tensor | GibbsTrace:
    """Gibbs sampling from a masked LM's conditionals (Wang & Cho, 2019).

    Each step masks one position per row, runs the model once and draws that position's token from
    softmax(logits / temperature) (restricted to the `top_k` most likely tokens); the rows of the
    batch are independent chains. One sweep visits every sampled position once.

    Args:
        model: a masked LM (`model(input_ids=..., attention_mask=...).logits` is (B, T, V)).
        input_ids: (B, T) the start: the positions holding `mask_token_id` are sampled (the same
            number per row), the others (a prefix, special tokens) stay as they are.
        mask_token_id: the model's [MASK] id.
        num_sweeps: N, the passes over the sampled positions.
        order: "sequential" (left to right) or "random" (a fresh permutation per sweep and row).
        temperature: > 0; top_k: None (the whole vocabulary) or a positive int.
        seed: the sampler's random numbers (a generator on the model's device): same seed, same samples.
        banned_token_ids: ids never sampled; the mask token is always banned (default: also the
            model's `pad_token_id`).
        return_trace: also return each step's position and sequences (`GibbsTrace`).

    Returns:
        (B, T) the samples, or a `GibbsTrace`.
    """
    if order not in SWEEP_ORDERS:
        raise ValueError(f"`order` must be one of {list(SWEEP_ORDERS)}, got {order!r}.")
    if isinstance(num_sweeps, bool) or not isinstance(num_sweeps, int) or num_sweeps < 1:
        raise ValueError(f"`num_sweeps` must be a positive integer, got {num_sweeps!r}.")
    if not temperature > 0:
        raise ValueError(f"`temperature` must be > 0, got {temperature!r}.")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"`top_k` must be None or a positive integer, got {top_k!r}.")
    device = next(model.parameters()).device
    x = input_ids.to(device).clone()
    if attention_mask is not None:
        attention_mask = attention_mask.to(device)
    positions = _free_positions(x, mask_token_id)
    if banned_token_ids is None:
        pad = getattr(model.config, "pad_token_id", None)
        banned_token_ids = [] if pad is None else [pad]
    banned = sorted({mask_token_id, *banned_token_ids})
    generator = torch.Generator(device=device).manual_seed(seed)
    rows = torch.arange(x.shape[0], device=device)
    steps, states = [], []
    for _ in range(num_sweeps):
        for position in _sweep_order(positions, order, generator).unbind(dim=1):  # (B,) each
            x[rows, position] = mask_token_id
            logits = model(input_ids=x, attention_mask=attention_mask).logits[rows, position]  # (B, V)
            probs = _conditional(logits, temperature, top_k, banned)
            x[rows, position] = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            if return_trace:
                steps.append(position)
                states.append(x.clone())
    if not return_trace:
        return x
    return GibbsTrace(sequences=x, positions=torch.stack(steps), states=torch.stack(states))
