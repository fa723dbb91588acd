"""Input checks shared by every family, and where new tokens sit in a cache.

Bad input fails here, with a ValueError naming the argument, not as a torch error deep inside `forward`.
Shipped model code (copied by `save_pretrained`): imports only torch, transformers and siblings.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import Cache

# ----------------------------------------------------------------------------------------------
# Input checks and losses shared by the heads.
#
# Bad input fails here, with a ValueError naming the argument, not as a torch error deep inside
# `forward` (or, worse, as silently wrong numbers). Types, shapes and dtypes are checked always:
# they are static inside a compiled graph. Values are checked outside compiled graphs only (they
# are read on the host, which would break the graph), and the value checks of one call are read
# together: each host read of a GPU tensor (`bool(t)`, `.item()`, `.tolist()`) waits for the
# device to finish all the work queued before it.
# ----------------------------------------------------------------------------------------------


def check_unicode_text(text: str, where: str) -> None:
    """A ValueError naming `where` and the position of a lone surrogate (e.g. "\\ud800", from a bad
    decode): text that is not valid Unicode, which a tokenizer cannot encode (the pipelines' inputs)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(
            f"{where} holds {text[err.start]!r} at character {err.start}, a lone surrogate that is not valid "
            "Unicode text; remove it or decode the source with errors='replace'."
        ) from err


