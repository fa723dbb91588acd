"""Held-out evaluation of the training loop's objectives: the metrics, sharded over processes.

- **Causal LM** (`evaluate`): the mean next-token loss over the eval blocks, its perplexity, and the
  bits per token, character and word (`eval_text_units`, `bits_metrics`).
- **Masked LM** (`evaluate_masked_lm`): the masked-token loss and accuracy under a fixed mask, and
  the pseudo-perplexity of Salazar et al. (2020, "Masked Language Model Scoring"): mask each token
  in turn and score it given all the others, PPPL = exp(-1/N sum_t log P(w_t | w_{\\t})). Unlike
  the loss under a random 15% mask it does not depend on a masking draw, and it is the masked-LM
  analogue of a causal LM's perplexity (though not comparable to it: each token sees both sides).
- **Denoising** (`evaluate_denoising`): the target-token loss and teacher-forced accuracy of T5's
  span corruption or BART's denoising, under fixed noise.

Every evaluator reduces its sums over the processes, so every process returns the same numbers.
The masked and denoising evaluators take the objective's `noise(ids, batch_number, rank)`, which
draws the same noise at every evaluation of a run: the curve measures the model, not the draw.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from accelerate import Accelerator

from hf_lm.metrics.sliding_window import bits_per_unit

from ..sharding import catch_up, plan_forwards

# (input_ids (B, T), eval batch number, rank) -> model inputs with labels
Noise = Callable[[torch.Tensor, int, int], dict[str, torch.Tensor]]


def perplexity(mean_nll: float) -> float:
    return math.exp(mean_nll) if mean_nll < 700 else float("inf")


def eval_block_count(num_blocks: int, batch_size: int, world: int, max_batches: int | None) -> int:
    """How many of the eval blocks `evaluate` scores: the first ones, up to `max_batches` per process."""
    return num_blocks if max_batches is None else min(num_blocks, max_batches * batch_size * world)


def eval_shards(num_blocks: int, batch_size: int, world: int, rank: int):
    """(batch number, block indices) of this process's eval batches: batch i covers blocks
    [i * b * world, (i + 1) * b * world), dealt round-robin over the processes."""
    for i, start in enumerate(range(0, num_blocks, batch_size * world)):
        idx = torch.arange(start + rank, min(start + batch_size * world, num_blocks), world)
        if len(idx):
            yield i, idx


# ----------------------------------------------------------------------------------------------
# Causal LM
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def evaluate(
    model, blocks: dict[str, torch.Tensor], accelerator: Accelerator, batch_size: int, max_batches=None
):
    """Mean next-token loss over the eval blocks, sharded round-robin over processes and gathered.

    Every block has `block_size - 1` predicted tokens, so the block-weighted mean of per-batch
    means is the token mean.
    """
    model.eval()
    n = eval_block_count(len(blocks["input_ids"]), batch_size, accelerator.num_processes, max_batches)
    mine = torch.arange(accelerator.process_index, n, accelerator.num_processes)
    total = torch.zeros(2, dtype=torch.float64, device=accelerator.device)  # (loss sum, blocks)
    plan_forwards(model, math.ceil(len(mine) / batch_size), accelerator.device)  # FSDP: every process as many
    for start in range(0, len(mine), batch_size):
        idx = mine[start : start + batch_size]
        batch = {k: v[idx].to(accelerator.device) for k, v in blocks.items()}  # (B, T)
        loss = model(**batch, labels=batch["input_ids"]).loss
        total[0] += loss.double() * len(idx)  # stays on the device: no host sync per batch
        total[1] += len(idx)
    catch_up(model)
    total = accelerator.reduce(total, reduction="sum")
    model.train()
    mean = (total[0] / total[1]).item() if total[1] > 0 else float("nan")
    return mean, math.exp(mean) if mean < 700 else float("inf")


def _characters_and_words(tokenizer, sequences: list[list[int]]) -> tuple[list[int], list[int]]:
    texts = tokenizer.batch_decode(sequences, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    specials = sorted(set(tokenizer.all_special_tokens), key=len, reverse=True)
    out_chars, out_words = [], []
    for text in texts:
        for token in specials:  # a document break: one separator character, and no word
            text = text.replace(token, "\n")
        out_chars.append(len(text))
        out_words.append(len(text.split()))
    return out_chars, out_words


def eval_text_units(tokenizer, blocks: dict[str, torch.Tensor], num_blocks: int) -> dict[str, int]:
    """The scored tokens of the first `num_blocks` eval blocks, and the characters and words they spell.

    A block's loss scores its tokens 1..T-1 (token 0 is context only). Their text is the decoded
    block minus its decoded first token: characters are counted as the difference of the two
    lengths, words as the difference of the two whitespace-split counts. So a word is counted in
    the block where it starts, once, even when its tokens run on into the next block (whose token
    0 is context). A special token (the EOS between documents) counts as one separator
    character, as the blank line between two paragraphs of a text file is one document break.
    Exact for byte-level BPE and character tokenizers (but for a multi-byte character split by
    the first token); for WordPiece and Unigram the decoded spacing makes it a close estimate.

    Returns:
        `{"tokens": num_blocks * (T - 1), "characters": ..., "words": ...}`.
    """
    ids = blocks["input_ids"][:num_blocks].tolist()
    chars, words = _characters_and_words(tokenizer, ids)
    first_chars, first_words = _characters_and_words(tokenizer, [block[:1] for block in ids])
    block_size = blocks["input_ids"].shape[1]
    return {
        "tokens": num_blocks * (block_size - 1),
        "characters": sum(chars) - sum(first_chars),
        "words": sum(words) - sum(first_words),
    }


def bits_metrics(loss: float, units: dict[str, int]) -> dict[str, float | None]:
    """Held-out bits per token, character and word from the mean loss (nats per scored token).

    The total information is `loss * tokens / ln 2` bits, shared out over the characters and words
    those tokens spell (None where there are none).
    """
    nll_sum = loss * units["tokens"]
    return {
        "eval_bits_per_token": bits_per_unit(nll_sum, units["tokens"]),
        "eval_bits_per_character": bits_per_unit(nll_sum, units["characters"]),
        "eval_bits_per_word": bits_per_unit(nll_sum, units["words"]),
    }


# ----------------------------------------------------------------------------------------------
# Masked LM
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def masked_lm_scores(model, input_ids: torch.Tensor, labels: torch.Tensor) -> tuple[float, int, int]:
    """(summed loss, correct predictions, masked tokens) of a masked batch.

    Args:
        input_ids: (B, T) masked inputs.
        labels: (B, T) original ids at masked positions, -100 elsewhere.
    """
    logits = model(input_ids=input_ids, labels=None).logits  # (B, T, V)
    selected = labels != -100
    logits, targets = logits[selected].float(), labels[selected]  # (N, V), (N,)
    loss = torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
    correct = (logits.argmax(-1) == targets).sum()
    return float(loss), int(correct), int(selected.sum())


@torch.no_grad()
def pseudo_log_likelihood(
    model,
    input_ids: torch.Tensor,
    mask_token_id: int,
    special_ids: set[int] | None = None,
    attention_mask: torch.Tensor | None = None,
    batch_size: int = 64,
) -> tuple[float, int]:
    """Sum over tokens of log P(w_t | all other tokens), masking one token at a time.

    Args:
        model: a masked LM returning `logits` (B, T, V).
        input_ids: (B, T) unmasked token ids.
        mask_token_id: the id of `[MASK]`.
        special_ids: ids never scored (`[CLS]`, `[SEP]`, padding).
        attention_mask: (B, T), 0 for padding (never scored).
        batch_size: masked copies per forward pass.

    Returns:
        `(sum of log-probabilities, number of scored tokens)`; PPPL = exp(-sum / n).
    """
    special = torch.tensor(sorted(special_ids or set()), dtype=torch.long, device=input_ids.device)
    scored = ~torch.isin(input_ids, special)
    if attention_mask is not None:
        scored &= attention_mask.bool()
    rows, cols = scored.nonzero(as_tuple=True)  # one masked copy per scored token
    total = 0.0
    plan_forwards(model, math.ceil(len(rows) / batch_size), input_ids.device)  # FSDP: every process as many
    for start in range(0, len(rows), batch_size):
        r, c = rows[start : start + batch_size], cols[start : start + batch_size]
        copies = input_ids[r].clone()  # (n, T)
        copies[torch.arange(len(r)), c] = mask_token_id
        mask = attention_mask[r] if attention_mask is not None else None
        logits = model(input_ids=copies, attention_mask=mask).logits  # (n, T, V)
        logp = logits[torch.arange(len(r)), c].float().log_softmax(-1)  # (n, V)
        total += float(logp.gather(1, input_ids[r, c][:, None]).sum())
    catch_up(model)
    return total, len(rows)


@torch.no_grad()
def evaluate_masked_lm(
    model,
    blocks: dict[str, torch.Tensor],
    noise: Noise,
    tokenizer,
    accelerator,
    batch_size: int,
    num_blocks: int,
    pseudo_perplexity_blocks: int,
) -> dict[str, float | None]:
    """Masked-token loss and accuracy under a fixed mask, and pseudo-perplexity, over the eval blocks.

    Returns:
        `eval_loss` (nats per masked token), `eval_perplexity` (its exponential: the masked-token
        perplexity), `eval_mlm_accuracy`, and `eval_pseudo_perplexity` (None when disabled).
    """
    model.eval()
    device = accelerator.device
    world, rank = accelerator.num_processes, accelerator.process_index
    totals = torch.zeros(5, dtype=torch.float64, device=device)  # loss, correct, masked, pll, scored
    shards = list(eval_shards(num_blocks, batch_size, world, rank))
    plan_forwards(model, len(shards), device)  # FSDP: every process as many
    for i, idx in shards:
        batch = noise(blocks["input_ids"][idx], i, rank)
        loss, correct, n = masked_lm_scores(model, batch["input_ids"].to(device), batch["labels"].to(device))
        totals[:3] += torch.tensor([loss, correct, n], dtype=torch.float64, device=device)
    catch_up(model)
    # every process scores its share, an empty one too (under FSDP it still makes as many forwards)
    mine = torch.arange(rank, min(pseudo_perplexity_blocks, len(blocks["input_ids"])), world)
    ids = blocks["input_ids"][mine].clone()  # (m, T)
    ids[:, 0] = tokenizer.cls_token_id  # scored like the training inputs, which start with [CLS]
    special = {tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id}
    pll, scored = pseudo_log_likelihood(
        model, ids.to(device), tokenizer.mask_token_id, special, batch_size=64
    )
    totals[3:] += torch.tensor([pll, scored], dtype=torch.float64, device=device)
    totals = accelerator.reduce(totals, reduction="sum")
    model.train()
    loss_sum, correct, masked, pll, scored = totals.tolist()
    mean = loss_sum / masked if masked else float("nan")
    return {
        "eval_loss": mean,
        "eval_perplexity": perplexity(mean),
        "eval_mlm_accuracy": correct / masked if masked else float("nan"),
        "eval_pseudo_perplexity": perplexity(-pll / scored) if scored else None,
    }


# ----------------------------------------------------------------------------------------------
# Denoising objectives of encoder-decoders (T5's span corruption, BART's text infilling)
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def evaluate_denoising(
    model, blocks: dict[str, torch.Tensor], noise: Noise, accelerator, batch_size: int, num_blocks: int
) -> dict[str, float | None]:
    """Target-token loss and accuracy of a denoising objective under fixed noise, over the eval
    blocks sharded across processes.

    Returns:
        `eval_loss` (nats per target token), `eval_perplexity` and `eval_token_accuracy` (teacher
        forced: the share of target tokens predicted exactly).
    """
    model.eval()
    device = accelerator.device
    world, rank = accelerator.num_processes, accelerator.process_index
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, target tokens
    shards = list(eval_shards(num_blocks, batch_size, world, rank))
    plan_forwards(model, len(shards), device)  # FSDP: every process as many
    for i, idx in shards:
        batch = {k: v.to(device) for k, v in noise(blocks["input_ids"][idx], i, rank).items()}
        logits = model(**batch).logits  # (B, L, V)
        selected = batch["labels"] != -100
        logits, targets = logits[selected].float(), batch["labels"][selected]
        loss = torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
        correct = (logits.argmax(-1) == targets).sum()
        totals += torch.stack([loss.double(), correct.double(), selected.sum().double()])
    catch_up(model)
    totals = accelerator.reduce(totals, reduction="sum")
    model.train()
    loss_sum, correct, n = totals.tolist()
    mean = loss_sum / n if n else float("nan")
    return {
        "eval_loss": mean,
        "eval_perplexity": perplexity(mean),
        "eval_token_accuracy": correct / n if n else float("nan"),
    }
