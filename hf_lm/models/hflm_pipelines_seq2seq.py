"""hf_lm's seq2seq pipelines: text-to-text generation, summarization and translation.

transformers 5 removed its `text2text-generation`, `summarization` and `translation` pipelines
and refuses those names (and `translation_xx_to_yy`) for custom pipelines, although
encoder-decoder models (`AutoModelForSeq2SeqLM`: T5, BART, hf_lm's own) still turn text into
text. This module brings the three back under new names; `import hf_lm` registers them:

    import hf_lm  # registers "hflm-text2text-generation", "hflm-summarization", "hflm-translation"
    from transformers import pipeline

    summarizer = pipeline("hflm-summarization", model="my-t5", trust_remote_code=True)
    summarizer("A long article ...", max_new_tokens=60, num_beams=4)
    # [{'summary_text': '...'}]

    translator = pipeline("hflm-translation", model="my-t5", src_lang="en", tgt_lang="de")
    translator(["Hello.", "Good night."], batch_size=2)
    # [{'translation_text': '...'}, {'translation_text': '...'}]

Inputs are encoded as `prefix + text` (T5's task prefixes: "summarize: ", "translate English to
German: "), generated with `model.generate` (every generation parameter passes through) and
decoded. A batch gives the same outputs as the texts one by one: the encoder inputs are
right-padded (left padding would shift BART's learned positions) and masked.

Shipped code (it imports only the standard library, torch and transformers): `save_pretrained` of
an encoder-decoder generation head (T5, BART, RNN seq2seq) copies this file next to the weights and
names the pipelines in `config.custom_pipelines`, as a pipeline's own `save_pretrained` does for any
seq2seq model, so `pipeline("hflm-summarization", model=folder, trust_remote_code=True)` works where
hf_lm is not installed. `hf_lm.pipelines_seq2seq` re-exports it; importing this module registers
the tasks (idempotent).
"""

from __future__ import annotations

import logging
import re
import string
from collections.abc import Mapping
from typing import Any

import torch
from transformers import AutoModelForSeq2SeqLM, GenerationConfig
from transformers.pipelines import PIPELINE_REGISTRY
from transformers.pipelines.base import Pipeline
from transformers.utils import ModelOutput

from .hflm_common import _bool, device_memory_bytes
from .hflm_inputs import (
    check_unicode_text,
)

logger = logging.getLogger(__name__)

TEXT2TEXT_TASK = "hflm-text2text-generation"
SUMMARIZATION_TASK = "hflm-summarization"
TRANSLATION_TASK = "hflm-translation"

# T5's convention (Raffel et al., 2020, appendix D): "translate English to German: ..."
DEFAULT_TRANSLATION_TEMPLATE = "translate {src} to {tgt}: "
TEMPLATE_FIELDS = ("src", "tgt", "src_lang", "tgt_lang")

# language codes shown by their English names in the template ({src}/{tgt}); other values as given
LANGUAGE_NAMES = {
    "ar": "Arabic",
    "cs": "Czech",
    "de": "German",
    "en": "English",
    "es": "Spanish",
    "fi": "Finnish",
    "fr": "French",
    "hi": "Hindi",
    "it": "Italian",
    "ja": "Japanese",
    "nl": "Dutch",
    "pl": "Polish",
    "pt": "Portuguese",
    "ro": "Romanian",
    "ru": "Russian",
    "tr": "Turkish",
    "uk": "Ukrainian",
    "zh": "Chinese",
}

# the pairs T5 was trained on; `register_pipelines` makes "hflm-translation_en_to_de" etc. names
T5_TRANSLATION_PAIRS = (("en", "de"), ("en", "fr"), ("en", "ro"))

# "hflm-translation_en_to_de"; non-greedy so that codes such as mBART's "en_XX" also parse
_TRANSLATION_NAME = re.compile(rf"^{re.escape(TRANSLATION_TASK)}_(.+?)_to_(.+)$")
_TRUNCATION_STRATEGIES = ("longest_first", "only_first", "do_not_truncate")


