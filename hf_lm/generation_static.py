"""Greedy and sampled decoding with a static cache, without `generate()`'s per-step host work.

On a GPU, `generate()` with a static cache compiles the forward into CUDA graphs, and then the host
is the bottleneck: GPT-2 small decoding at batch 1 took 1.45 ms a token on an H200, where reading
the weights takes about 0.1 ms. Each step of transformers' loop prepares the inputs anew
(`prepare_inputs_for_generation`, about 200 us on a small CPU), grows the attention mask by
concatenation, and reads a device flag to decide whether to stop, which makes the host wait for the
GPU every step, so host and GPU never work at the same time.

`static_decode` is a drop-in decoding loop for `generate()` (its `custom_generate` argument):
`generate()` still validates the arguments, runs the encoder (encoder-decoders), builds the static
cache, the logits processors (and sampling's temperature, top-k, top-p) and the stopping criteria;
only the loop differs. It writes each token into a preallocated (B, max_length) buffer and a
decoder-only model's attention mask in place (the static width the compiled forward already sees),
calls the same compiled forward as `generate()`, and checks the stop condition on the host only
every `stop_check_every` steps; the tokens after a finished sequence are padding as in `generate()`,
and the result is cut to the length `generate()` returns, so the output is identical: for sampling
too, under the same seed, since it draws the same random numbers through the same operations as
`torch.multinomial`'s one-sample path, without its validity checks (a NaN flag read at the stop
checks stands in for them). After the first compiled step, Dynamo checks only the guards that tell its
graphs apart (`skip_guards`): every step passes the same tensors, and checking all of a 12-layer
model's guards costs about 550 us a call on a small CPU, 100 us with the stance.

    >>> from hf_lm.generation_static import static_decode
    >>> out = model.generate(ids, attention_mask=mask, max_new_tokens=128, do_sample=False,
    ...                      cache_implementation="static", custom_generate=static_decode)

Greedy search and sampling (no beams, no `return_dict_in_generate`, no streamer), for the hf_lm
models with static caches: the decoder-only families, whose forward takes the static-width padding
mask (`HfLmPreTrainedModel.create_masks_for_generate`), but not with a band attention pattern's
sliding-window cache, and the T5/BART encoder-decoders. The steps
run before the stop was read (up to `stop_check_every - 1`) leave their marks: a `StaticCache` passed
in yourself holds their positions, and sampling has drawn their random numbers, so the random state
after the call differs from `generate()`'s.
"""

from __future__ import annotations

import contextlib

import torch

from .models.hflm_inputs import (
    cache_lengths,
)


