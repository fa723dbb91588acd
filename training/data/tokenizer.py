"""Train Hugging Face fast tokenizers from scratch, and a small deterministic English corpus.

`train_tokenizer` builds one of four classic tokenizer kinds with the `tokenizers` library and
wraps it as a transformers `PreTrainedTokenizerFast`, so it saves with `save_pretrained` and
reloads with `AutoTokenizer.from_pretrained(folder)`:

- "byte_bpe": byte-level BPE (GPT-2; Radford et al., 2019). Every byte is in the vocabulary, so
  no text is ever unknown and `decode(encode(text)) == text`.
- "wordpiece": WordPiece (BERT; Schuster & Nakajima, 2012), `##` marks word continuations.
- "unigram": the unigram language-model tokenizer (Kudo, 2018) with SentencePiece's `▁` spaces.
- "char": one token per character (Karpathy's char-rnn); unseen characters map to `unk_token`.

`stdlib_docstrings` collects real human-written English offline and deterministically: the
docstrings of the installed Python standard library.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.machinery
import inspect
import json
import logging
import os
import pkgutil
import sys
import warnings
from collections.abc import Iterable, Iterator, Mapping

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from hf_lm.families import (  # noqa: F401  (re-exported: the scripts and tests import them from here)
    BART_SPECIAL_TOKENS,
    BERT_SPECIAL_TOKENS,
    GPT_SPECIAL_TOKENS,
    T5_SPECIAL_TOKENS,
)

logger = logging.getLogger(__name__)

TOKENIZER_KINDS = ("byte_bpe", "wordpiece", "unigram", "char")

# The special tokens of each family's tokenizer live in the family table (hf_lm.families);
# GPT_SPECIAL_TOKENS is the default of `train_tokenizer`.

# T5's span-corruption sentinels: "<extra_id_0>", "<extra_id_1>", ... (T5 ships 100 of them)
SENTINEL_TOKEN_FORMAT = "<extra_id_{}>"

# the special-token roles transformers' tokenizers know (bos, eos, unk, sep, pad, cls, mask)
SPECIAL_TOKEN_ROLES = tuple(PreTrainedTokenizerFast.SPECIAL_TOKENS_ATTRIBUTES)

# The unknown token of the tokenizers that can meet unseen text ("char", "unigram", "wordpiece") when
# the special tokens give unk the token of another role, as GPT's do (`<|endoftext|>` is GPT-2's
# bos, eos and unk: harmless for byte-level BPE, which never emits unk). Shared with eos, every
# unseen character would read as a document end ("the queen\tsat" -> "the eensat" once decoded), so
# these tokenizers get an unk of their own, after the other special tokens.
UNK_TOKEN = "<|unk|>"

# ChatML, the chat markup of OpenAI's chat models, Qwen and TRL's `setup_chat_format`: every turn is
# `<|im_start|>{role}\n{content}<|im_end|>\n`. The two markers are special tokens trained with the
# others, right after them (ids 2 and 3 after GPT's `<|endoftext|>` 0 and `<|pad|>` 1), so they are
# never split and every tokenizer trained with the GPT defaults gives them the same ids. The
# `{% generation %}` block marks the assistant's tokens for `return_assistant_tokens_mask` (TRL's
# `assistant_only_loss=True`); `add_generation_prompt` opens the assistant's turn.
CHAT_TOKENS = ("<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- generation -%}{{- message['content'] + '<|im_end|>' -}}{%- endgeneration -%}{{- '\\n' -}}"
    "{%- else -%}{{- message['content'] + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def needs_own_unk(kind: str, special_tokens: Mapping[str, str]) -> bool:
    """Whether a tokenizer of `kind` gets `UNK_TOKEN`: it can emit unk, and `special_tokens` give unk
    the token of another role (GPT's `<|endoftext|>`)."""
    unk = special_tokens.get("unk_token")
    others = {token for role, token in special_tokens.items() if role != "unk_token"}
    return kind != "byte_bpe" and unk is not None and unk in others


def chat_template_default(kind: str, special_tokens: Mapping[str, str]) -> bool:
    """`train_tokenizer`'s `chat_template=None`: subword tokenizers with GPT's special tokens (the
    causal LMs') are chat tokenizers; character-level models are no chat models (nanoGPT's vocabulary
    of characters stays as it is)."""
    return dict(special_tokens) == GPT_SPECIAL_TOKENS and kind != "char"


def minimum_vocab_size(
    kind: str, special_tokens: Mapping[str, str] | None = None, chat_template: bool | None = None
) -> int:
    """The smallest `vocab_size` of `train_tokenizer` for `kind`: its special tokens (the chat markers
    and an unk of its own included), plus every byte for "byte_bpe" or one real symbol for the others.
    `special_tokens` and `chat_template` as `train_tokenizer` takes them (None: their defaults).
    """
    special_tokens = GPT_SPECIAL_TOKENS if special_tokens is None else special_tokens
    if chat_template is None:
        chat_template = chat_template_default(kind, special_tokens)
    specials = set(special_tokens.values()) | (set(CHAT_TOKENS) if chat_template else set())
    if needs_own_unk(kind, special_tokens):
        specials.add(UNK_TOKEN)
    return len(specials) + (256 if kind == "byte_bpe" else 1)


def _check_arguments(
    kind, vocab_size, special_tokens, model_max_length, padding_side, min_frequency, chat_template
) -> None:
    if kind not in TOKENIZER_KINDS:
        raise ValueError(f"`kind` must be one of {list(TOKENIZER_KINDS)}, got {kind!r}.")
    if not isinstance(special_tokens, Mapping) or not special_tokens:
        raise ValueError(
            f"`special_tokens` must be a non-empty mapping of role to token, got {special_tokens!r}."
        )
    for role, token in special_tokens.items():
        if role not in SPECIAL_TOKEN_ROLES:
            raise ValueError(
                f"`special_tokens` has unknown role {role!r}; allowed roles: {list(SPECIAL_TOKEN_ROLES)}."
            )
        if not isinstance(token, str) or not token:
            raise ValueError(f"`special_tokens[{role!r}]` must be a non-empty string, got {token!r}.")
    if "pad_token" in special_tokens and special_tokens["pad_token"] == special_tokens.get("eos_token"):
        raise ValueError(
            "`special_tokens`: pad_token must differ from eos_token (DataCollatorForLanguageModeling "
            "masks pad labels, which would also mask every end-of-text label)."
        )
    if kind != "byte_bpe" and "unk_token" not in special_tokens:
        raise ValueError(f"`special_tokens` needs an 'unk_token' for kind={kind!r} (unseen text maps to it).")
    if not isinstance(chat_template, bool):
        raise ValueError(f"`chat_template` must be None, True or False, got {chat_template!r}.")
    if needs_own_unk(kind, special_tokens) and UNK_TOKEN in special_tokens.values():
        raise ValueError(f"`special_tokens` give {UNK_TOKEN!r}, the unknown token of its own, another role.")
    # byte-level BPE must hold all 256 bytes; the others need at least one real symbol
    minimum = minimum_vocab_size(kind, special_tokens, chat_template)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < minimum:
        n_special = minimum - (256 if kind == "byte_bpe" else 1)
        raise ValueError(
            f"`vocab_size` must be an integer >= {minimum} for kind={kind!r} with {n_special} special "
            f"tokens, got {vocab_size!r}."
        )
    if isinstance(model_max_length, bool) or not isinstance(model_max_length, int) or model_max_length < 1:
        raise ValueError(f"`model_max_length` must be a positive integer, got {model_max_length!r}.")
    if padding_side not in ("left", "right"):
        raise ValueError(f"`padding_side` must be 'left' or 'right', got {padding_side!r}.")
    if isinstance(min_frequency, bool) or not isinstance(min_frequency, int) or min_frequency < 0:
        raise ValueError(f"`min_frequency` must be a non-negative integer, got {min_frequency!r}.")


def _build(kind: str, vocab_size: int, special: list[str], unk: str | None, min_frequency: int):
    """An untrained `tokenizers.Tokenizer` and its trainer for `kind`."""
    if kind == "byte_bpe":
        tokenizer = Tokenizer(models.BPE())
        # GPT-2: map bytes to printable characters, split on its regex, no prefix space
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=special,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes, even unseen ones
            show_progress=False,
        )
    elif kind == "wordpiece":
        tokenizer = Tokenizer(models.WordPiece(unk_token=unk))
        tokenizer.normalizer = normalizers.NFC()
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()  # whitespace and punctuation
        tokenizer.decoder = decoders.WordPiece(prefix="##")
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=special, show_progress=False
        )
    elif kind == "unigram":
        tokenizer = Tokenizer(models.Unigram())
        tokenizer.normalizer = normalizers.NFKC()
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()  # SentencePiece: spaces become "▁"
        tokenizer.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size, special_tokens=special, unk_token=unk, show_progress=False
        )
    else:  # char
        tokenizer = Tokenizer(models.WordLevel(unk_token=unk))
        # every character (newlines included) is its own "word"; Fuse joins them back without spaces
        tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
        tokenizer.decoder = decoders.Fuse()
        # the most frequent `vocab_size - len(special)` characters are kept
        trainer = trainers.WordLevelTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=special, show_progress=False
        )
    return tokenizer, trainer