def _check_text(text: Any, where: str = "The input") -> None:
    """A non-empty string, or TypeError/ValueError naming what is wrong."""
    if not isinstance(text, str):
        raise TypeError(f"{where} must be a string, got {type(text).__name__}.")
    if not text.strip():
        raise ValueError(f"{where} is empty: there is nothing to generate from.")
    check_unicode_text(text, where)


def _check_language(name: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"`{name}` must be a non-empty string such as 'en' or 'English', got {value!r}.")


def language_name(language: str) -> str:
    """The English name of a language code ("de" -> "German"); any other value is returned as is."""
    return LANGUAGE_NAMES.get(language.lower(), language)


def parse_translation_task(task: str) -> tuple[str, str] | None:
    """`(src_lang, tgt_lang)` of a task name like "hflm-translation_en_to_de", else None."""
    match = _TRANSLATION_NAME.match(task or "")
    return (match.group(1), match.group(2)) if match else None


def _lengths_up_to_eos(sequences: torch.Tensor, eos_token_id: int | list[int] | None) -> torch.Tensor:
    """Length of each generated sequence up to and including its first end-of-sequence token.

    `generate` pads a batch's sequences that finished early; cutting after the first EOS gives
    every sequence exactly as it would be generated alone. Position 0 is the decoder start token,
    never an end (BART starts decoding with `</s>`).

    Args:
        sequences: (N, L) token ids from `generate`.
        eos_token_id: the id(s) that ended generation, or None.

    Returns:
        (N,) lengths, L for a sequence without an EOS.
    """
    n, total = sequences.shape
    lengths = torch.full((n,), total, dtype=torch.long)
    if eos_token_id is None or total < 2:
        return lengths
    eos = torch.tensor([eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id))
    is_eos = torch.isin(sequences[:, 1:].cpu(), eos)  # (N, L - 1)
    first = is_eos.int().argmax(-1) + 2  # (N,) the EOS's position + 1, counting the start token
    return torch.where(is_eos.any(-1), first, lengths)


# position schemes without a table of learned vectors, hence without a length limit
UNBOUNDED_POSITIONS = ("sinusoidal", "rope", "alibi", "relative_buckets", "none", "xpos")

# generate()'s own defaults, for the parameters neither the call nor the model's config set
_GENERATE_DEFAULTS = {"num_beams": 1, "num_return_sequences": 1, "max_length": 20}


def position_limit(config) -> int | None:
    """The longest sequence a model (an encoder-decoder's decoder) takes: `max_position_embeddings`
    for a table of learned positions (BART, BERT, GPT-2; transformers' "absolute"), None when its
    positions extend to any length (relative buckets, RoPE, sinusoidal, recurrent)."""
    config = config.get_text_config(decoder=True)
    kind = getattr(config, "position_embedding_type", None)
    if kind in UNBOUNDED_POSITIONS or (kind is None and getattr(config, "rope_parameters", None)):
        return None
    limit = getattr(config, "max_position_embeddings", None)
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None


def _first_int(*values: Any) -> int | None:
    for value in values:
        if value is not None:
            return value if isinstance(value, int) and not isinstance(value, bool) else None
    return None


