"""Losses shared by the heads: label checks, `num_items_in_batch` (gradient accumulation equal to one
big batch), causal-LM, masked-LM and classification losses, `shift_tokens_right`.

Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .hflm_inputs import (
    _require_integer,
    _require_tensor,
    check_input_ids,
    host_read,
    pool_last_token,
)


def classify_last_token(
    classifier, config, hidden_states, attention_mask, input_ids, labels, num_items_in_batch=None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logits (B, num_labels), loss or None) of `classifier` on each row's last real token
    (`pool_last_token`); the loss by `config.problem_type` (`sequence_classification_loss`)."""
    logits = classifier(pool_last_token(hidden_states, attention_mask, input_ids, config.pad_token_id))
    if labels is None:
        return logits, None
    return logits, sequence_classification_loss(config, logits, labels, num_items_in_batch)


def num_items_error(num_items_in_batch) -> ValueError:
    value = num_items_in_batch.item() if torch.is_tensor(num_items_in_batch) else num_items_in_batch
    return ValueError(
        f"`num_items_in_batch` must be a finite positive count of the target items the summed loss is divided "
        f"by, got {value!r}. (An accumulated batch whose labels are all -100 has nothing to learn from: "
        "skip it rather than divide by 0.)"
    )


def num_items_flag(num_items_in_batch) -> torch.Tensor | None:
    """Check `num_items_in_batch` (the count `Trainer`, or a gradient-accumulation loop, divides a
    summed loss by; 0 would make the loss 0/0 = nan): a Python number now; for a tensor, its shape and
    dtype now and its value as a returned 0-dim bool flag, for the caller to read with its own value
    checks in one host read (raise `num_items_error` when it is False)."""
    n = num_items_in_batch
    if n is None:
        return None
    if torch.is_tensor(n):
        if n.numel() != 1 or n.dtype == torch.bool or n.dtype.is_complex:
            raise ValueError(
                "`num_items_in_batch` must be a number or a one-element tensor, got a "
                f"{n.dtype} tensor of shape {tuple(n.shape)}."
            )
        n = n.reshape(())
        return torch.isfinite(n) & (n > 0)
    if isinstance(n, bool) or not isinstance(n, (int, float)) or not (math.isfinite(n) and n > 0):
        raise num_items_error(n)
    return None


def wants_router_logits(config, output_router_logits: bool | None) -> bool:
    """Whether a forward returns a mixture of experts' router logits: its argument, else the config's."""
    return config.output_router_logits if output_router_logits is None else bool(output_router_logits)


def check_labels(
    labels,
    expected_shape,
    num_classes: int,
    ignore_index: int = -100,
    num_items_in_batch=None,
    what: str = "token ids",
    name: str = "labels",
) -> None:
    """Token-level `labels`: the expected shape (None: any non-empty (batch, length)), integer ids in
    [0, num_classes) or `ignore_index`; `num_items_in_batch` is checked in the same host read.
    `name`: the argument as the user passed it (`shift_labels`), for the error messages."""
    _require_tensor(labels, name, what)
    if expected_shape is None:
        if labels.dim() != 2:
            raise ValueError(
                f"`{name}` must be a (batch, target_len) tensor, got shape {tuple(labels.shape)}."
            )
    elif tuple(labels.shape) != tuple(expected_shape):
        raise ValueError(
            f"`{name}` must have shape {tuple(expected_shape)} like the inputs, got {tuple(labels.shape)}."
        )
    if labels.numel() == 0:
        raise ValueError(f"`{name}` is empty (shape {tuple(labels.shape)}).")
    _require_integer(labels, name, what)
    count_ok = num_items_flag(num_items_in_batch)
    if torch.compiler.is_compiling():
        return
    valid = (labels == ignore_index) | ((labels >= 0) & (labels < num_classes))
    flags = host_read(valid.all(), *([] if count_ok is None else [count_ok]))
    if not flags[0]:
        raise ValueError(
            f"`{name}` contains {int(labels[~valid][0])}: labels must be {what} in [0, {num_classes}) "
            f"or {ignore_index} (ignored)."
        )
    if not all(flags):
        raise num_items_error(num_items_in_batch)