def unknown_token_id(tokenizer: PreTrainedTokenizerBase) -> int | None:
    """The id the tokenizer gives unseen text, when no other special token has it; None otherwise
    (no unk, or an unk that is also, say, the end-of-text token: its count would count those too)."""
    unk = tokenizer.unk_token_id
    return None if unk is None or _roles_sharing_unk(tokenizer) else unk


def _roles_sharing_unk(tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """The special-token roles other than unk whose id is the unknown token's."""
    unk = tokenizer.unk_token_id
    if unk is None:
        return []
    return [
        role
        for role in SPECIAL_TOKEN_ROLES
        if role != "unk_token" and getattr(tokenizer, f"{role}_id", None) == unk
    ]


def unk_shared_role(tokenizer: PreTrainedTokenizerBase) -> str | None:
    """The special-token role whose token a tokenizer that can meet unseen text also gives it.

    Tokenizers trained before `UNK_TOKEN` ("char", "unigram" and "wordpiece" ones with GPT's special
    tokens) map unseen text to `<|endoftext|>`: they still load and run, and this names the role
    ("eos_token") so a run can say so. None for an unk of its own, no unk, a byte-level BPE (which
    never emits unk) or a tokenizer without a `tokenizers` backend.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    shared = _roles_sharing_unk(tokenizer) if backend is not None else []
    if not shared:
        return None
    saved = json.loads(backend.to_str())
    model, pre = saved.get("model") or {}, json.dumps(saved.get("pre_tokenizer"))
    byte_level = model.get("type") == "BPE" and (model.get("byte_fallback") or '"ByteLevel"' in pre)
    return None if byte_level else ("eos_token" if "eos_token" in shared else shared[0])


def bert_post_processor(
    tokenizer: Tokenizer, cls_token: str, sep_token: str
) -> processors.TemplateProcessing:
    """BERT's input template: `[CLS] A [SEP]` and `[CLS] A [SEP] B [SEP]`, segment ids 0 then 1.

    Devlin et al. (2019), section 3: the segment embedding (token_type_ids) is 0 for `[CLS] A [SEP]`
    and 1 for `B [SEP]`.

    Args:
        tokenizer: a trained `tokenizers.Tokenizer` whose vocabulary holds both tokens.
        cls_token: the classification token that starts every input, e.g. "[CLS]".
        sep_token: the separator that ends each segment, e.g. "[SEP]".

    Returns:
        The post-processor to set as `tokenizer.post_processor`.
    """
    ids = {token: tokenizer.token_to_id(token) for token in (cls_token, sep_token)}
    return processors.TemplateProcessing(
        single=f"{cls_token}:0 $A:0 {sep_token}:0",
        pair=f"{cls_token}:0 $A:0 {sep_token}:0 $B:1 {sep_token}:1",
        special_tokens=list(ids.items()),
    )


def split_long_text(text: str, max_characters: int = 1 << 16) -> list[str]:
    """`text` cut into consecutive pieces of at most `max_characters` characters, for tokenizing.

    Each cut falls just before a space that is followed by a non-space (the space that starts
    " word"). No pre-token spans such a point for the pre-tokenizers of `training.data.tokenizer`
    (byte-level BPE's GPT-2 regex, WordPiece's whitespace-and-punctuation split, SentencePiece's
    Metaspace, characters), so the pieces, tokenized one by one and joined, give exactly the
    tokens of the whole text. A stretch of `max_characters` without such a space (text without
    spaces, a long run of spaces) is cut where the stretch ends; only the tokens at that cut can
    differ from whole-text tokenization.

    Args:
        text: any string.
        max_characters: the longest piece, at least 2.

    Returns:
        The pieces, whose concatenation is `text` (`[text]` when it is short enough).
    """
    if max_characters < 2:
        raise ValueError(f"`max_characters` must be at least 2, got {max_characters!r}.")
    if len(text) <= max_characters:
        return [text]
    pieces, start = [], 0
    while len(text) - start > max_characters:
        end = start + max_characters  # the piece is text[start:cut], cut <= end
        cut = text.rfind(" ", start + 1, end + 1)
        while cut > start and cut + 1 < len(text) and text[cut + 1].isspace():
            cut = text.rfind(" ", start + 1, cut)
        if cut <= start:
            cut = end
            logger.debug(
                "No space to cut at in %d characters: a hard cut at character %d.", max_characters, cut
            )
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def _special_vocabulary(kind: str, special_tokens: dict[str, str], chat_tokens: list[str]) -> list[str]:
    """The special tokens in the order of their ids (0, 1, ...): the roles', the chat markers', then
    an unknown token of its own when unk shares another role's token (`special_tokens` is updated)."""
    own_unk = [UNK_TOKEN] if needs_own_unk(kind, special_tokens) else []
    if own_unk:  # after the others, so that their ids (and the chat markers') stay those of byte_bpe
        shared = special_tokens.pop("unk_token")
        special_tokens["unk_token"] = UNK_TOKEN
        logger.info("Unseen text maps to %s of its own, not to %s (kind=%r).", UNK_TOKEN, shared, kind)
    ordered = [token for token in special_tokens.values() if token not in own_unk]
    return list(dict.fromkeys([*ordered, *chat_tokens, *own_unk]))  # unique, in order: ids 0, 1, ...


def _checked_texts(items: Iterable[str], counts: dict[str, int]) -> Iterator[str]:
    """The non-empty strings of `items`, cut into pieces, counted into `counts`; a non-string refused."""
    for text in items:
        if not isinstance(text, str):
            raise ValueError(f"`texts` must contain only strings, got {type(text).__name__}.")
        if text:
            counts["texts"] += 1
            counts["chars"] += len(text)
            # a huge document would be held whole while the trainer splits it (5 GB for a 50 MB
            # line); pieces cut before a word give the same pre-tokens and so the same counts
            yield from split_long_text(text)


def train_tokenizer(
    texts: Iterable[str],
    kind: str = "byte_bpe",
    vocab_size: int = 8000,
    special_tokens: Mapping[str, str] | None = None,
    model_max_length: int = 1024,
    padding_side: str = "left",
    min_frequency: int = 2,
    chat_template: bool | None = None,
) -> PreTrainedTokenizerFast:
    """Train a tokenizer from scratch on `texts` and wrap it for transformers.

    Args:
        texts: the training corpus, any iterable of strings (streamed, never stored).
        kind: one of "byte_bpe", "wordpiece", "unigram", "char".
        vocab_size: the largest vocabulary size, special tokens included (a small corpus may give
            fewer tokens). At least 256 + specials for "byte_bpe".
        special_tokens: role -> token, roles among `SPECIAL_TOKEN_ROLES`. Defaults to GPT's
            `<|endoftext|>` as bos/eos/unk plus a separate `<|pad|>`. Special tokens get the first
            ids, in the mapping's order (so `<|endoftext|>` is 0 and `<|pad|>` 1 by default), then
            the chat markers (`<|im_start|>` 2, `<|im_end|>` 3 with `chat_template`). A kind that
            can meet unseen text ("char", "unigram", "wordpiece") never maps it to another role's
            token: when unk shares one (GPT's), unk is `UNK_TOKEN` (`<|unk|>`), with the next id.
        model_max_length: the model's context length, stored with the tokenizer.
        padding_side: "left" for decoder-only models (text-generation pipelines need it), "right"
            for encoders.
        min_frequency: minimum count of a merge/word/character to enter the vocabulary
            (ignored by "unigram").
        chat_template: add the ChatML markers `CHAT_TOKENS` as special tokens (after the others)
            and `CHAT_TEMPLATE` as the tokenizer's chat template, so `apply_chat_template` and
            TRL's `SFTTrainer` on `messages` data work. None (the default): for subword tokenizers
            with GPT's special tokens (`GPT_SPECIAL_TOKENS`, the causal LMs'), not "char" ones.

    Returns:
        A `PreTrainedTokenizerFast` that adds no bos/eos around encodings. When `special_tokens`
        has both a cls_token and a sep_token (e.g. `BERT_SPECIAL_TOKENS`), it adds BERT's template
        instead, `[CLS] A [SEP]` / `[CLS] A [SEP] B [SEP]`, and returns `token_type_ids` (0 for
        `[CLS] A [SEP]`, 1 for `B [SEP]`); the template is saved in tokenizer.json, so
        `AutoTokenizer.from_pretrained` reloads the same behaviour.

    Raises:
        ValueError: naming the argument, for an unknown kind, a too small vocab_size, bad special
            tokens, or a corpus with no non-empty string.

    Example:
        >>> tok = train_tokenizer(["Hello world."] * 10, kind="char", vocab_size=32)
        >>> tok.decode(tok("Hello")["input_ids"])
        'Hello'
    """
    special_tokens = dict(GPT_SPECIAL_TOKENS if special_tokens is None else special_tokens)
    if chat_template is None:
        chat_template = chat_template_default(kind, special_tokens)
    _check_arguments(
        kind, vocab_size, special_tokens, model_max_length, padding_side, min_frequency, chat_template
    )
    if isinstance(texts, str):
        raise ValueError("`texts` must be an iterable of strings, not a single string.")

    chat_tokens = list(CHAT_TOKENS) if chat_template else []
    special = _special_vocabulary(kind, special_tokens, chat_tokens)
    tokenizer, trainer = _build(kind, vocab_size, special, special_tokens.get("unk_token"), min_frequency)
    counts = {"texts": 0, "chars": 0}
    tokenizer.train_from_iterator(_checked_texts(texts, counts), trainer=trainer)
    if counts["texts"] == 0:
        raise ValueError("`texts` is empty: the corpus must contain at least one non-empty string.")
    logger.info(
        "Trained a %s tokenizer on %d texts (%d characters): %d tokens.",
        kind,
        counts["texts"],
        counts["chars"],
        tokenizer.get_vocab_size(),
    )
    return _wrap(tokenizer, special_tokens, chat_tokens, model_max_length, padding_side)


def _wrap(
    tokenizer: Tokenizer,
    special_tokens: dict,
    chat_tokens: list[str],
    model_max_length: int,
    padding_side: str,
) -> PreTrainedTokenizerFast:
    """A trained `tokenizers.Tokenizer` as a transformers tokenizer, with BERT's template or the chat template."""
    extra = {}
    if "cls_token" in special_tokens and "sep_token" in special_tokens:
        template = bert_post_processor(tokenizer, special_tokens["cls_token"], special_tokens["sep_token"])
        # byte-level BPE keeps its own post-processor (offsets) before the template
        previous = tokenizer.post_processor
        tokenizer.post_processor = template if previous is None else processors.Sequence([previous, template])
        # transformers 5 returns no token_type_ids unless the tokenizer names them as a model input
        extra["model_input_names"] = ["input_ids", "token_type_ids", "attention_mask"]
    if chat_tokens:
        extra["extra_special_tokens"] = chat_tokens
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        model_max_length=model_max_length,
        padding_side=padding_side,
        # transformers' default clean-up would turn " ." into "." and break the round trip
        clean_up_tokenization_spaces=False,
        **extra,
        **special_tokens,
    )
    if chat_tokens:
        wrapped.chat_template = CHAT_TEMPLATE  # saved as chat_template.jinja, reloaded by AutoTokenizer
    return wrapped