def generation_memory_bytes(
    config, sequences: int, length: int, source_length: int = 0, dtype: torch.dtype = torch.float32
) -> int:
    """What `generate()` holds at the end of `sequences` rows of `length` tokens, counted low.

    Only what it cannot do without: the token ids (int64), one step's fp32 logits, and for a
    Transformer decoder its cache of keys and values (`2 * layers * key/value heads * head_dim`
    values per token, at most a sliding window of them); for an encoder-decoder, the encoder's
    states and each layer's cross-attention keys and values for `source_length` tokens, which
    `generate()` repeats for every beam and returned sequence.

    Args:
        config: the model's config.
        sequences: rows generated at once: batch size x max(num_beams, num_return_sequences).
        length: tokens per row at the end, the prompt (decoder-only) or the decoder start token
            (encoder-decoder) included.
        source_length: the encoder's input length (0 for a decoder-only model).
        dtype: the model's dtype (the cache's).

    Returns:
        Bytes; a request needing more than the device has cannot run there.
    """
    decoder = config.get_text_config(decoder=True)
    element = torch.empty((), dtype=dtype).element_size()
    hidden = _first_int(getattr(decoder, "hidden_size", None)) or 0
    vocab = _first_int(getattr(decoder, "vocab_size", None)) or 0
    cache = 0  # bytes per row: the decoder's keys and values
    per_source_token = hidden * element if source_length else 0  # the encoder's states
    heads = _first_int(getattr(decoder, "num_attention_heads", None))
    if heads:  # a Transformer decoder: keys and values of every layer and token
        layers = _first_int(
            getattr(decoder, "num_decoder_layers", None),
            getattr(decoder, "decoder_layers", None),
            getattr(decoder, "num_hidden_layers", None),
        )
        kv_heads = _first_int(getattr(decoder, "num_key_value_heads", None)) or heads
        head_dim = _first_int(getattr(decoder, "head_dim", None)) or hidden // heads
        kv = 2 * (layers or 0) * kv_heads * head_dim * element  # bytes per cached token
        window = _first_int(getattr(decoder, "sliding_window", None))
        cache = kv * (min(length, window) if window else length)
        if source_length and getattr(config, "is_encoder_decoder", False):
            per_source_token += kv  # the cross-attention cache
    return sequences * (length * 8 + cache + vocab * 4 + source_length * per_source_token)


def check_generation_fits(
    config,
    params: Mapping[str, Any],
    batch_size: int,
    input_length: int,
    device: torch.device | str,
    dtype: torch.dtype = torch.float32,
    where: str = "generation",
) -> None:
    """Refuse a generation request that cannot run: longer than the model's learned positions, or
    needing more memory than the device has (`generation_memory_bytes`), e.g. `num_beams=10**6` or
    `max_new_tokens=10**9`. Realistic requests (a few beams, lengths within the positions) always
    pass: the estimate counts only what `generate()` cannot do without.

    Args:
        config: the config of the model that generates.
        params: the generation parameters in effect: a call's, on top of the model's
            `generation_config.json` (`num_beams`, `num_return_sequences`, `max_new_tokens`,
            `max_length`); generate()'s defaults for the others. Values that are not integers are
            left to `generate()`'s own checks.
        batch_size: the inputs generated from at once.
        input_length: the tokens of each input: the prompt (decoder-only) or the encoder's input.
        device: where it generates.
        dtype: the model's dtype.
        where: what asked, for the message (a pipeline's name, a script's flags).

    Raises:
        ValueError: naming the parameters and what they would need.
    """
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    num_beams = _first_int(params.get("num_beams"), _GENERATE_DEFAULTS["num_beams"])
    returned = _first_int(params.get("num_return_sequences"), _GENERATE_DEFAULTS["num_return_sequences"])
    max_new_tokens = params.get("max_new_tokens")
    start = 1 if encoder_decoder else input_length  # the decoder start token, or the prompt
    if max_new_tokens is not None:
        new = _first_int(max_new_tokens)
        length, asked = (None if new is None else start + new), f"max_new_tokens={max_new_tokens}"
    else:
        max_length = params.get("max_length", _GENERATE_DEFAULTS["max_length"])
        length, asked = _first_int(max_length), f"max_length={max_length}"
    if length is None or num_beams is None or returned is None or min(num_beams, returned, length) < 1:
        return  # generate() explains what is wrong with these
    limit = position_limit(config)
    if limit is not None and length > limit:
        included = "the decoder start token" if encoder_decoder else f"a {input_length}-token prompt"
        raise ValueError(
            f"{where}: {asked} makes sequences of {length} tokens ({included} included), but this model's "
            f"learned positions allow {limit} (max_position_embeddings); ask for at most "
            + (f"max_new_tokens={limit - start}." if limit > start else f"{limit} tokens.")
        )
    memory = device_memory_bytes(device)
    rows = max(num_beams, returned)
    need = generation_memory_bytes(
        config, batch_size * rows, length, input_length if encoder_decoder else 0, dtype
    )
    if memory is not None and need > memory:
        raise ValueError(
            f"{where}: {batch_size} input(s) x {rows} beams or returned sequences (num_beams={num_beams}, "
            f"num_return_sequences={returned}) of up to {length} tokens ({asked}) need at least "
            f"{need / 2**30:,.1f} GiB (ids, logits and caches), more than the {memory / 2**30:,.1f} GiB of "
            f"{device}. Lower num_beams, num_return_sequences, the batch size or the length."
        )


