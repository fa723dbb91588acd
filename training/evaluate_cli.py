"""Sliding-window perplexity of a saved causal LM on a text file.

    python -m training.evaluate_cli --model PATH --text_file FILE [--max_length N --stride N]

Prints one JSON object on stdout (loss, perplexity, bits per token/character/word, token counts);
everything else goes to logging (stderr).
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import asdict, dataclass, field

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, HfArgumentParser

from hf_lm.metrics.sliding_window import default_window, sliding_window_perplexity

from .run_checks import learned_position_limit

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


def resolve_device(name: str) -> torch.device:
    """`auto` is the first GPU when CUDA is available, else the CPU; other names are torch's."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(name)
    except RuntimeError as err:
        raise ValueError(
            f"`device` must be auto or a torch device name (cpu, cuda, cuda:1), got {name!r}."
        ) from err


def read_text(path: str) -> str:
    """The UTF-8 text of `path`; a ValueError naming the line and byte where it is not UTF-8."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise ValueError(
            f"{path}, line {line} (byte {err.start}): not UTF-8 ({err.reason}); convert the file to UTF-8 "
            "(e.g. `iconv -f latin1 -t utf-8`)."
        ) from err


def evaluate_file(args: EvalArguments) -> dict:
    """Load the model and tokenizer, tokenize the file and score it with a sliding window.

    Args:
        args: the parsed `EvalArguments`.

    Returns:
        `sliding_window_perplexity`'s result plus the settings used and the text's counts.

    Raises:
        ValueError: a file that is not UTF-8, or too short to score one token (fewer than 2 tokens,
            the start token included).
    """
    tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
    text = read_text(args.text_file)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if args.add_start_token:
        if tokenizer.bos_token_id is None:
            raise ValueError("--add_start_token needs a tokenizer with a bos_token.")
        ids = [tokenizer.bos_token_id] + ids
    logger.info("%s: %d characters, %d tokens", args.text_file, len(text), len(ids))
    if len(ids) < 2:  # the first token is only context: nothing would be scored (a NaN perplexity)
        raise ValueError(
            f"{args.text_file}: {len(text)} characters, {len(ids)} token(s); at least 2 tokens are needed to "
            "score one (the first is only context; --add_start_token scores it after BOS)."
        )

    # the model last: a bad file fails before a long load
    model = AutoModelForCausalLM.from_pretrained(
        args.model, trust_remote_code=args.trust_remote_code, dtype=getattr(torch, args.dtype)
    )
    device = resolve_device(args.device)
    model = model.to(device)
    max_length = args.max_length if args.max_length is not None else default_window(model.config)
    limit = learned_position_limit(model.config)
    if limit is not None and max_length > limit:
        raise ValueError(f"`max_length` ({max_length}) is longer than the model's {limit} learned positions.")
    stride = args.stride if args.stride is not None else max(1, max_length // 2)

    result = sliding_window_perplexity(
        model,
        torch.tensor(ids, dtype=torch.long),
        max_length=max_length,
        stride=stride,
        device=device,
        batch_size=args.batch_size,
        num_characters=len(text),
        num_words=len(text.split()),
    )
    result.update(
        max_length=max_length,
        stride=stride,
        num_input_tokens=len(ids),
        num_characters=len(text),
        num_words=len(text.split()),
    )
    return result


def main(argv: list[str] | None = None) -> dict:
    """Parse `argv` (default: sys.argv), evaluate, and print the result as JSON on stdout."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = HfArgumentParser(EvalArguments)
    (args,) = parser.parse_args_into_dataclasses(args=argv)
    logger.info("arguments: %s", asdict(args))
    result = evaluate_file(args)
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