def static_decode(
    model,
    input_ids: torch.LongTensor,
    logits_processor,
    stopping_criteria,
    generation_config,
    synced_gpus: bool = False,
    streamer=None,
    stop_check_every: int = 8,
    skip_guards: bool = True,
    **model_kwargs,
) -> torch.LongTensor:
    """`generate()`'s greedy or sampling loop for a static cache, with one host-device sync every
    `stop_check_every` steps instead of one every step. Returns the (B, T) sequences
    `generate()` returns (for an encoder-decoder, the decoder's).

    With a compiled forward and `skip_guards`, the steps after the first run under
    `torch.compiler.set_stance(skip_guard_eval_unsafe=True)` (restored on return): safe here because
    nothing changes between steps but the values of the same tensors. It is process-wide while the
    loop runs: do not compile other code in other threads meanwhile."""
    cache = model_kwargs.get("cache", model_kwargs.get("past_key_values"))
    _check_supported(model, generation_config, cache, synced_gpus, streamer, stop_check_every, model_kwargs)
    B, prompt_len = input_ids.shape
    max_length = generation_config.max_length
    pad = generation_config._pad_token_tensor
    has_eos = generation_config._eos_token_tensor is not None
    if has_eos and pad is None:
        raise ValueError(
            "static_decode pads finished sequences: set `pad_token_id` (generate() needs it too)."
        )
    if prompt_len >= max_length:
        return input_ids

    tokens = input_ids.new_zeros(B, max_length)  # (B, max_length), written in place step by step
    tokens[:, :prompt_len] = input_ids
    # the same arguments at every step: one compiled graph for all
    inputs, keys_mask = _step_inputs(model, input_ids, cache, model_kwargs)
    ids_name = "decoder_input_ids" if model.config.is_encoder_decoder else "input_ids"
    unfinished = torch.ones(B, dtype=torch.bool, device=input_ids.device)
    # alive[i]: some sequence was still unfinished after new token i (read every stop_check_every steps)
    alive = torch.zeros(max_length - prompt_len, dtype=torch.bool, device=input_ids.device)
    # sampling: some row's probabilities were NaN (None for greedy search, which has nothing to check)
    invalid = (
        torch.zeros((), dtype=torch.bool, device=input_ids.device) if generation_config.do_sample else None
    )

    compiled = model._valid_auto_compile_criteria(model_kwargs, generation_config)
    forward = model.get_compiled_call(generation_config.compile_config) if compiled else model.__call__
    logits = model(**{ids_name: input_ids}, logits_to_keep=1, **inputs).logits  # the prefill, not compiled
    with contextlib.ExitStack() as later_steps:
        for cur in range(prompt_len, max_length):
            # a copy, as generate() takes: a compiled step's logits live in memory its next replay reuses
            scores = logits_processor(tokens[:, :cur], logits[:, -1].to(torch.float32, copy=True))  # (B, V)
            if generation_config.do_sample:
                next_tokens = _sample(scores, invalid)
            else:
                next_tokens = scores.argmax(dim=-1)  # (B,)
            if has_eos:  # a finished sequence gets padding, as in generate()
                next_tokens = torch.where(unfinished, next_tokens, pad)
            tokens[:, cur] = next_tokens
            unfinished &= ~stopping_criteria(tokens[:, : cur + 1], scores)
            alive[cur - prompt_len] = unfinished.any()
            step = cur - prompt_len + 1
            if cur + 1 == max_length or step % stop_check_every == 0 and _stopped(alive[step - 1], invalid):
                break
            if keys_mask is not None:
                keys_mask[:, cur] = 1
            logits = forward(**{ids_name: next_tokens[:, None]}, **inputs).logits
            if compiled and skip_guards and step == 1:
                # The first compiled step picked (or built) its graph with all of Dynamo's guards
                # checked; every later step passes the same tensors and kinds of inputs, so Dynamo
                # need only tell its graphs apart (about 100 instead of 550 us a step on a small CPU)
                later_steps.enter_context(torch.compiler.set_stance(skip_guard_eval_unsafe=True))
    if invalid is not None:
        _stopped(alive[step - 1], invalid)  # the NaN check of the last steps
    # generate() stops after the first step at which every sequence is finished
    done = (~alive[:step]).nonzero()
    new_tokens = int(done[0]) + 1 if len(done) else step
    return tokens[:, : prompt_len + new_tokens].contiguous()


def _step_inputs(model, input_ids, cache, model_kwargs) -> tuple[dict, torch.Tensor | None]:
    """The keyword arguments every forward gets, and a decoder-only model's (B, cache width) padding
    mask, which the loop extends in place (None for an encoder-decoder: its decoder's empty cache
    slots are masked by position, and the source mask does not change)."""
    common = dict(cache=cache, use_cache=True, return_dict=True)
    if model.config.is_encoder_decoder:
        encoder = dict(
            encoder_outputs=model_kwargs["encoder_outputs"], attention_mask=model_kwargs.get("attention_mask")
        )
        return {**encoder, **common}, None
    B, prompt_len = input_ids.shape
    mask = model_kwargs.get("attention_mask")
    mask = torch.ones_like(input_ids) if mask is None else mask
    _, width, _ = cache_lengths(cache, prompt_len)  # the static cache's full length
    keys_mask = mask.new_zeros(B, width)
    keys_mask[:, :prompt_len] = mask
    return dict(attention_mask=keys_mask, **common), keys_mask


def _sample(scores: torch.Tensor, invalid: torch.Tensor) -> torch.Tensor:
    """One token per row from softmax(scores), as `torch.multinomial(probs, 1)` draws it: its
    one-sample path is argmax(probs / q) with q ~ Exp(1), the same random numbers from the same
    generator, after checking the probabilities (with `.item()`, a host sync, in older torch; with
    device asserts, which end the CUDA context on failure, in torch 2.13). Here a NaN row (from NaN or
    infinite scores; softmax leaves no other invalid row) is recorded in `invalid` on the device and
    raised as a Python error at the next stop check."""
    probs = torch.softmax(scores, dim=-1)  # (B, V)
    invalid |= probs[:, 0].isnan().any()  # softmax makes a whole row NaN or none of it
    q = torch.empty_like(probs).exponential_(1)
    return (probs / q).argmax(dim=-1)  # (B,)