def _check_template(template: Any) -> None:
    if not isinstance(template, str):
        raise ValueError(f"`prefix_template` must be a string, got {type(template).__name__}.")
    fields = {field for _, field, _, _ in string.Formatter().parse(template) if field is not None}
    unknown = fields - set(TEMPLATE_FIELDS)
    if unknown:
        raise ValueError(
            f"`prefix_template` {template!r} uses unknown field(s) {sorted(unknown)}; allowed: "
            f"{['{' + f + '}' for f in TEMPLATE_FIELDS]} (language names for src/tgt, codes for src_lang/tgt_lang)."
        )


class HfLmText2TextGenerationPipeline(Pipeline):
    """Text in, text out with an encoder-decoder model: `prefix + text` → `model.generate` → decode.

    Works with any model that has `config.is_encoder_decoder` and `generate()` (loaded with
    `AutoModelForSeq2SeqLM`) and a tokenizer with a pad token (batches are padded).

    Call arguments (also accepted by `pipeline(...)` as defaults for every call):
        inputs: a string, a list (or tuple) of strings, a generator or a `datasets.Dataset`.
        prefix: a string put before every input, e.g. T5's "summarize: " (default: the model
            config's `prefix` if it has one, else none).
        truncation: True (or "longest_first"/"only_first") to cut inputs longer than
            `max_input_length` (default False: the whole input goes to the model).
        max_input_length: the input length in tokens that truncation cuts to (default: the
            tokenizer's `model_max_length`); implies `truncation=True` unless that is set.
        return_text: include the decoded text (default True, False when `return_tensors=True`).
        return_tensors: include the generated token ids, `<name>_token_ids` (default False).
        skip_special_tokens: drop pad/eos/... tokens when decoding (default True).
        clean_up_tokenization_spaces: passed to `tokenizer.decode` (default: the tokenizer's).
        batch_size: how many inputs one `generate` call takes (default 1); num_workers: the
            DataLoader workers that encode them.
        Anything else goes to `model.generate`: `max_new_tokens`, `num_beams`, `do_sample`,
            `temperature`, `top_k`, `top_p`, `num_return_sequences`, `length_penalty`,
            `no_repeat_ngram_size`, `generation_config`, ... A misspelt one is refused by
            `generate` ("model_kwargs are not used by the model"). Parameters neither passed nor
            in the model's generation config default to `max_new_tokens=256` (greedy; at most
            the model's learned decoder positions).

    Returns:
        For one string, a list of `num_return_sequences` dicts `{"generated_text": str}` (plus
        `"generated_token_ids": list[int]` with `return_tensors=True`, the decoder start token
        first, padding removed). For a list of strings, one such list per input, flattened to one
        dict per input when `num_return_sequences` is 1 (transformers' former behaviour).

    Raises:
        TypeError: an input that is not a string.
        ValueError: an empty input or list, one holding a lone surrogate, an invalid argument, a
            model that is not an encoder-decoder, a tokenizer without pad token, a generation
            request (from the call or the model's generation config) longer than the model's
            learned positions or larger than the device's memory (`check_generation_fits`).
    """

    _pipeline_calls_generate = True
    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    # generate()'s own default of max_length=20 (prompt included) is too short for most uses
    _default_generation_config = GenerationConfig(max_new_tokens=256)

    #: outputs are "<return_name>_text" and "<return_name>_token_ids"
    return_name = "generated"
    #: the task name used in messages
    task_name = TEXT2TEXT_TASK

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        config = self.model.config
        if not getattr(config, "is_encoder_decoder", False) or not self.model.can_generate():
            raise ValueError(
                f"The {self.task_name} pipeline needs an encoder-decoder model that can generate "
                f"(AutoModelForSeq2SeqLM, e.g. T5 or BART), got {type(self.model).__name__}. For a decoder-only "
                "model use the `text-generation` pipeline."
            )
        if self.tokenizer is None:
            raise ValueError(f"The {self.task_name} pipeline needs a tokenizer.")
        if self.tokenizer.pad_token_id is None:
            raise ValueError(
                f"The tokenizer has no pad token; the {self.task_name} pipeline pads batches. Set one, e.g. "
                "`tokenizer.pad_token = tokenizer.eos_token`."
            )
        # Encoder inputs are padded on the right: with absolute positions (BART) left padding would
        # shift every real token's position, and batches would no longer equal single inputs.
        if self.tokenizer.padding_side != "right":
            logger.info("Padding encoder inputs on the right for the %s pipeline.", self.task_name)
            self.tokenizer.padding_side = "right"
        # the pipeline's own default length stays within learned decoder positions (what a user
        # or the model's generation config asks for is checked, not changed: `_forward`)
        limit = position_limit(config)
        default = self._generation_defaults.get("max_new_tokens")
        if limit is not None and isinstance(default, int) and default >= limit:
            self._generation_defaults["max_new_tokens"] = limit - 1

    def __call__(self, inputs, **kwargs):
        """Generate from one text or a batch of texts; see the class docstring for the arguments."""
        if isinstance(inputs, tuple):
            inputs = list(inputs)
        if isinstance(inputs, list):
            if not inputs:
                raise ValueError(f"The list of inputs to the {self.task_name} pipeline is empty.")
            for i, text in enumerate(inputs):
                _check_text(text, f"Input {i}")
        # anything else (one string, a generator, a Dataset, a wrong type) goes through `preprocess`,
        # which checks each item before it is encoded
        result = super().__call__(inputs, **kwargs)
        if isinstance(inputs, list) and all(len(records) == 1 for records in result):
            return [records[0] for records in result]
        return result

    # ---------------------------------------------------------------------------------------------
    # parameters
    # ---------------------------------------------------------------------------------------------

    def _sanitize_parameters(
        self,
        prefix=None,
        truncation=None,
        max_input_length=None,
        return_text=None,
        return_tensors=None,
        skip_special_tokens=None,
        clean_up_tokenization_spaces=None,
        **generate_kwargs,
    ):
        preprocess, postprocess = {}, {}
        if prefix is not None:
            if not isinstance(prefix, str):
                raise ValueError(f"`prefix` must be a string, got {type(prefix).__name__}.")
            preprocess["prefix"] = prefix
        if truncation is not None:
            if not isinstance(truncation, bool) and truncation not in _TRUNCATION_STRATEGIES:
                raise ValueError(
                    f"`truncation` must be True, False or one of {list(_TRUNCATION_STRATEGIES)}, got {truncation!r}."
                )
            preprocess["truncation"] = truncation
        if max_input_length is not None:
            if (
                isinstance(max_input_length, bool)
                or not isinstance(max_input_length, int)
                or max_input_length < 1
            ):
                raise ValueError(f"`max_input_length` must be a positive integer, got {max_input_length!r}.")
            preprocess["max_input_length"] = max_input_length
        for name, value in (
            ("return_text", return_text),
            ("return_tensors", return_tensors),
            ("skip_special_tokens", skip_special_tokens),
            ("clean_up_tokenization_spaces", clean_up_tokenization_spaces),
        ):
            if value is not None:
                _bool(name, value)
                postprocess[name] = value
        if return_text is False and return_tensors is False:
            raise ValueError("`return_text` and `return_tensors` are both False: there is nothing to return.")
        if getattr(self, "assistant_model", None) is not None:
            generate_kwargs["assistant_model"] = self.assistant_model
        if getattr(self, "assistant_tokenizer", None) is not None:
            generate_kwargs["tokenizer"] = self.tokenizer
            generate_kwargs["assistant_tokenizer"] = self.assistant_tokenizer
        return preprocess, generate_kwargs, postprocess

    def _task_specific_prefix(self, key: str) -> str | None:
        """The `prefix` of `config.task_specific_params[key]` (T5 checkpoints carry them), or None."""
        params = getattr(self.model.config, "task_specific_params", None)
        entry = params.get(key) if isinstance(params, Mapping) else None
        prefix = entry.get("prefix") if isinstance(entry, Mapping) else None
        return prefix if isinstance(prefix, str) else None

    def _resolve_prefix(self, prefix: str | None, **task_params) -> str:
        """The string put before every input: `prefix=`, else the model config's `prefix`, else ""."""
        if prefix is not None:
            return prefix
        return self.prefix if isinstance(self.prefix, str) else ""

    # ---------------------------------------------------------------------------------------------
    # preprocess / forward / postprocess
    # ---------------------------------------------------------------------------------------------

    def preprocess(
        self,
        text: str,
        prefix: str | None = None,
        truncation: bool | str | None = None,
        max_input_length: int | None = None,
        **task_params,
    ) -> dict[str, torch.Tensor]:
        """Encode `prefix + text` (without padding: the collator pads a batch)."""
        _check_text(text)
        if truncation is None:
            truncation = max_input_length is not None
        encoded = self.tokenizer(
            self._resolve_prefix(prefix, **task_params) + text,
            truncation=truncation,
            max_length=max_input_length,
            return_tensors="pt",
        )
        if encoded["input_ids"].shape[-1] == 0:
            raise ValueError(f"The tokenizer encodes {text!r} to no token at all.")
        # token_type_ids would reach generate() as an unknown model kwarg
        return {key: encoded[key] for key in ("input_ids", "attention_mask") if key in encoded}

    def _forward(self, model_inputs: dict[str, torch.Tensor], **generate_kwargs) -> dict[str, torch.Tensor]:
        in_b = model_inputs["input_ids"].shape[0]
        generate_kwargs = self._prepare_generate_kwargs(generate_kwargs)
        params = self._get_set_generation_params(generate_kwargs)
        check_generation_fits(
            self.model.config,
            params,
            in_b,
            model_inputs["input_ids"].shape[-1],
            device=self.model.device,
            dtype=self.model.dtype,
            where=f"The {self.task_name} pipeline",
        )
        eos_token_id = params.get("eos_token_id")
        output = self.model.generate(**model_inputs, **generate_kwargs)
        sequences = output.sequences if isinstance(output, ModelOutput) else output  # (B * n, L)
        lengths = _lengths_up_to_eos(sequences, eos_token_id)  # (B * n,)
        out_b = sequences.shape[0]
        # "output_ids" first: the batch unroller reads the batch size from the first entry
        return {
            "output_ids": sequences.reshape(in_b, out_b // in_b, -1),  # (B, n, L)
            "output_lengths": lengths.reshape(in_b, out_b // in_b),  # (B, n)
        }

    def postprocess(
        self,
        model_outputs: dict[str, torch.Tensor],
        return_text: bool | None = None,
        return_tensors: bool = False,
        skip_special_tokens: bool = True,
        clean_up_tokenization_spaces: bool | None = None,
    ) -> list[dict[str, Any]]:
        """One record per generated sequence of one input (`num_return_sequences` of them)."""
        if return_text is None:
            return_text = not return_tensors
        if not return_text and not return_tensors:
            raise ValueError("`return_text` and `return_tensors` are both False: there is nothing to return.")
        records = []
        for ids, length in zip(model_outputs["output_ids"][0], model_outputs["output_lengths"][0]):
            ids = ids[: int(length)].tolist()
            record = {}
            if return_text:
                record[f"{self.return_name}_text"] = self.tokenizer.decode(
                    ids,
                    skip_special_tokens=skip_special_tokens,
                    clean_up_tokenization_spaces=clean_up_tokenization_spaces,
                )
            if return_tensors:
                record[f"{self.return_name}_token_ids"] = ids
            records.append(record)
        return records


class HfLmSummarizationPipeline(HfLmText2TextGenerationPipeline):
    """Summarization: the text-to-text pipeline with `summary_text` outputs and T5's prefix.

    The prefix is `prefix=` if given, else `config.task_specific_params["summarization"]["prefix"]`
    (T5 checkpoints: "summarize: "), else the config's `prefix`, else none. Other
    `task_specific_params` (num_beams, length_penalty, ...) are not applied: pass them to the call
    or store them in the checkpoint's `generation_config.json`. Arguments and returns as
    `HfLmText2TextGenerationPipeline`, with `summary_text` / `summary_token_ids`.
    """

    return_name = "summary"
    task_name = SUMMARIZATION_TASK

    def _resolve_prefix(self, prefix: str | None, **task_params) -> str:
        if prefix is not None:
            return prefix
        task_prefix = self._task_specific_prefix("summarization")
        return task_prefix if task_prefix is not None else super()._resolve_prefix(None)


class HfLmTranslationPipeline(HfLmText2TextGenerationPipeline):
    """Translation: the text-to-text pipeline with `translation_text` outputs and language pairs.

    Extra call arguments (also accepted by `pipeline(...)`):
        src_lang, tgt_lang: the language pair, as codes ("en", "de") or names ("English"); both or
            neither. A task name "hflm-translation_<src>_to_<tgt>" sets them as defaults (the T5
            pairs en→de/fr/ro are registered; `register_translation_task` adds others).
        prefix_template: how the prefix is built from the pair (default T5's
            "translate {src} to {tgt}: "); `{src}`/`{tgt}` are the languages' English names
            ("de" → "German"), `{src_lang}`/`{tgt_lang}` the values as given. "" for no prefix
            (e.g. a BART model fine-tuned on one pair).

    The prefix is `prefix=` if given, else, with a language pair,
    `config.task_specific_params["translation_<src>_to_<tgt>"]["prefix"]` (T5 checkpoints) or the
    template; without a pair, the config's `prefix` or none (a single-pair model). Arguments and
    returns otherwise as `HfLmText2TextGenerationPipeline`, with `translation_text` /
    `translation_token_ids`.
    """

    return_name = "translation"
    task_name = TRANSLATION_TASK

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.default_src_lang, self.default_tgt_lang = parse_translation_task(self.task) or (None, None)

    def _sanitize_parameters(self, src_lang=None, tgt_lang=None, prefix_template=None, **kwargs):
        preprocess, forward, postprocess = super()._sanitize_parameters(**kwargs)
        if src_lang is not None:
            _check_language("src_lang", src_lang)
            preprocess["src_lang"] = src_lang
        if tgt_lang is not None:
            _check_language("tgt_lang", tgt_lang)
            preprocess["tgt_lang"] = tgt_lang
        if prefix_template is not None:
            _check_template(prefix_template)
            preprocess["prefix_template"] = prefix_template
        return preprocess, forward, postprocess

    def _resolve_prefix(
        self,
        prefix: str | None,
        src_lang: str | None = None,
        tgt_lang: str | None = None,
        prefix_template: str | None = None,
        **task_params,
    ) -> str:
        if prefix is not None:
            return prefix
        src = src_lang if src_lang is not None else self.default_src_lang
        tgt = tgt_lang if tgt_lang is not None else self.default_tgt_lang
        if (src is None) != (tgt is None):
            raise ValueError(
                f"Give both `src_lang` and `tgt_lang` (got src_lang={src!r}, tgt_lang={tgt!r}), or neither for "
                "a model that translates one fixed pair."
            )
        if src is None:
            return super()._resolve_prefix(None)
        task_prefix = self._task_specific_prefix(f"translation_{src}_to_{tgt}")
        if task_prefix is not None:
            return task_prefix
        template = DEFAULT_TRANSLATION_TEMPLATE if prefix_template is None else prefix_template
        return template.format(src=language_name(src), tgt=language_name(tgt), src_lang=src, tgt_lang=tgt)


SEQ2SEQ_PIPELINES = {
    TEXT2TEXT_TASK: HfLmText2TextGenerationPipeline,
    SUMMARIZATION_TASK: HfLmSummarizationPipeline,
    TRANSLATION_TASK: HfLmTranslationPipeline,
}


def register_translation_task(src_lang: str, tgt_lang: str) -> str:
    """Make `pipeline("hflm-translation_<src>_to_<tgt>", ...)` a translation pipeline for that pair.

    transformers parsed `translation_xx_to_yy` itself; its registry now knows exact names only,
    so each pair is an alias of "hflm-translation", and the pipeline reads the pair back from the
    name it was created with.

    Args:
        src_lang: the source language code, e.g. "en" (no whitespace).
        tgt_lang: the target language code, e.g. "de".

    Returns:
        The task name, e.g. "hflm-translation_en_to_de".
    """
    for name, value in (("src_lang", src_lang), ("tgt_lang", tgt_lang)):
        _check_language(name, value)
        if any(c.isspace() for c in value):
            raise ValueError(f"`{name}` must not contain whitespace, got {value!r}.")
    task = f"{TRANSLATION_TASK}_{src_lang}_to_{tgt_lang}"
    if parse_translation_task(task) != (src_lang, tgt_lang):
        raise ValueError(f"The pair ({src_lang!r}, {tgt_lang!r}) cannot be read back from the name {task!r}.")
    PIPELINE_REGISTRY.task_aliases[task] = TRANSLATION_TASK
    return task


def register_pipelines() -> None:
    """Register the seq2seq pipelines with transformers' `pipeline()` (idempotent; `import hf_lm` calls it).

    Each loads its model with `AutoModelForSeq2SeqLM`, so a saved folder works with
    `trust_remote_code=True`; "hflm-translation_en_to_de", "_en_to_fr" and "_en_to_ro" are
    registered as names of the translation pipeline with that pair.
    """
    for task, pipeline_class in SEQ2SEQ_PIPELINES.items():
        registered = (PIPELINE_REGISTRY.supported_tasks.get(task) or {}).get("impl")
        # The same class loaded again, from another module path: a second folder whose saved pipeline
        # ships this file is imported under a new `transformers_modules...` name. Keep the first.
        same = isinstance(registered, type) and (
            registered is pipeline_class
            or (
                registered.__qualname__ == pipeline_class.__qualname__
                and registered.__module__.rsplit(".", 1)[-1] == pipeline_class.__module__.rsplit(".", 1)[-1]
            )
        )
        if not same:
            PIPELINE_REGISTRY.register_pipeline(
                task, pipeline_class=pipeline_class, pt_model=AutoModelForSeq2SeqLM, type="text"
            )
    for src_lang, tgt_lang in T5_TRANSLATION_PAIRS:
        register_translation_task(src_lang, tgt_lang)


register_pipelines()

__all__ = [
    "DEFAULT_TRANSLATION_TEMPLATE",
    "HfLmSummarizationPipeline",
    "HfLmText2TextGenerationPipeline",
    "HfLmTranslationPipeline",
    "SEQ2SEQ_PIPELINES",
    "SUMMARIZATION_TASK",
    "TEXT2TEXT_TASK",
    "TRANSLATION_TASK",
    "check_generation_fits",
    "device_memory_bytes",
    "generation_memory_bytes",
    "language_name",
    "parse_translation_task",
    "position_limit",
    "register_pipelines",
    "register_translation_task",
]
