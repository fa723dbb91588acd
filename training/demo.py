"""`make demo`: train a tiny GPT on the Python standard library's docstrings, on CPU, in minutes.

    python -m training.demo --output_dir out/demo [--max_steps 600] [--prompt "The"]

The whole life of a model, offline: collect text (`stdlib_docstrings`), train a byte-level BPE
tokenizer, pack the tokens into fixed blocks, train a small `HfLmGPTForCausalLM` with a plain
torch loop (AdamW, warmup + cosine decay), measure held-out perplexity, save model + tokenizer +
model card + loss curve, then load the folder back through `pipeline("text-generation")` and
print one sampled sentence. A full training framework is a separate piece of work; this stays
one readable file.
"""

from __future__ import annotations

import logging
import math
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm
from transformers import HfArgumentParser, get_cosine_schedule_with_warmup, pipeline, set_seed

from hf_lm import HfLmGPTConfig, HfLmGPTForCausalLM
from hf_lm.cards import write_model_card
from hf_lm.plots import plot_loss_curves
from training.tokenizer import stdlib_docstrings, train_tokenizer

logger = logging.getLogger(__name__)


@dataclass
class DemoArguments:
    """Flags of the demo job; every field is a `--flag` of the command line."""

    output_dir: str = field(default="out/demo", metadata={"help": "Where the model folder is written."})
    max_steps: int = field(default=600, metadata={"help": "Optimizer steps (~0.15 s each on 2 idle cores)."})
    seed: int = field(default=0, metadata={"help": "Seed of the split, init, batches and sampling."})
    vocab_size: int = field(default=2000, metadata={"help": "Byte-level BPE vocabulary size."})
    num_hidden_layers: int = field(default=4, metadata={"help": "Transformer blocks."})
    hidden_size: int = field(default=128, metadata={"help": "Model width."})
    num_attention_heads: int = field(default=4, metadata={"help": "Attention heads."})
    context_length: int = field(default=128, metadata={"help": "Tokens per training block (and context)."})
    batch_size: int = field(default=16, metadata={"help": "Blocks per optimizer step."})
    learning_rate: float = field(default=5e-3, metadata={"help": "Peak AdamW learning rate."})
    warmup_steps: int = field(
        default=200,
        metadata={"help": "Linear warmup steps before cosine decay (shorter is unstable at 5e-3)."},
    )
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW decay of the matrices."})
    eval_fraction: float = field(default=0.05, metadata={"help": "Share of documents held out."})
    max_chars: int | None = field(default=None, metadata={"help": "Cap on corpus characters (all if unset)."})
    log_every: int = field(default=25, metadata={"help": "Log the training loss every N steps."})
    prompt: str = field(default="The", metadata={"help": "Prompt of the final generation."})
    max_new_tokens: int = field(default=40, metadata={"help": "Tokens sampled after the prompt."})
    temperature: float = field(default=0.8, metadata={"help": "Sampling temperature (top-k 40)."})


def pack(tokenizer, docs: list[str], block_size: int) -> torch.Tensor:
    """Tokenize `docs`, join them with EOS and cut the stream into (N, block_size) blocks.

    Blocks cross document boundaries (GPT-2 style packing): the EOS tells the model a new text
    starts, and no token is wasted on padding. The incomplete tail is dropped.
    """
    ids = tokenizer(docs, add_special_tokens=False, verbose=False)["input_ids"]
    stream = [token for doc in ids for token in (*doc, tokenizer.eos_token_id)]
    n_blocks = len(stream) // block_size
    if n_blocks == 0:
        raise ValueError(f"The corpus has {len(stream)} tokens: fewer than one block of {block_size}.")
    return torch.tensor(stream[: n_blocks * block_size]).view(n_blocks, block_size)  # (N, T)


def batches(blocks: torch.Tensor, batch_size: int, generator: torch.Generator):
    """Endless random batches (B, T): a fresh permutation of the blocks every epoch."""
    while True:
        order = torch.randperm(len(blocks), generator=generator)
        for start in range(0, len(order) - batch_size + 1, batch_size):
            yield blocks[order[start : start + batch_size]]


@torch.no_grad()
def evaluate(model, blocks: torch.Tensor, batch_size: int) -> float:
    """Mean next-token loss over `blocks` (every block has the same length, so a mean of means)."""
    model.eval()
    total = 0.0
    for start in range(0, len(blocks), batch_size):
        batch = blocks[start : start + batch_size]
        total += model(input_ids=batch, labels=batch).loss.item() * len(batch)
    model.train()
    return total / len(blocks)


def ema(values: list[float], decay: float = 0.9) -> list[float]:
    """Exponential moving average: the trend of a noisy per-step loss."""
    out, avg = [], values[0]
    for value in values:
        avg = decay * avg + (1 - decay) * value
        out.append(avg)
    return out


