"""`make demo`: the project's main job. Train a small GPT on the built-in synthetic corpus with the
accelerate loop (`training.train.train`), measure it against the corpus's known entropy floor, and
sample from the saved Hub-ready folder.

    python -m training.demo --output_dir out/demo [--max_steps 1600] [--prompt "The"] [--num_samples 3]

Steps:

1. **Train** with `training.train.train` on `dataset="synthetic"` (`SyntheticCorpus(seed=0)`,
   1,000,000 words of English-like Markov-chain text): a byte-level BPE tokenizer trained on the
   training split (with 2000 entries every word of the corpus is one token), GPT-2 packing,
   AdamW + warmup + cosine decay. The Hub-ready model (weights, config, code, tokenizer, card,
   loss curve) lands in `output_dir/final/`; about two minutes of training on 2 CPU cores.
2. **Evaluate** on text the training run never saw: a fresh walk of the same chain
   (`SyntheticCorpus(seed=0).generate(eval_words, seed=eval_seed)`, `eval_seed` differing from the
   training corpus's seed 0), its documents joined by one space into a single stream (one
   continuous walk, whose entropy rate is exactly the chain's), scored by
   `sliding_window_perplexity`. The result is given in **bits per word** next to the source's
   true floor `SyntheticCorpus().entropy_rate_bits_per_word`: no model can beat it on average.
3. **Sample**: reload `output_dir/final` with `pipeline("text-generation", trust_remote_code=True)`
   and print `num_samples` seeded samples.

Words are counted as the corpus defines them (`count_words`): one word per step of the chain,
and "." (the sentence end) is a step, so a text has `len(text.split()) + text.count(".")` words
("The old dog ran. Anna slept." is 6 + 2 = 8 words: The old dog ran . Anna slept .), which makes
bits/word directly comparable to the chain's entropy rate. The stream starts with the
tokenizer's `<|endoftext|>`, as a document does in training, so every word of the text is scored.
The stream has no `<|endoftext|>` between documents (training text has one every 8 sentences), so
the little probability the model gives to a document end after "." counts against it: the
measured excess over the floor is, if anything, slightly pessimistic.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline, set_seed

from hf_lm.families import FAMILIES
from hf_lm.metrics.sliding_window import sliding_window_perplexity
from hf_lm.pipelines_seq2seq import check_generation_fits

from .args import DataArguments, ModelArguments, TrainArguments
from .args.flags import argument_parser
from .data.corpora import SyntheticCorpus
from .evaluate_cli import resolve_device
from .models import config_flags
from .train import train

logger = logging.getLogger(__name__)

# model sizes: (layers, hidden size, heads); "small" is what fits two minutes of 2 CPU cores
MODEL_SIZES = {"tiny": (1, 32, 2), "small": (2, 128, 4), "base": (4, 128, 4)}


@dataclass
class DemoArguments:
    """Flags of the demo job; every field is a `--flag` of the command line."""

    output_dir: str = field(default="out/demo", metadata={"help": "Run folder; the model is in <it>/final."})
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Delete a previous run's outputs in output_dir (else refused)."}
    )
    max_steps: int = field(
        default=1600, metadata={"help": "Optimizer updates (about 0.075 s each on 2 idle CPU cores)."}
    )
    seed: int = field(default=0, metadata={"help": "Seed of the split, init, data order and sampling."})
    model_size: str = field(default="small", metadata={"help": f"One of {list(MODEL_SIZES)}."})
    vocab_size: int = field(default=2000, metadata={"help": "Byte-level BPE vocabulary size."})
    block_size: int = field(default=64, metadata={"help": "Tokens per training block (the context)."})
    batch_size: int = field(default=32, metadata={"help": "Blocks per optimizer update."})
    learning_rate: float = field(default=5e-3, metadata={"help": "Peak AdamW learning rate."})
    warmup_steps: int = field(default=50, metadata={"help": "Linear warmup updates before cosine decay."})
    max_documents: int | None = field(
        default=None, metadata={"help": "Train on the first N synthetic documents only (all if unset)."}
    )
    eval_every: int = field(
        default=400, metadata={"help": "Evaluate on the held-out blocks every N updates."}
    )
    log_every: int = field(default=25, metadata={"help": "Log the training loss every N updates."})
    eval_words: int = field(
        default=20_000, metadata={"help": "Words of fresh synthetic text to evaluate on."}
    )
    eval_seed: int = field(default=12345, metadata={"help": "Seed of the evaluation walk (training uses 0)."})
    stride: int | None = field(
        default=None, metadata={"help": "Sliding-window stride (default block_size // 2)."}
    )
    prompt: str = field(default="The", metadata={"help": "Prompt of the samples."})
    num_samples: int = field(default=3, metadata={"help": "Samples printed at the end."})
    max_new_tokens: int = field(default=30, metadata={"help": "Tokens sampled after the prompt."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature (1.0: the model's law)."})
    mixed_precision: str = field(
        default="no", metadata={"help": "Training autocast: no, bf16 (CPU or GPU) or fp16 (GPU)."}
    )

    def __post_init__(self) -> None:
        if self.model_size not in MODEL_SIZES:
            raise ValueError(f"`model_size` must be one of {list(MODEL_SIZES)}, got {self.model_size!r}.")
        for name in ("eval_words", "num_samples", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be a positive integer, got {getattr(self, name)!r}.")
        if not self.temperature > 0:
            raise ValueError(f"`temperature` must be > 0, got {self.temperature!r}.")
        # the evaluation's windows, after training: known now
        if self.stride is not None and not 1 <= self.stride <= self.block_size:
            raise ValueError(f"`stride` must be in [1, block_size={self.block_size}], got {self.stride}.")


def count_words(text: str) -> int:
    """Words as `SyntheticCorpus` counts them: whitespace-split words, plus one per "." (a chain step)."""
    return len(text.split()) + text.count(".")


def build_arguments(args: DemoArguments) -> tuple[DataArguments, ModelArguments, TrainArguments]:
    """The three argument dataclasses of `training.train.train` for this demo."""
    layers, hidden, heads = MODEL_SIZES[args.model_size]
    data_args = DataArguments(
        dataset="synthetic",
        tokenizer_kind="byte_bpe",
        vocab_size=args.vocab_size,
        block_size=args.block_size,
        max_documents=args.max_documents,
    )
    model_args = ModelArguments(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads)
    train_args = TrainArguments(
        output_dir=args.output_dir,
        overwrite_output_dir=args.overwrite_output_dir,
        max_steps=args.max_steps,
        per_device_batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        warmup_steps=min(args.warmup_steps, args.max_steps),
        seed=args.seed,
        mixed_precision=args.mixed_precision,
        eval_every=args.eval_every,
        eval_batches=20,
        log_every=args.log_every,
        save_every=args.max_steps,  # one resumable checkpoint, at the end
        keep_last=1,
        report_to=["csv"],
    )
    return data_args, model_args, train_args


def evaluate_bits_per_word(final_dir: Path, args: DemoArguments) -> dict:
    """Sliding-window perplexity and bits per word of `final_dir` on a fresh walk of the chain."""
    corpus = SyntheticCorpus(seed=0)
    text = " ".join(corpus.generate(args.eval_words, seed=args.eval_seed))
    tokenizer = AutoTokenizer.from_pretrained(final_dir)
    model = AutoModelForCausalLM.from_pretrained(final_dir, trust_remote_code=True, dtype=torch.float32)
    model.to(resolve_device("auto"))  # the GPU the model trained on, if there is one
    ids = [tokenizer.eos_token_id] + tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
    result = sliding_window_perplexity(
        model,
        torch.tensor(ids),
        max_length=args.block_size,
        stride=args.stride if args.stride is not None else max(1, args.block_size // 2),
        batch_size=16,
        num_characters=len(text),
        num_words=count_words(text),
    )
    result["num_words"] = count_words(text)
    result["floor_bits_per_word"] = corpus.entropy_rate_bits_per_word
    result["excess_bits_per_word"] = result["bits_per_word"] - result["floor_bits_per_word"]
    return result


def _check_sampling(config, args: DemoArguments, prompt_tokens: int) -> None:
    """`--num_samples` samples of the prompt and `--max_new_tokens` within the model's positions and
    the device's memory (`check_generation_fits`)."""
    check_generation_fits(
        config,
        {"max_new_tokens": args.max_new_tokens, "num_return_sequences": args.num_samples},
        batch_size=1,
        input_length=prompt_tokens,
        device=resolve_device("auto"),
        where="The demo's samples (--prompt, --max_new_tokens, --num_samples)",
    )