def is_integer_dtype(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def _require_tensor(x, name: str, what: str) -> None:
    if not torch.is_tensor(x):
        raise ValueError(f"`{name}` must be a tensor of {what}, got {type(x).__name__}.")


def _require_integer(x: torch.Tensor, name: str, what: str) -> None:
    if not is_integer_dtype(x.dtype):
        raise ValueError(f"`{name}` must hold integer {what}, got dtype {x.dtype}.")


def host_read(*flags: torch.Tensor) -> list[bool]:
    """Several 0-dim bool checks read on the host at once: one device sync instead of one per check."""
    device = flags[0].device
    return torch.stack([flag.reshape(()).to(device) for flag in flags]).tolist()


def _min_max(x: torch.Tensor) -> tuple[int, int]:
    """(min, max) of a non-empty integer tensor, in one host read."""
    lo, hi = torch.stack(torch.aminmax(x)).tolist()
    return lo, hi


def check_input_ids(input_ids, vocab_size: int, name: str = "input_ids", values: bool = True) -> None:
    """A (B, T) tensor of token ids in [0, vocab_size): a message a user can act on, not an index
    error deep inside the embedding. `values=False` skips the host read of the values, for ids that
    are checked again where they are embedded."""
    _require_tensor(input_ids, name, "token ids")
    if input_ids.dim() != 2:
        raise ValueError(f"`{name}` must be a (batch, seq_len) tensor, got shape {tuple(input_ids.shape)}.")
    if input_ids.numel() == 0:
        raise ValueError(f"`{name}` is empty (shape {tuple(input_ids.shape)}): pass at least one token.")
    _require_integer(input_ids, name, "token ids")
    if not values or torch.compiler.is_compiling():
        return
    lo, hi = _min_max(input_ids)
    if lo < 0 or hi >= vocab_size:
        bad = lo if lo < 0 else hi
        raise ValueError(
            f"`{name}` contains token id {bad}, outside the vocabulary [0, {vocab_size}). "
            "Was the input made with a different tokenizer than this model's?"
        )


def embed_inputs(
    input_ids: torch.Tensor | None,
    inputs_embeds: torch.Tensor | None,
    embed_tokens: nn.Embedding,
    vocab_size: int,
    width_name: str = "hidden_size",
    names: tuple[str, str] = ("input_ids", "inputs_embeds"),
) -> torch.Tensor:
    """The (B, T, width) input embeddings: looked up from checked `input_ids`, or `inputs_embeds` checked.

    `names`: the two arguments as the caller's user passed them (a decoder's are
    `decoder_input_ids` and `decoder_inputs_embeds`), for the error messages.
    """
    ids_name, embeds_name = names
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError(f"Pass exactly one of `{ids_name}` or `{embeds_name}`.")
    if input_ids is not None:
        check_input_ids(input_ids, vocab_size, ids_name)
        if input_ids.dtype not in (torch.int64, torch.int32):
            input_ids = input_ids.long()  # the lookup takes int64 or int32 indices (uint8 ids are fine ids)
        return embed_tokens(input_ids)  # (B, T, width)
    width = embed_tokens.embedding_dim
    _require_tensor(inputs_embeds, embeds_name, "embeddings")
    if inputs_embeds.dim() != 3 or 0 in inputs_embeds.shape[:2] or inputs_embeds.shape[2] != width:
        raise ValueError(
            f"`{embeds_name}` must be a non-empty (batch, seq_len, {width_name}={width}) tensor, "
            f"got {tuple(inputs_embeds.shape)}."
        )
    if not inputs_embeds.is_floating_point():
        raise ValueError(
            f"`{embeds_name}` must hold floating-point vectors, got dtype {inputs_embeds.dtype}."
        )
    return inputs_embeds


def _padding_mask_is_full(mask: torch.Tensor, name: str, require_token: bool = False) -> bool:
    """Whether a padding mask is all ones (nothing padded), after checking, in one host read, that it
    holds only 1 (token) and 0 (padding), and with `require_token` a token in every row. A mask
    holding 2 or 0.5 would otherwise pass as "attend" everywhere it is not 0. Inside a compiled
    graph nothing is read and the answer is False (the mask is applied as it is)."""
    if torch.compiler.is_compiling():
        return False
    ones = mask == 1
    binary = ones | (mask == 0)
    flags = [ones.all(), binary.all()]
    if require_token:
        flags.append(ones.any(dim=-1).all())
    full, is_binary, *has_tokens = host_read(*flags)
    if not is_binary:
        raise ValueError(
            f"`{name}` must hold 1 for tokens and 0 for padding, got the value {mask[~binary][0].item()}."
        )
    if has_tokens and not has_tokens[0]:
        row = int((~ones.any(dim=-1)).nonzero()[0, 0])
        raise ValueError(f"`{name}` row {row} has no real token: every source needs at least one.")
    return full


def check_padding_mask(
    attention_mask: torch.Tensor | None,
    batch: int,
    length: int,
    name: str = "attention_mask",
    require_token: bool = False,
) -> torch.Tensor | None:
    """Check a (B, S) padding mask (its shape, and that it holds only 1 and 0); return None when nothing
    is padded, so attention can take its unmasked fast path (the value check and the fast path are
    skipped inside a compiled graph). `require_token`: every row must hold a token (a source the
    decoder attends to)."""
    if attention_mask is None:
        return None
    _require_tensor(attention_mask, name, "1 (token) and 0 (padding) values")
    if tuple(attention_mask.shape) != (batch, length):
        raise ValueError(
            f"`{name}` must have shape (batch, seq_len) = ({batch}, {length}), got {tuple(attention_mask.shape)}."
        )
    return None if _padding_mask_is_full(attention_mask, name, require_token) else attention_mask


def check_cache_type(past_key_values, cache_class: type, what: str) -> None:
    """`past_key_values` is None or a cache of the model's kind (not a legacy tuple, not a stray value)."""
    if past_key_values is not None and not isinstance(past_key_values, cache_class):
        hint = (
            " (tuple caches were removed in transformers 5)"
            if isinstance(past_key_values, (tuple, list))
            else ""
        )
        raise ValueError(f"`past_key_values` must be {what}, got {type(past_key_values).__name__}{hint}.")


def cache_lengths(past_key_values, q_len: int) -> tuple[int | torch.Tensor, int, int]:
    """Where T new tokens sit among the keys attention sees, for any transformers `Cache` (or None).

    Returns:
        `(past_len, kv_len, offset)`. `past_len`: tokens already cached. An int, except for a filled
        `StaticCache`, which counts in a 0-dim tensor on its device so that a compiled decoding
        step neither reads the device nor recompiles as it grows: use it in tensor arithmetic only
        (`torch.arange(T) + past_len`), never in Python branches or slices, and before the layers
        run (it is the cache's own counter, which their `update` increments in place). `kv_len`
        (an int): the keys attention sees, past + T for a dynamic cache and the preallocated length
        for a static one, whose still empty slots follow the new tokens and must be masked.
        `offset` (an int): how many of the oldest keys a sliding-window cache has dropped
        (transformers' `DynamicSlidingWindowLayer` / `StaticSlidingWindowLayer`, made for a config
        with a `sliding_window`): the keys attention sees are tokens `offset .. offset + kv_len - 1`;
        0 for every other cache, and for None.
    """
    if past_key_values is None:
        return 0, q_len, 0
    check_cache_type(
        past_key_values,
        Cache,
        "a transformers `Cache` (a `DynamicCache`, `StaticCache` or `EncoderDecoderCache`, such as an "
        "earlier call with `use_cache=True` returned)",
    )
    # an EncoderDecoderCache answers for its self-attention cache
    past_len = past_key_values.get_seq_length()
    kv_len, offset = past_key_values.get_mask_sizes(q_len, 0)
    # a full static cache would fail inside its own update with an index error; a static count is
    # read on the host, so only outside compiled graphs (a dynamic cache's kv_len is past + T; a
    # sliding-window cache's keys start at `offset`, the older ones dropped)
    if not torch.compiler.is_compiling() and int(past_len) + q_len > kv_len + offset:
        raise ValueError(
            f"The static cache holds {kv_len} tokens: {int(past_len)} cached and {q_len} new ones do not fit. "
            "Give it a larger `max_cache_len`."
        )
    return past_len, kv_len, offset


def packed_documents(position_ids: torch.Tensor, batch: int) -> torch.Tensor | None:
    """(B, T) document index of each token of padding-free packed rows (transformers'
    `DataCollatorWithFlattening`, TRL's `padding_free`: sequences laid end to end, no attention mask,
    positions restarting at each); a document starts wherever a position is not its predecessor's + 1.
    None when no row restarts, as transformers' `find_packed_sequence_indices` (a host read, skipped
    under compile, where the documents are always returned)."""
    positions = position_ids.expand(batch, -1)  # (B, T)
    starts = torch.diff(positions, prepend=positions[:, :1] - 1, dim=-1) != 1
    docs = starts.cumsum(dim=-1)
    if not torch.compiler.is_compiling() and not bool(docs[:, -1].any()):
        return None
    return docs


def first_token_states(hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """(B, T, C) -> (B, C): each row's first real token, BERT's [CLS]. Index 0 unless the row is
    left-padded (a tokenizer's `padding_side` is the user's), where [CLS] comes after the padding."""
    if attention_mask is None:
        return hidden_states[:, 0]
    first = attention_mask.to(hidden_states.device).long().argmax(dim=1)  # (B,) the first 1 of each row
    return hidden_states[torch.arange(hidden_states.shape[0], device=hidden_states.device), first]


def refuse_packed_rows(position_ids, attention_mask, model_name: str) -> None:
    """A model that reads no positions (a recurrence, a fixed window) cannot keep the sequences of
    padding-free packed rows apart (`position_ids` restarting, no attention mask): refuse them rather
    than let one sequence's state or window run into the next."""
    if not torch.is_tensor(position_ids) or position_ids.dim() != 2 or attention_mask is not None:
        return
    if packed_documents(position_ids, position_ids.shape[0]) is not None:
        raise ValueError(
            f"`position_ids` restart inside a row without an attention mask: a padding-free packed batch "
            f"(transformers' `DataCollatorWithFlattening`, TRL's `padding_free`). {model_name} reads no "
            "positions, so each sequence would continue the previous one: give it padded batches."
        )


def check_position_ids(
    position_ids,
    batch: int,
    length: int,
    max_positions: int | None = None,
    name: str = "position_ids",
    values: bool = True,
) -> None:
    """User-given (B|1, T) positions: integers, non-negative and, for a learned table of
    `max_positions` vectors, below it (one host read, skipped in compiled graphs or with
    `values=False`, for a model that ignores the values)."""
    _require_tensor(position_ids, name, "positions")
    if position_ids.dim() != 2 or position_ids.shape[-1] != length or position_ids.shape[0] not in (1, batch):
        raise ValueError(
            f"`{name}` must have shape ({batch}, {length}) or (1, {length}), got {tuple(position_ids.shape)}."
        )
    _require_integer(position_ids, name, "positions")
    if not values or torch.compiler.is_compiling():
        return
    lo, hi = _min_max(position_ids)
    if lo < 0:
        raise ValueError(f"`{name}` must hold non-negative positions, got {lo}.")
    if max_positions is not None and hi >= max_positions:
        raise ValueError(
            f"`{name}` holds position {hi}, beyond this model's learned positions: "
            f"max_position_embeddings={max_positions} allows 0 to {max_positions - 1}."
        )


def check_encoder_states(states, batch: int, width: int) -> None:
    """The encoder output a decoder attends to: (B, S, width), with the decoder's batch B."""
    if not torch.is_tensor(states) or states.dim() != 3 or states.shape[1] == 0 or states.shape[2] != width:
        got = tuple(states.shape) if torch.is_tensor(states) else type(states).__name__
        raise ValueError(
            f"`encoder_outputs` must hold the encoder's (batch, source_len, {width}) last_hidden_state, got {got}."
        )
    if states.shape[0] != batch:
        raise ValueError(
            f"The decoder inputs (`decoder_input_ids`, or the `labels` they are made from) have batch size {batch}, "
            f"but the encoder output (of `input_ids`, or the `encoder_outputs` given) has {states.shape[0]}: "
            "pass one target row per source row."
        )


def logits_positions(logits_to_keep, length: int) -> slice | torch.Tensor:
    """The sequence index of the positions that get logits (`hidden_states[:, index]`): the last
    `logits_to_keep` (0 = all; `generate()` passes 1, so the prompt's (B, T, V) logits are never
    built), or those of a 1-D tensor of positions."""
    if torch.is_tensor(logits_to_keep):
        if logits_to_keep.dim() != 1 or not is_integer_dtype(logits_to_keep.dtype):
            raise ValueError(
                "`logits_to_keep` as a tensor must be a 1-D tensor of integer positions, got a "
                f"{logits_to_keep.dtype} tensor of shape {tuple(logits_to_keep.shape)}."
            )
        if logits_to_keep.numel() and not torch.compiler.is_compiling():
            lo, hi = _min_max(logits_to_keep)
            if lo < -length or hi >= length:
                raise ValueError(
                    f"`logits_to_keep` holds position {lo if lo < -length else hi}, outside the input's "
                    f"{length} positions."
                )
        return logits_to_keep
    if isinstance(logits_to_keep, bool) or not isinstance(logits_to_keep, int) or logits_to_keep < 0:
        raise ValueError(
            "`logits_to_keep` must be a non-negative int (score the last that many positions, 0 = all) or a "
            f"1-D tensor of positions, got {logits_to_keep!r}."
        )
    return slice(-logits_to_keep, None) if logits_to_keep else slice(None)


def pool_last_token(
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None,
    input_ids: torch.Tensor | None,
    pad_token_id,
) -> torch.Tensor:
    """(B, C) the state of each row's last real token, the only one a causal stack showed the whole
    text: the rightmost 1 of `attention_mask` (left or right padding), else the last id that is not
    `pad_token_id`, else the last position.

    Args:
        hidden_states: (B, T, C); attention_mask: (B, S >= T) checked by the model, or None.
    """
    B, T = hidden_states.shape[:2]
    device = hidden_states.device
    if attention_mask is not None:
        real = attention_mask[:, -T:].to(device).bool()  # the last T keys are the new tokens
    elif input_ids is not None and pad_token_id is not None:
        real = input_ids.to(device) != pad_token_id
    else:
        real = torch.ones(B, T, dtype=torch.bool, device=device)
    last = torch.where(real, torch.arange(T, device=device), -1).amax(dim=-1).clamp(min=0)  # (B,)
    return hidden_states[torch.arange(B, device=device), last]  # (B, C)