def train(model, train_blocks: torch.Tensor, args: DemoArguments) -> list[float]:
    """A plain torch loop: AdamW, linear warmup then cosine decay, gradient clipping."""
    # weight decay on matrices only; biases, norms' gains and ... stay undecayed (nanoGPT)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": args.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate, betas=(0.9, 0.95))
    scheduler = get_cosine_schedule_with_warmup(optimizer, args.warmup_steps, args.max_steps)
    data = batches(train_blocks, args.batch_size, torch.Generator().manual_seed(args.seed))

    model.train()
    losses = []
    with logging_redirect_tqdm(), tqdm(range(1, args.max_steps + 1), desc="training", unit="step") as bar:
        for step in bar:
            batch = next(data)  # (B, T)
            loss = model(input_ids=batch, labels=batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
            if step % args.log_every == 0 or step == args.max_steps:
                recent = losses[-args.log_every :]
                logger.info(
                    "step %d/%d  loss %.4f  lr %.2e",
                    step,
                    args.max_steps,
                    sum(recent) / len(recent),
                    scheduler.get_last_lr()[0],
                )
    return losses


def main(argv: list[str] | None = None) -> str:
    """Run the demo; returns the generated text (the CLI prints it)."""
    (args,) = HfArgumentParser(DemoArguments).parse_args_into_dataclasses(args=argv)
    output_dir = Path(args.output_dir)
    start = time.perf_counter()
    set_seed(args.seed)

    # 1. data: held-out documents, not held-out blocks, so no text leaks across the split
    docs = stdlib_docstrings(max_chars=args.max_chars)
    order = list(range(len(docs)))
    random.Random(args.seed).shuffle(order)
    n_eval = max(1, round(len(docs) * args.eval_fraction))
    eval_docs = [docs[i] for i in order[:n_eval]]
    train_docs = [docs[i] for i in order[n_eval:]]

    # 2. tokenizer, trained on the training split only
    tokenizer = train_tokenizer(
        train_docs, kind="byte_bpe", vocab_size=args.vocab_size, model_max_length=args.context_length
    )
    train_blocks = pack(tokenizer, train_docs, args.context_length)
    eval_blocks = pack(tokenizer, eval_docs, args.context_length)
    logger.info(
        "%d train documents -> %d blocks of %d tokens; %d held-out documents -> %d blocks.",
        len(train_docs),
        len(train_blocks),
        args.context_length,
        len(eval_docs),
        len(eval_blocks),
    )

    # 3. model: GPT-2's recipe, shrunk
    config = HfLmGPTConfig(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden_size,
        num_hidden_layers=args.num_hidden_layers,
        num_attention_heads=args.num_attention_heads,
        max_position_embeddings=args.context_length,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = HfLmGPTForCausalLM(config)
    logger.info("Model: %s parameters.", f"{model.num_parameters():,}")

    # 4. train and evaluate
    losses = train(model, train_blocks, args)
    eval_loss = evaluate(model, eval_blocks, args.batch_size)
    train_seconds = time.perf_counter() - start
    logger.info("Held-out loss %.4f, perplexity %.2f.", eval_loss, math.exp(eval_loss))

    # 5. save: weights + config + code, tokenizer, card, loss curve
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    tail = losses[-min(len(losses), args.log_every) :]
    metrics = {
        "held-out loss (nats/token)": eval_loss,
        "held-out perplexity": math.exp(eval_loss),
        f"training loss (mean of last {len(tail)} steps)": sum(tail) / len(tail),
        "training steps": args.max_steps,
        "training tokens seen": args.max_steps * args.batch_size * args.context_length,
        "wall time, data to saved model (s)": round(train_seconds, 1),
    }
    python = ".".join(map(str, sys.version_info[:3]))
    dataset = (
        f"The docstrings of the Python {python} standard library (`training.tokenizer.stdlib_docstrings`): "
        f"{len(docs):,} deduplicated docstrings, {sum(map(len, docs)):,} characters of English technical "
        f"prose. {len(eval_docs):,} documents ({args.eval_fraction:.0%}) were held out for evaluation; "
        f"the rest were packed into {len(train_blocks):,} blocks of {args.context_length} tokens "
        "separated by `<|endoftext|>`."
    )
    write_model_card(
        model,
        output_dir,
        dataset=dataset,
        metrics=metrics,
        tokenizer=tokenizer,
        extra={"prompt": args.prompt},
    )
    steps = list(range(1, len(losses) + 1))
    plot_loss_curves(
        {
            "train (per step)": (steps, losses),
            "train (EMA 0.9)": (steps, ema(losses)),
            "held-out": ([len(losses)], [eval_loss]),
        },
        output_dir / "loss.png",
        title="hf_lm demo: a tiny GPT on stdlib docstrings",
    )

    # 6. load the folder back like any Hub checkpoint and sample a sentence
    generator = pipeline(
        "text-generation", model=str(output_dir), tokenizer=str(output_dir), trust_remote_code=True
    )
    set_seed(args.seed)
    out = generator(
        args.prompt,
        max_new_tokens=args.max_new_tokens,
        do_sample=True,
        top_k=40,
        temperature=args.temperature,
    )
    text = out[0]["generated_text"]
    logger.info("Sample: %r", text)
    logger.info("Done in %.1f s; the model is in %s.", time.perf_counter() - start, output_dir)
    return text


if __name__ == "__main__":
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    print(main())  # the CLI's result