def _table(rows: list[tuple[str, str]]) -> str:
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"  {name:<{width}}  {value}" for name, value in rows)


def run_demo(argv: list[str] | None = None) -> dict:
    """Train, evaluate and sample.

    Returns:
        `{"metrics": ..., "samples": [...]}`: train's final metrics plus the evaluation's
        `bits_per_word`, `floor_bits_per_word`, `excess_bits_per_word`, ...; the sampled texts.
    """
    (args,) = argument_parser([DemoArguments]).parse_args_into_dataclasses(args=argv)
    data_args, model_args, train_args = build_arguments(args)
    # the samples must fit the model's positions and memory: known before two minutes of training
    layers, hidden, heads = MODEL_SIZES[args.model_size]
    planned = FAMILIES["gpt"].config_class(
        vocab_size=args.vocab_size,
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        position_embedding_type=config_flags(model_args)["position_embedding_type"],
        max_position_embeddings=model_args.max_position_embeddings or args.block_size,
    )
    _check_sampling(planned, args, prompt_tokens=1)
    start = time.perf_counter()

    # 1. train: the model, tokenizer, card and loss curve land in output_dir/final
    metrics = train(data_args, model_args, train_args)
    final_dir = Path(args.output_dir) / "final"
    steps_per_second = metrics["step"] / metrics["seconds"] if metrics["seconds"] else float("nan")

    # 2. held-out bits per word against the source's entropy rate
    result = evaluate_bits_per_word(final_dir, args)
    metrics.update(
        {
            "bits_per_word": result["bits_per_word"],
            "floor_bits_per_word": result["floor_bits_per_word"],
            "excess_bits_per_word": result["excess_bits_per_word"],
            "eval_sliding_perplexity": result["perplexity"],
            "bits_per_token": result["bits_per_token"],
            "tokens_per_word": result["n_tokens"] / result["num_words"],
        }
    )
    logger.info(
        "Evaluation on %s fresh words (%s tokens, windows of %d):\n%s",
        f"{result['num_words']:,}",
        f"{result['n_tokens']:,}",
        args.block_size,
        _table(
            [
                (
                    "training (data + updates)",
                    f"{metrics['seconds']:.1f} s, {steps_per_second:.2f} updates/s",
                ),
                ("training loss (nats/token)", f"{metrics['train_loss']:.4f}"),
                ("held-out block loss (nats/token)", f"{metrics['eval_loss']:.4f}"),
                ("sliding-window perplexity (token)", f"{result['perplexity']:.3f}"),
                ("bits per token", f"{result['bits_per_token']:.4f}"),
                ("tokens per word", f"{metrics['tokens_per_word']:.3f}"),
                ("bits per word (model)", f"{result['bits_per_word']:.4f}"),
                ("bits per word (source floor)", f"{result['floor_bits_per_word']:.4f}"),
                ("excess over the floor", f"{result['excess_bits_per_word']:+.4f}"),
            ]
        ),
    )

    # 3. reload the Hub-ready folder like any checkpoint and sample
    generator = pipeline(
        "text-generation", model=str(final_dir), tokenizer=str(final_dir), trust_remote_code=True
    )
    _check_sampling(generator.model.config, args, len(generator.tokenizer(args.prompt)["input_ids"]))
    set_seed(args.seed)
    outputs = generator(
        args.prompt,
        max_new_tokens=args.max_new_tokens,
        do_sample=True,
        top_k=0,
        temperature=args.temperature,
        num_return_sequences=args.num_samples,
    )
    samples = [out["generated_text"] for out in outputs]
    metrics["demo_seconds"] = round(time.perf_counter() - start, 2)
    logger.info("Done in %.1f s; the model is in %s.", metrics["demo_seconds"], final_dir)
    return {"metrics": metrics, "samples": samples}


def main(argv: list[str] | None = None) -> str:
    """Run the demo; returns the first sample."""
    return run_demo(argv)["samples"][0]


if __name__ == "__main__":
    import sys

    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    samples = run_demo(sys.argv[1:])["samples"]
    print("\n".join(f"[{i}] {s}" for i, s in enumerate(samples, 1)))  # the CLI's result