# ----------------------------------------------------------------------------------------------
# T5's sentinel tokens
# ----------------------------------------------------------------------------------------------


def sentinel_tokens(num_sentinels: int) -> list[str]:
    """The sentinel token strings `<extra_id_0>` ... `<extra_id_{num_sentinels - 1}>`."""
    if isinstance(num_sentinels, bool) or not isinstance(num_sentinels, int) or num_sentinels < 1:
        raise ValueError(f"`num_sentinels` must be a positive integer, got {num_sentinels!r}.")
    return [SENTINEL_TOKEN_FORMAT.format(i) for i in range(num_sentinels)]


def sentinel_token_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The ids of the tokenizer's sentinels `<extra_id_0>`, `<extra_id_1>`, ... in sentinel order.

    Counts consecutive sentinels from `<extra_id_0>` and stops at the first one missing from the
    vocabulary (added tokens included).

    Args:
        tokenizer: any transformers tokenizer.

    Returns:
        ids[i] is the id of `<extra_id_i>`; an empty list when the tokenizer has no sentinel.
    """
    vocab = tokenizer.get_vocab()  # added tokens included
    ids = []
    while (token := SENTINEL_TOKEN_FORMAT.format(len(ids))) in vocab:
        ids.append(int(vocab[token]))
    return ids


def add_sentinel_tokens(tokenizer: PreTrainedTokenizerBase, num_sentinels: int = 100) -> list[int]:
    """Add T5's span-corruption sentinels `<extra_id_0>` ... `<extra_id_{N-1}>` as special tokens.

    Raffel et al. (2020), section 3.1.4: each corrupted span is replaced by a unique sentinel token
    in the input, and the target lists the spans, each after its sentinel. As in T5's vocabulary
    the sentinels take the last ids in descending order (`<extra_id_0>` is `len(tokenizer) - 1`
    afterwards); they are the tokenizer's `extra_special_tokens` (transformers 4's
    `additional_special_tokens`), so they are never split, `decode(..., skip_special_tokens=True)`
    drops them, and `save_pretrained`/`AutoTokenizer.from_pretrained` keep them. Resize the model's
    embeddings to `len(tokenizer)` if it was built before.

    Args:
        tokenizer: a transformers tokenizer (e.g. from `train_tokenizer(...,
            special_tokens=T5_SPECIAL_TOKENS)`); modified in place.
        num_sentinels: how many sentinels (T5: 100). A span-corruption target needs one per span
            plus one, so about `length * noise_density / mean_noise_span_length + 1` for inputs of
            `length` tokens.

    Returns:
        ids[i] is the id of `<extra_id_i>`.

    Raises:
        ValueError: `num_sentinels` is not a positive integer, or the tokenizer already has a
            different number of sentinels. Adding the same number again is a no-op.
    """
    names = sentinel_tokens(num_sentinels)
    existing = sentinel_token_ids(tokenizer)
    if existing:
        if len(existing) == num_sentinels:
            return existing
        raise ValueError(
            f"`tokenizer` already has {len(existing)} sentinel tokens; cannot add {num_sentinels}."
        )
    # added in reverse, so that <extra_id_0> gets the last id, as in T5's SentencePiece vocabulary
    tokenizer.add_tokens(names[::-1], special_tokens=True)
    tokenizer.add_special_tokens({"extra_special_tokens": names}, replace_extra_special_tokens=False)
    ids = sentinel_token_ids(tokenizer)
    logger.info("Added %d sentinel tokens (ids %d..%d).", len(ids), ids[-1], ids[0])
    return ids


# ----------------------------------------------------------------------------------------------
# A deterministic English corpus: the standard library's docstrings
# ----------------------------------------------------------------------------------------------

# Skipped for their content (GUIs, tests, rot13 text, setuptools' shadow copy) or for import side
# effects (a browser, printing, a terminal completer). Any dotted-name component in this set is
# skipped, as are private (`_x`) and `xx*` example modules.
_SKIP_MODULES = frozenset(
    {
        "__main__",  # `python -m pkg` entry points
        "antigravity",  # opens a web browser
        "this",  # the Zen of Python, rot13-encoded
        "idlelib",
        "tkinter",
        "turtle",
        "turtledemo",
        "lib2to3",  # generated grammar tables
        "distutils",  # setuptools may shadow it, so its text depends on the environment
        "readline",  # imported to read its C docstrings, it would change the interactive terminal
        "rlcompleter",
        "encodings",  # ~100 generated codec tables
        "pydoc_data",  # one huge generated string
        "test",
        "tests",
        "idle_test",
    }
)


def _skip(name: str) -> bool:
    return any(p in _SKIP_MODULES or p.startswith(("_", "xx")) for p in name.split("."))


def _stdlib_path() -> list[str]:
    """The interpreter's own library folders on `sys.path` (no site-packages, no project folders)."""
    base = os.path.realpath(sys.base_prefix)
    return [
        entry
        for entry in sys.path
        if entry
        and os.path.realpath(entry).startswith(base + os.sep)
        and not any(part in ("site-packages", "dist-packages") for part in entry.split(os.sep))
    ]