def causal_lm_loss(logits: torch.Tensor, labels, vocab_size: int, kwargs: dict) -> torch.Tensor | None:
    """A causal LM head's loss, from `labels` or from `kwargs["shift_labels"]`; None without either.

    `labels` (B, T) are shifted inside (`labels = input_ids` is right: position t is scored against
    labels[t + 1], T - 1 predictions). `shift_labels` (B, T), transformers' name for targets already
    aligned with the positions, are scored as they are: every position predicts, as nanoGPT's
    `(x, y)` windows do, and the loss stays inside the forward (inside a compiled graph with it).
    They win over `labels`, as in transformers' `ForCausalLMLoss`. `kwargs["num_items_in_batch"]`
    turns the mean into a sum divided by it.
    """
    shift_labels = kwargs.get("shift_labels")
    targets, name = (labels, "labels") if shift_labels is None else (shift_labels, "shift_labels")
    if targets is None:
        return None
    n_items = kwargs.get("num_items_in_batch")
    check_labels(targets, logits.shape[:2], vocab_size, num_items_in_batch=n_items, name=name)
    return lm_loss(logits, targets, shift=shift_labels is None, num_items_in_batch=n_items)


def check_seq2seq_labels(
    labels: torch.Tensor,
    input_ids: torch.Tensor | None,
    encoder_outputs,
    vocab_size: int,
    num_items_in_batch=None,
) -> None:
    """Check an encoder-decoder's `labels` before they become decoder inputs, so a bad label is
    reported as a label (and an empty or malformed source, read first by the encoder, as the source)."""
    if input_ids is not None and encoder_outputs is None:
        check_input_ids(input_ids, vocab_size, values=False)
    check_labels(labels, None, vocab_size, num_items_in_batch=num_items_in_batch)


def seq2seq_decoder_inputs(
    model,
    labels: torch.Tensor | None,
    input_ids: torch.Tensor | None,
    encoder_outputs,
    decoder_input_ids: torch.Tensor | None,
    decoder_inputs_embeds: torch.Tensor | None,
    num_items_in_batch=None,
) -> torch.Tensor | None:
    """An encoder-decoder LM head's decoder inputs: the given ones, else (transformers' convention)
    `model.prepare_decoder_input_ids_from_labels(labels)`, after checking `labels`
    (`check_seq2seq_labels`). None when there are neither."""
    if labels is not None:
        check_seq2seq_labels(labels, input_ids, encoder_outputs, model.config.vocab_size, num_items_in_batch)
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
    return decoder_input_ids


def seq2seq_lm_loss(
    logits: torch.Tensor, labels: torch.Tensor | None, num_items_in_batch, shaped_like: str
) -> torch.Tensor | None:
    """An encoder-decoder's LM loss on unshifted `labels` (B, T): position t is scored against
    `labels[:, t]` (-100 ignored). None without labels; `shaped_like` says in the error what the
    labels must match."""
    if labels is None:
        return None
    if labels.shape != logits.shape[:2]:
        raise ValueError(
            f"`labels` must have shape {tuple(logits.shape[:2])} like {shaped_like}, got {tuple(labels.shape)}."
        )
    return lm_loss(logits, labels, shift=False, num_items_in_batch=num_items_in_batch)


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder inputs from targets (every encoder-decoder family): the start token, then the targets
    moved one step right.

    Args:
        labels: (B, T) target ids, -100 where ignored.

    Returns:
        (B, T) decoder input ids, -100 replaced by the pad id (the decoder never reads them as
        targets, and an embedding lookup of -100 would fail).
    """
    shifted = labels.new_full(labels.shape, decoder_start_token_id)
    shifted[:, 1:] = labels[:, :-1]
    return shifted.masked_fill(shifted == -100, pad_token_id)


def lm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    shift: bool,
    num_items_in_batch: torch.Tensor | int | None = None,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Token-level cross-entropy in fp32.

    Args:
        logits: (B, T, V).
        labels: (B, T); with `shift` position t is scored against label t+1 (causal LMs).
        num_items_in_batch: the number of target tokens in the whole accumulated batch; when given
            the loss is a sum divided by it, so gradient accumulation equals one large batch.
        label_smoothing: ε of a target mixed with the uniform distribution over the vocabulary
            (transformers' `LabelSmoother` computes the same).

    The labels (and `num_items_in_batch`) are those `check_labels` accepted.
    """
    if shift:
        # shift the (small) labels rather than the (large) logits: no copy of the (B, T, V) tensor
        labels = F.pad(labels, (0, 1), value=ignore_index)[:, 1:]
    logits = logits.reshape(-1, logits.shape[-1]).float()
    labels = labels.reshape(-1).to(device=logits.device, dtype=torch.long)  # int32 ids are ids too
    if num_items_in_batch is None:
        return F.cross_entropy(logits, labels, ignore_index=ignore_index, label_smoothing=label_smoothing)
    total = F.cross_entropy(
        logits, labels, ignore_index=ignore_index, reduction="sum", label_smoothing=label_smoothing
    )
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(total.device).reshape(())  # a (1,) count: a 0-dim loss
    return total / num_items_in_batch


