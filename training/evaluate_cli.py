"""Sliding-window perplexity of a saved causal LM on a text file.

    python -m training.evaluate_cli --model PATH --text_file FILE [--max_length N --stride N]

Prints one JSON object on stdout (loss, perplexity, bits per token/character/word, token counts);
everything else goes to logging (stderr). The file is read, tokenized and scored a piece at a
time, so memory does not grow with it; the result is exactly the one of the whole text tokenized
in one call (the pieces are cut where the tokenizer encodes both sides alike). A model with NaN or
infinite weights, or whose scores overflow, is refused rather than given a NaN perplexity.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hf_lm.metrics.sliding_window import default_window, sliding_window_perplexity
from hf_lm.pipelines_seq2seq import device_memory_bytes

from .args.checks import check_model_folder, learned_position_limit
from .args.flags import argument_parser
from .data.local_files import NotUtf8Error, utf8_blocks

logger = logging.getLogger(__name__)

DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class EvalArguments:
    """Arguments of the perplexity CLI."""

    model: str = field(metadata={"help": "Folder of a causal LM and its tokenizer (save_pretrained)."})
    text_file: str = field(metadata={"help": "UTF-8 text file, scored as one token stream."})
    max_length: int | None = field(
        default=None,
        metadata={
            "help": "Window size; default: the model's max_position_embeddings (1024 without learned positions)."
        },
    )
    stride: int | None = field(
        default=None, metadata={"help": "Step between windows (<= max_length); default: max_length // 2."}
    )
    batch_size: int = field(default=1, metadata={"help": "Windows per forward pass."})
    add_start_token: bool = field(
        default=False, metadata={"help": "Prepend the BOS token so the first token is scored."}
    )
    device: str = field(
        default="auto",
        metadata={"help": "Device: auto (the GPU if there is one, else the CPU), cpu, cuda, cuda:1..."},
    )
    dtype: str = field(default="float32", metadata={"help": f"Model dtype: one of {', '.join(DTYPES)}."})
    trust_remote_code: bool = field(
        default=False,
        metadata={
            "help": "Run model/tokenizer code shipped inside the folder (its config's auto_map). Off by default, as in transformers: hf_lm's own model types load with the installed hf_lm without it."
        },
    )

    def __post_init__(self) -> None:
        # explicit checks: `args.stride or default` would turn 0 into the default silently
        if self.dtype not in DTYPES:
            raise ValueError(f"`dtype` must be one of {list(DTYPES)}, got {self.dtype!r}.")
        if self.max_length is not None and self.max_length < 2:
            raise ValueError(
                f"`max_length` must be at least 2 (one context and one target token), got {self.max_length}."
            )
        if self.stride is not None and self.stride < 1:
            raise ValueError(f"`stride` must be a positive number of tokens, got {self.stride}.")
        if self.stride is not None and self.max_length is not None and self.stride > self.max_length:
            raise ValueError(f"`stride` ({self.stride}) must be at most `max_length` ({self.max_length}).")
        if self.batch_size < 1:
            raise ValueError(f"`batch_size` must be at least 1, got {self.batch_size}.")
        resolve_device(self.device)  # a ValueError for a name torch does not know
        check_model_folder(self.model, "--model")  # a run's folder, not its final/


def resolve_device(name: str) -> torch.device:
    """`auto` is the first GPU when CUDA is available, else the CPU; other names are torch's."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ValueError(
            f"`device` must be auto or a torch device name (cpu, cuda, cuda:1), got {name!r}."
        ) from err
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device.type == "cuda" and (device.index or 0) >= gpus:  # else a failure after the model's load
        raise ValueError(f"`device` {name!r} names a CUDA GPU, and this machine has {gpus}: use auto or cpu.")
    return device


# the file is read, checked and tokenized a piece at a time: tokenizing a whole file in one call
# costs hundreds of bytes per character (a fast tokenizer's encoding), whatever the model
READ_BYTES = 1 << 16  # bytes decoded per read
CHUNK_CHARS = 1 << 16  # characters per tokenizer call
# characters kept after a cut inside each call, so that the tokens before the cut never depend on
# text beyond the call's end; the cut itself is checked (`_cut_tokens`)
TAIL_CHARS = 1 << 10
# a whitespace character after a non-whitespace one: where a chunk may end
_CUT = re.compile(r"(?<=\S)\s")
# the whitespace characters tried as cuts, nearest first, before a chunk grows (see `_cut_tokens`)
_CUT_TRIES = 4