def _stdlib_modules(max_depth: int = 3) -> Iterator[tuple[str, str | None]]:
    """(dotted name, source file or None for compiled modules), in sorted order, without importing."""
    search_path = _stdlib_path()
    stack = [(name, search_path) for name in sorted(sys.stdlib_module_names, reverse=True) if not _skip(name)]
    while stack:
        name, path = stack.pop()
        if name in sys.builtin_module_names:
            yield name, None
            continue
        spec = importlib.machinery.PathFinder.find_spec(name.rpartition(".")[2], path)
        if spec is None or spec.origin is None:
            continue  # absent on this platform (msvcrt, winreg, ...)
        is_source = spec.origin.endswith(".py")
        yield name, spec.origin if is_source else None
        if spec.submodule_search_locations and name.count(".") + 1 < max_depth:
            children = sorted(info.name for info in pkgutil.iter_modules(spec.submodule_search_locations))
            locations = list(spec.submodule_search_locations)
            stack.extend((f"{name}.{c}", locations) for c in reversed(children) if not _skip(f"{name}.{c}"))


def _source_docstrings(origin: str) -> Iterator[str | None]:
    """Docstrings of a module file, read statically: no import, so no side effects and no monkeypatches."""
    try:
        with open(origin, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=origin)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError) as err:
        logger.debug("Skipping %s: %s", origin, err)
        return
    for node in ast.walk(tree):  # breadth first: module, then top-level defs, then methods
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield ast.get_docstring(node, clean=False)