def sequence_classification_loss(
    config, logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: torch.Tensor | int | None = None
) -> torch.Tensor:
    """Regression (MSE), single-label (cross-entropy) or multi-label (BCE), as transformers decides it.

    With `num_items_in_batch` (Trainer passes the number of label values in the whole accumulated
    batch: examples, or examples x labels for multi-label and multi-output regression) the loss is a
    sum divided by it, so gradient accumulation equals one big batch instead of being
    `gradient_accumulation_steps` times too large.
    """
    reduction = "mean" if num_items_in_batch is None else "sum"

    def reduce(loss: torch.Tensor) -> torch.Tensor:
        if num_items_in_batch is None:
            return loss
        n = num_items_in_batch
        return loss / (n.to(loss.device).reshape(()) if torch.is_tensor(n) else n)

    _require_tensor(labels, "labels", "class ids or targets")
    count_ok = num_items_flag(num_items_in_batch)
    flags = [] if count_ok is None else [count_ok]  # value checks, read on the host together
    num_labels = logits.shape[-1]
    if config.problem_type is None:
        if num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    labels = labels.to(logits.device)
    B = logits.shape[0]
    if config.problem_type == "single_label_classification":
        if labels.dim() != 1 or labels.shape[0] != B:
            raise ValueError(f"`labels` must have shape ({B},) of class ids, got {tuple(labels.shape)}.")
        _require_integer(labels, "labels", "class ids")
        flags.insert(0, ((labels >= 0) & (labels < num_labels)).all())
    elif labels.dtype.is_complex:
        raise ValueError(f"`labels` must hold real targets, got dtype {labels.dtype}.")
    elif config.problem_type == "regression" and num_labels == 1:
        if labels.numel() != B:
            raise ValueError(
                f"`labels` must hold one target per example ({B}), got shape {tuple(labels.shape)}."
            )
    elif tuple(labels.shape) != tuple(logits.shape):
        kind = "regression" if config.problem_type == "regression" else "multi-label"
        raise ValueError(f"{kind} `labels` must have shape {tuple(logits.shape)}, got {tuple(labels.shape)}.")
    if flags and not torch.compiler.is_compiling():
        ok = host_read(*flags)
        if not ok[0] and config.problem_type == "single_label_classification":
            raise ValueError(f"`labels` must be class ids in [0, {num_labels}), got {labels.tolist()}.")
        if not all(ok):
            raise num_items_error(num_items_in_batch)
    if config.problem_type == "regression":
        return reduce(
            F.mse_loss(logits.squeeze(-1).float(), labels.float().view(-1), reduction=reduction)
            if num_labels == 1
            else F.mse_loss(logits.float(), labels.float(), reduction=reduction)
        )
    if config.problem_type == "single_label_classification":
        return reduce(F.cross_entropy(logits.float(), labels.long(), reduction=reduction))
    return reduce(F.binary_cross_entropy_with_logits(logits.float(), labels.float(), reduction=reduction))