def _stopped(alive: torch.Tensor, invalid: torch.Tensor | None) -> bool:
    """Read the device flags (one sync): True when every sequence has finished."""
    if invalid is None:
        return not alive
    alive, invalid = torch.stack((alive, invalid)).tolist()
    if invalid:
        raise RuntimeError(
            "static_decode: the sampling probabilities contain NaN (NaN or infinite scores from the model or "
            "a logits processor); generate() refuses them too, inside torch.multinomial."
        )
    return not alive


def unsupported_model(model) -> str | None:
    """Why `static_decode` cannot decode `model` (None when it can): not an hf_lm model, no static
    cache, or a sliding-window one."""
    name = type(model).__name__
    # by name: a folder loaded with trust_remote_code before hf_lm was imported brings its own copy
    # of the classes, still hf_lm's models
    if not any(cls.__name__ == "HfLmPreTrainedModel" for cls in type(model).__mro__):
        return f"static_decode decodes hf_lm models, not {name}."
    if not type(model)._can_compile_fullgraph:
        return (
            f"static_decode needs a static cache, which {name} has not (the recurrent, n-gram and "
            "feed-forward models keep no attention cache): use generate() without custom_generate."
        )
    if getattr(model.config, "sliding_window", None) is not None:
        # the loop extends a padding mask as wide as a full cache at each token's absolute position;
        # a sliding-window cache holds only the last keys, in slots that wrap around
        return (
            f"static_decode does not support a sliding-window cache: {name}'s attention pattern "
            f"({model.config.attention_pattern!r}) keeps the last {model.config.sliding_window} keys only. "
            'Use generate(cache_implementation="static") without custom_generate.'
        )
    return None


def _check_supported(
    model, generation_config, cache, synced_gpus, streamer, stop_check_every, model_kwargs
) -> None:
    if generation_config.num_beams != 1:
        raise ValueError(
            f"static_decode is greedy search or sampling, one sequence per row: got num_beams={generation_config.num_beams}."
        )
    if generation_config.return_dict_in_generate or streamer is not None or synced_gpus:
        raise ValueError(
            "static_decode returns the sequences only: no return_dict_in_generate, streamer or synced_gpus."
        )
    reason = unsupported_model(model)
    if reason is not None:
        raise ValueError(reason)
    if cache is None or not getattr(cache, "is_compileable", False):
        raise ValueError(
            'static_decode needs a static cache: pass cache_implementation="static" (or a StaticCache).'
        )
    if model.config.is_encoder_decoder and model_kwargs.get("decoder_attention_mask") is not None:
        raise ValueError(
            "static_decode starts every decoder row at the same position: drop `decoder_attention_mask` "
            "(or use generate() without custom_generate)."
        )
    if stop_check_every < 1:
        raise ValueError(f"`stop_check_every` must be at least 1, got {stop_check_every}.")
    # the loop feeds the model input_ids, the padding mask (and the encoder's outputs) only: any other
    # input generate() would pass on (prefix_lengths, inputs_embeds, token_type_ids...) would be dropped
    ignored = sorted(k for k, v in model_kwargs.items() if v is not None and k not in _PASSED_ON)
    if ignored:
        raise ValueError(
            f"static_decode feeds the model `input_ids` and `attention_mask` only; it would ignore {ignored}. "
            "Use generate() without custom_generate."
        )
    if not _default_positions(model_kwargs):
        raise ValueError(
            "static_decode numbers the tokens from the attention mask; it would ignore the `position_ids` "
            "given. Use generate() without custom_generate."
        )
    if int(cache.get_seq_length()) > 0:
        raise ValueError(
            "static_decode starts from an empty cache; this one holds tokens already (a previous turn). "
            "Call `cache.reset()` to start over, or continue with generate() without custom_generate."
        )


# what generate() hands the loop and the loop uses (or, for the rest, knows it may leave out)
_PASSED_ON = {
    "attention_mask",
    "cache",
    "past_key_values",
    "use_cache",
    "encoder_outputs",
    "logits_to_keep",
    "position_ids",  # generate()'s own, from the mask (checked by `_default_positions`)
    "output_attentions",  # False here: return_dict_in_generate is refused
    "output_hidden_states",
}


def _default_positions(model_kwargs) -> bool:
    """Whether `position_ids` (a decoder-only model's, which generate() fills in from the mask when the
    user gives none) are the ones the model computes itself: each real token's index among the real
    tokens."""
    positions = model_kwargs.get("position_ids")
    if positions is None:
        return True
    mask = model_kwargs.get("attention_mask")
    if mask is None:
        expected = torch.arange(positions.shape[-1], device=positions.device)[None]
    else:
        expected = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
    return positions.shape[-1] == expected.shape[-1] and bool((positions == expected).all())
