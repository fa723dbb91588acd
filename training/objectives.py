"""Training objectives of the one training loop: causal LM ("clm"), masked LM ("mlm") and the
encoder-decoder denoising objectives ("span_corruption", T5; "bart_denoising", BART).

The loop (`training.train`) reads packed blocks of token ids; an objective turns a batch of blocks
into model inputs with labels and says how to evaluate. Causal LM needs nothing: `labels =
input_ids` (the model shifts). Masked LM draws a fresh BERT mask for every micro-batch with
`training.collators_mlm.DataCollatorForMaskedLM` (RoBERTa's dynamic masking), from a generator
seeded by (seed, step, micro-step, rank): the masks are a pure function of the data position, so a
resumed run draws the same masks as an uninterrupted one, whatever happened to the global RNG.

Evaluation of a masked LM reports the masked-token loss and accuracy under a fixed mask, and the
pseudo-perplexity of Salazar et al. (2020, "Masked Language Model Scoring"): mask each token in
turn and score it given all the others, PPPL = exp(-1/N sum_t log P(w_t | w_{\\t})). Unlike the
loss under a random 15% mask it does not depend on a masking draw, and it is the masked-LM
analogue of a causal LM's perplexity (though not comparable to it: each token sees both sides).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from training.collators_mlm import DataCollatorForMaskedLM


def mask_seed(seed: int, step: int, micro: int, rank: int) -> int:
    """The seed of the mask of one micro-batch: independent streams per (seed, step, micro, rank)."""
    return int(np.random.SeedSequence([seed, step, micro, rank]).generate_state(1, dtype=np.uint64)[0] >> 1)


def eval_shards(num_blocks: int, batch_size: int, world: int, rank: int):
    """(batch number, block indices) of this process's eval batches: batch i covers blocks
    [i * b * world, (i + 1) * b * world), dealt round-robin over the processes."""
    for i, start in enumerate(range(0, num_blocks, batch_size * world)):
        idx = torch.arange(start + rank, min(start + batch_size * world, num_blocks), world)
        if len(idx):
            yield i, idx


def mlm_inputs(
    batch: dict[str, torch.Tensor], collator: DataCollatorForMaskedLM, seed: int
) -> dict[str, torch.Tensor]:
    """Mask a batch of blocks (B, T) with a mask drawn from `seed`; returns model inputs with labels.

    Blocks are full (packing leaves no padding), so the attention mask is all ones.
    """
    collator.generator = torch.Generator().manual_seed(seed)
    # a block is a window of packed text: its first token becomes [CLS], so the model sees inputs
    # shaped like its fine-tuning inputs ([CLS] first; documents separated by [SEP])
    ids = batch["input_ids"].clone()
    ids[:, 0] = collator.tokenizer.cls_token_id
    examples = [{"input_ids": row} for row in ids]
    out = collator(examples)
    return {k: out[k] for k in ("input_ids", "attention_mask", "labels")}


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
    for start in range(0, len(rows), batch_size):
        r, c = rows[start : start + batch_size], cols[start : start + batch_size]
        copies = input_ids[r].clone()  # (n, T)
        copies[torch.arange(len(r)), c] = mask_token_id
        mask = attention_mask[r] if attention_mask is not None else None
        logits = model(input_ids=copies, attention_mask=mask).logits  # (n, T, V)
        logp = logits[torch.arange(len(r)), c].float().log_softmax(-1)  # (n, V)
        total += float(logp.gather(1, input_ids[r, c][:, None]).sum())
    return total, len(rows)


def perplexity(mean_nll: float) -> float:
    return math.exp(mean_nll) if mean_nll < 700 else float("inf")


@torch.no_grad()
def evaluate_mlm(
    model,
    blocks: dict[str, torch.Tensor],
    collator: DataCollatorForMaskedLM,
    accelerator,
    batch_size: int,
    num_blocks: int,
    seed: int,
    pseudo_perplexity_blocks: int,
) -> dict[str, float | None]:
    """Masked-token loss and accuracy under a fixed mask, and pseudo-perplexity, over the eval blocks.

    Blocks are sharded round-robin over processes and the sums reduced, so every process returns
    the same numbers. The mask of eval batch i is drawn from `mask_seed(seed, -1, i, 0)`: the same
    masks at every evaluation of a run, so the curve measures the model, not the draw.

    Returns:
        `eval_loss` (nats per masked token), `eval_perplexity` (its exponential: the masked-token
        perplexity), `eval_mlm_accuracy`, and `eval_pseudo_perplexity` (None when disabled).
    """
    model.eval()
    device = accelerator.device
    world, rank = accelerator.num_processes, accelerator.process_index
    totals = torch.zeros(5, dtype=torch.float64, device=device)  # loss, correct, masked, pll, scored
    for i, idx in eval_shards(num_blocks, batch_size, world, rank):
        batch = mlm_inputs(
            {"input_ids": blocks["input_ids"][idx]}, collator, mask_seed(seed, 2**31 - 1, i, rank)
        )
        loss, correct, n = masked_lm_scores(model, batch["input_ids"].to(device), batch["labels"].to(device))
        totals[:3] += torch.tensor([loss, correct, n], dtype=torch.float64, device=device)
    tokenizer = collator.tokenizer
    mine = torch.arange(rank, min(pseudo_perplexity_blocks, len(blocks["input_ids"])), world)
    if len(mine):
        ids = blocks["input_ids"][mine].clone()
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

SEQ2SEQ_OBJECTIVES = ("span_corruption", "bart_denoising")


def seq2seq_inputs(batch: dict[str, torch.Tensor], collator, seed: int) -> dict[str, torch.Tensor]:
    """Noise a batch of blocks (B, T) with noise drawn from `seed`: `input_ids`, `attention_mask`
    (the corrupted source) and `labels` (the target the decoder must produce, -100 padded)."""
    collator.generator = torch.Generator().manual_seed(seed)
    out = collator([{"input_ids": row.tolist()} for row in batch["input_ids"]])
    return {k: out[k] for k in ("input_ids", "attention_mask", "labels")}


@torch.no_grad()
def evaluate_seq2seq(
    model, blocks: dict[str, torch.Tensor], collator, accelerator, batch_size: int, num_blocks: int, seed: int
) -> dict[str, float | None]:
    """Target-token loss and accuracy of a denoising objective under fixed noise (the same at every
    evaluation of a run), over the eval blocks sharded across processes.

    Returns:
        `eval_loss` (nats per target token), `eval_perplexity` and `eval_token_accuracy` (teacher
        forced: the share of target tokens predicted exactly).
    """
    model.eval()
    device = accelerator.device
    world, rank = accelerator.num_processes, accelerator.process_index
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, target tokens
    for i, idx in eval_shards(num_blocks, batch_size, world, rank):
        batch = seq2seq_inputs(
            {"input_ids": blocks["input_ids"][idx]}, collator, mask_seed(seed, 2**31 - 1, i, rank)
        )
        batch = {k: v.to(device) for k, v in batch.items()}
        logits = model(**batch).logits  # (B, L, V)
        selected = batch["labels"] != -100
        logits, targets = logits[selected].float(), batch["labels"][selected]
        loss = torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
        correct = (logits.argmax(-1) == targets).sum()
        totals += torch.stack([loss.double(), correct.double(), selected.sum().double()])
    totals = accelerator.reduce(totals, reduction="sum")
    model.train()
    loss_sum, correct, n = totals.tolist()
    mean = loss_sum / n if n else float("nan")
    return {
        "eval_loss": mean,
        "eval_perplexity": perplexity(mean),
        "eval_token_accuracy": correct / n if n else float("nan"),
    }