def read_text_blocks(path: str, block_bytes: int | None = None) -> Iterator[str]:
    """The UTF-8 text of `path`, in blocks of about `block_bytes` bytes (default `READ_BYTES`;
    never the whole file).

    Raises:
        ValueError: naming the line and byte where the file is not UTF-8.
    """
    try:
        yield from utf8_blocks(path, block_bytes or READ_BYTES, decompress=False)
    except NotUtf8Error as err:
        raise ValueError(f"{path}, {err}") from err


def text_counts(path: str) -> tuple[int, int]:
    """`(characters, words)` of the UTF-8 file `path` (`len(text)`, `len(text.split())`), read in blocks."""
    characters = words = 0
    previous_ends_in_word = False
    for block in read_text_blocks(path):
        characters += len(block)
        words += len(block.split())
        if previous_ends_in_word and not block[0].isspace():
            words -= 1  # a word cut between two blocks was counted twice
        previous_ends_in_word = not block[-1].isspace()
    return characters, words


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _cut_tokens(tokenizer, chunk: str, tail_chars: int) -> tuple[list[int], int] | None:
    """The tokens of `chunk` before a cut, and the cut, or None where no cut is safe.

    A cut is a whitespace character that follows a non-whitespace one, at least `tail_chars` from
    the chunk's end. It is safe when the chunk's tokens are those of the text before it followed by
    those of the text from it, `tokens(chunk) == before + tokens(chunk[cut:])`: then starting the
    next call at the cut changes no token. What is safe depends on the tokenizer (GPT-2's byte-level
    BPE takes a cut before a newline or a space, a SentencePiece-style Metaspace one only before a
    space), so the nearest cut of each whitespace character is tried, up to `_CUT_TRIES`.
    """
    cuts, kinds = [], set()
    for match in reversed(list(_CUT.finditer(chunk, 0, len(chunk) - tail_chars))):
        if match.group() not in kinds:
            kinds.add(match.group())
            cuts.append(match.start())
            if len(cuts) == _CUT_TRIES:
                break
    if not cuts:
        return None
    ids = _encode(tokenizer, chunk)
    for cut in cuts:
        tail = _encode(tokenizer, chunk[cut:])
        if len(tail) <= len(ids) and ids[len(ids) - len(tail) :] == tail:
            return ids[: len(ids) - len(tail)], cut
    return None


def tokenize_blocks(
    tokenizer, blocks: Iterable[str], chunk_chars: int | None = None, tail_chars: int | None = None
) -> Iterator[list[int]]:
    """The token ids of the text `blocks` make up, in pieces: exactly `tokenizer(text)`'s
    (without special tokens), with no tokenizer call on more than about `chunk_chars` characters
    (default `CHUNK_CHARS`; `tail_chars`: `TAIL_CHARS`).

    Each call ends at a cut that changes no token (`_cut_tokens`); the text after the cut starts
    the next call. Where a chunk holds no safe cut (a tokenizer that joins everything, text without
    whitespace) the call takes more text, as much as it needs.
    """
    chunk_chars, tail_chars = chunk_chars or CHUNK_CHARS, tail_chars or TAIL_CHARS
    pending, size, warned = "", chunk_chars, False
    for block in blocks:
        pending += block
        while len(pending) >= size:
            cut = _cut_tokens(tokenizer, pending[:size], tail_chars)
            if cut is None:
                size += chunk_chars
                if size > 16 * chunk_chars and not warned:
                    logger.warning(
                        "No place to cut the text into pieces the tokenizer encodes alike: tokenizing %d "
                        "characters or more in one call (memory grows with it).",
                        size,
                    )
                    warned = True
                break
            ids, position = cut
            yield ids
            pending, size = pending[position:], chunk_chars
    if pending:
        yield _encode(tokenizer, pending)