def _compiled_docstrings(name: str) -> Iterator[str | None]:
    """Docstrings of a C module (math, itertools, ...): these exist only at run time, so import it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated modules (audioop, nis, ...) warn at import
            module = importlib.import_module(name)
    except Exception as err:  # platform-specific modules raise ImportError, OSError, ...
        logger.debug("Skipping %s: %s: %s", name, type(err).__name__, err)
        return
    yield module.__doc__
    # sorted names: `sys.__excepthook__` comes before a possibly replaced `sys.excepthook`
    for _, obj in sorted(vars(module).items()):
        if (inspect.isclass(obj) or inspect.isroutine(obj)) and getattr(obj, "__module__", None) == name:
            yield obj.__doc__
            if inspect.isclass(obj):
                for _, member in sorted(vars(obj).items()):
                    if inspect.isroutine(member) or inspect.isdatadescriptor(member):
                        yield getattr(member, "__doc__", None)


def _clean(doc) -> str | None:
    """A docstring as plain prose: dedented, doctest lines dropped; None when too short to be English."""
    if not isinstance(doc, str):
        return None
    lines = [
        line for line in inspect.cleandoc(doc).splitlines() if not line.lstrip().startswith((">>>", "... "))
    ]
    text = "\n".join(lines).strip()
    if len(text) < 40 or len(text.split()) < 6:
        return None
    return text


@functools.lru_cache(maxsize=1)
def _all_stdlib_docstrings() -> tuple[str, ...]:
    seen: dict[str, None] = {}  # an ordered set: the first occurrence wins
    n_modules = 0
    for name, origin in _stdlib_modules():
        n_modules += 1
        docs = _source_docstrings(origin) if origin is not None else _compiled_docstrings(name)
        for doc in docs:
            text = _clean(doc)
            if text is not None:
                seen.setdefault(text)
    docs = tuple(seen)
    logger.info(
        "Collected %d docstrings (%d characters) from %d standard-library modules.",
        len(docs),
        sum(map(len, docs)),
        n_modules,
    )
    return docs


def stdlib_docstrings(max_chars: int | None = None) -> list[str]:
    """Real human-written English: the installed Python standard library's docstrings.

    Walks `sys.stdlib_module_names` in sorted order, and their submodules with `pkgutil`, looking
    only in the interpreter's own library folders. Pure-Python modules are read with `ast`
    (never imported, so nothing runs and monkeypatching by torch & co. cannot change the text);
    compiled modules (`math`, `itertools`, ...) are imported for their C docstrings. GUI, test,
    private and generated modules, and those with import side effects (`antigravity`, `this`),
    are skipped; doctest lines are dropped and duplicates removed. The output is identical on
    every run of the same Python build, with no download.

    Args:
        max_chars: stop before the total length would exceed this many characters (None: all).

    Returns:
        The docstrings, in a fixed order.
    """
    if max_chars is not None and (
        isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1
    ):
        raise ValueError(f"`max_chars` must be None or a positive integer, got {max_chars!r}.")
    docs = _all_stdlib_docstrings()
    if max_chars is None:
        return list(docs)
    out, total = [], 0
    for doc in docs:
        if total + len(doc) > max_chars:
            break
        out.append(doc)
        total += len(doc)
    return out