def _first_tokens(pieces: Iterator[list[int]], wanted: int) -> tuple[list[list[int]], int]:
    """Read pieces until they hold `wanted` tokens or end: `(pieces read, tokens in them)`."""
    read, count = [], 0
    while count < wanted:
        piece = next(pieces, None)
        if piece is None:
            break
        read.append(piece)
        count += len(piece)
    return read, count


def _check_finite_weights(model, path: str, dtype: str) -> None:
    """Refuse a model with a NaN or infinite weight: its perplexity would be NaN or inf, not a score."""
    for name, param in model.named_parameters():
        if not bool(torch.isfinite(param).all()):
            raise ValueError(
                f"{path}: the weight {name} holds NaN or infinite values in {dtype} (a diverged or damaged "
                "checkpoint, or values beyond the dtype's range: try --dtype float32); it cannot be scored."
            )


def evaluate_file(args: EvalArguments) -> dict:
    """Load the model and tokenizer, and score the file with a sliding window, reading, tokenizing
    and scoring it a piece at a time (memory does not grow with the file).

    Args:
        args: the parsed `EvalArguments`.

    Returns:
        `sliding_window_perplexity`'s result plus the settings used and the text's counts.

    Raises:
        ValueError: a file that is not UTF-8, or too short to score one token (fewer than 2 tokens,
            the start token included); a model with non-finite weights, or a non-finite result.
    """
    tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
    if args.add_start_token and tokenizer.bos_token_id is None:
        raise ValueError("--add_start_token needs a tokenizer with a bos_token.")
    num_characters, num_words = text_counts(args.text_file)  # a file that is not UTF-8 fails here
    pieces = tokenize_blocks(tokenizer, read_text_blocks(args.text_file))
    if args.add_start_token:
        pieces = itertools.chain([[tokenizer.bos_token_id]], pieces)
    first, count = _first_tokens(pieces, 2)
    if count < 2:  # the first token is only context: nothing would be scored (a NaN perplexity)
        raise ValueError(
            f"{args.text_file}: {num_characters} characters, {count} token(s); at least 2 tokens are needed to "
            "score one (the first is only context; --add_start_token scores it after BOS)."
        )
    logger.info("%s: %d characters, %d words", args.text_file, num_characters, num_words)

    # the model last: a bad file fails before a long load
    model = AutoModelForCausalLM.from_pretrained(
        args.model, trust_remote_code=args.trust_remote_code, dtype=getattr(torch, args.dtype)
    )
    _check_finite_weights(model, args.model, args.dtype)
    device = resolve_device(args.device)
    model = model.to(device)
    max_length = args.max_length if args.max_length is not None else default_window(model.config)
    limit = learned_position_limit(model.config)
    if limit is not None and max_length > limit:
        raise ValueError(f"`max_length` ({max_length}) is longer than the model's {limit} learned positions.")
    stride = args.stride if args.stride is not None else max(1, max_length // 2)

    result = sliding_window_perplexity(
        model,
        itertools.chain(first, pieces),
        max_length=max_length,
        stride=stride,
        device=device,
        batch_size=args.batch_size,
        num_characters=num_characters,
        num_words=num_words,
        memory_limit=device_memory_bytes(device),  # a --max_length far beyond any context, on a long file
    )
    if not math.isfinite(result["nll_sum"]):
        raise ValueError(
            f"{args.model} scores {args.text_file} with a non-finite log-likelihood ({result['nll_sum']}): its "
            f"logits overflow in {args.dtype} (try --dtype float32) or the model is damaged; no perplexity."
        )
    logger.info("%s: %d tokens scored of %d", args.text_file, result["n_tokens"], result["num_input_tokens"])
    result.update(
        max_length=max_length,
        stride=stride,
        num_characters=num_characters,
        num_words=num_words,
    )
    return result


def main(argv: list[str] | None = None) -> dict:
    """Parse `argv` (default: sys.argv), evaluate, and print the result as JSON on stdout."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = argument_parser([EvalArguments])
    (args,) = parser.parse_args_into_dataclasses(args=argv)
    logger.info("arguments: %s", asdict(args))
    result = evaluate_file(args)
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
