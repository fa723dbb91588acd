"""The cases of the GPU sweep (`tests/test_cuda.py`, `make gpu-check`), each a function that raises
on failure and returns a one-line summary, shared with `tests/test_device_placement.py`, which runs
them with the model on a simulated accelerator.

Each case runs at tiny size, in fp32 (`"no"`, as `--mixed_precision` names it), bf16 or fp16 autocast:

- loop: `training.train` for every architecture and objective (GPT, BERT masked LM, T5 span
  corruption, BART denoising, n-gram, feed-forward, LSTM, GRU with truncated BPTT, RNN
  encoder-decoder, scheduled sampling), streaming, document masking, gradient accumulation and a
  wall-clock budget; then a resume of the same run two steps further (fp16: the GradScaler's state
  is in the checkpoint and restored). With two or more GPUs, a 2-process DDP run (`torchrun`).
- families: every model class of every family (`hf_lm.testing.FAMILY_CASES`) and every entry of the
  GPT and BERT variant grids (`VARIANT_CASES`: ALiBi, xPos, relative biases, RoPE, gated activations,
  grouped queries, ALBERT sharing, sparse attention): forward with labels,
  backward, and `generate()` where the family generates, next to the same model on the CPU; in
  fp32, the families with a static cache also decode with `hf_lm.generation_static.static_decode`,
  greedy and sampled, which must give `generate()`'s tokens on the device, and `<family>/compiled_static`
  has `generate()` compile their decoding step (fullgraph, Inductor on a GPU) and give the dynamic
  cache's tokens; `vocab_projection` checks the LM heads' padded product.
- pipelines: every pipeline the README lists on the device, against the CPU pipeline's output.
- tools: `evaluate_cli`, the demo, the fine-tuning scripts (classification, and translation for
  every family) with `--bf16`/`--fp16`.
- leaderboards: the LM, translation and SST-2 leaderboards and the ablation runner, `--smoke`, each
  in a process of its own from the repository root (they read the data under `../shared/data`).
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from training.run.optimizer import tf32_restored

REPO_ROOT = Path(__file__).resolve().parent.parent
PRECISIONS = ("no", "bf16", "fp16")  # `--mixed_precision`'s names: "no" is fp32


@contextlib.contextmanager
def matmul_precision_for(precision: str) -> Iterator[None]:
    """The float32 matmul setting a case needs, and the caller's back afterwards.

    fp32 cases compare with the CPU at 1e-4, so TF32 is off for them (cuDNN's LSTM/GRU kernels too):
    on an H100 every fp32 family check once failed 1e-3 off the CPU because a loop run before them
    had turned TF32 on for the whole process. Whatever a case turns on, the next one starts clean.
    """
    with tf32_restored():
        if precision == "no":
            torch.set_float32_matmul_precision("highest")
            torch.backends.cudnn.allow_tf32 = False
        yield


# ----------------------------------------------------------------------------------------------
# The training loop: every architecture, objective and data path at tiny size
# ----------------------------------------------------------------------------------------------

# a 1-layer, 32-wide model on 200 synthetic documents: each run takes seconds on any device
LOOP_BASE_ARGS = (
    "--dataset synthetic --max_documents 200 --vocab_size 300 --block_size 32 --hidden_size 32 "
    "--num_hidden_layers 1 --num_attention_heads 2 --per_device_batch_size 4 --warmup_steps 1 "
    "--max_steps 4 --eval_every 2 --save_every 2 --eval_batches 2 --report_to none"
).split()

# name -> the flags that select the path; every `--arch` and `--objective` appears
LOOP_CASES: dict[str, tuple[str, ...]] = {
    "gpt": (),
    "bert_mlm": ("--objective", "mlm", "--tokenizer_kind", "wordpiece", "--pseudo_perplexity_blocks", "2"),
    "electra": ("--objective", "electra", "--tokenizer_kind", "wordpiece"),
    "t5_span_corruption": ("--objective", "span_corruption"),
    "bart_denoising": ("--objective", "bart_denoising"),
    "ngram": ("--arch", "ngram"),
    "ffnn": ("--arch", "ffnn"),
    "lstm": ("--arch", "rnn", "--cell_type", "lstm"),
    "gru_tbptt": ("--arch", "rnn", "--cell_type", "gru", "--tbptt"),
    "rnn_seq2seq": ("--arch", "rnn_seq2seq", "--objective", "span_corruption"),
    "rnn_scheduled_sampling": (
        "--arch",
        "rnn_seq2seq",
        "--objective",
        "bart_denoising",
        "--scheduled_sampling",
        "linear",
        "--scheduled_sampling_c",
        "0.2",
    ),  # fmt: skip
    "streaming": ("--streaming", "--shuffle_buffer_size", "16"),
    "document_mask": ("--document_mask",),
    "accumulation": ("--gradient_accumulation_steps", "2"),
    "budget": ("--max_train_seconds", "0.5", "--max_steps", "1000"),
    "random_windows_best": ("--sampling", "random_windows", "--load_best_model_at_end"),
    "torch_compile": ("--torch_compile",),
}
# torch.compile traces real devices only: the simulated accelerator of the tests cannot run it
COMPILED = ("torch_compile",)
# runs that cannot be resumed two steps further: an n-gram model is fitted once, a budget has no end step
NOT_RESUMED = ("ngram", "budget")


def loop_argv(
    case: str, output_dir: str | os.PathLike, precision: str = "no", resume: bool = False
) -> list[str]:
    """The `training.train` flags of one loop case (resumed: two steps further, from its checkpoint)."""
    argv = [
        *LOOP_BASE_ARGS,
        *LOOP_CASES[case],
        "--mixed_precision",
        precision,
        "--output_dir",
        str(output_dir),
    ]
    if resume:
        argv += ["--resume", "true", "--max_steps", "6"]
    return argv


def check_loop_metrics(metrics: dict, case: str, resumed: bool) -> str:
    """Raise unless a loop run ended where it should with finite metrics; a one-line summary."""
    expected = 6 if resumed else 4
    if case == "ngram":
        expected = 0  # fitted by counting: no gradient steps
    elif case == "budget":
        expected = None
    if expected is not None and metrics["step"] != expected:
        raise AssertionError(f"stopped at step {metrics['step']}, expected {expected}")
    if not math.isfinite(metrics["eval_loss"]):
        raise AssertionError(f"eval_loss {metrics['eval_loss']}")
    return f"step {metrics['step']}, eval_loss {metrics['eval_loss']:.4f}"


def run_loop_case(case: str, workdir: Path, precision: str) -> str:
    """Train one loop case, then resume it two steps further; fp16 must checkpoint its loss scale."""
    from training import train

    output_dir = workdir / f"loop_{case}_{precision}"
    shutil.rmtree(output_dir, ignore_errors=True)
    details = [check_loop_metrics(train.main(loop_argv(case, output_dir, precision)), case, resumed=False)]
    if case not in NOT_RESUMED:
        if precision == "fp16":
            scalers = list((output_dir / "checkpoints").glob("*/scaler.pt"))
            if not scalers:
                raise AssertionError("fp16 run saved no scaler.pt: the loss scale would be lost on resume")
        resumed = train.main(loop_argv(case, output_dir, precision, resume=True))
        details.append("resumed: " + check_loop_metrics(resumed, case, resumed=True))
    return "; ".join(details)


def run_ddp(workdir: Path, precision: str) -> str:
    """Two processes of the loop (`torchrun`), one GPU each."""
    output_dir = workdir / f"ddp_{precision}"
    shutil.rmtree(output_dir, ignore_errors=True)
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        "-m", "training.train", *loop_argv("gpt", output_dir, precision),
    ]  # fmt: skip
    _run(command, workdir / f"ddp_{precision}.log")
    metrics = json.loads((output_dir / "final_metrics.json").read_text())
    if metrics["world_size"] != 2:
        raise AssertionError(f"world_size {metrics['world_size']}")
    return check_loop_metrics(metrics, "gpt", resumed=False) + ", 2 processes"


# ----------------------------------------------------------------------------------------------
# Families: every model class, forward with labels, backward and generate, against the CPU
# ----------------------------------------------------------------------------------------------

HALF = {"no": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _main_output(out) -> torch.Tensor:
    """The tensor a head is for: logits, prediction logits, start logits or the last hidden state."""
    for key in ("logits", "prediction_logits", "start_logits", "last_hidden_state"):
        if out.get(key) is not None:
            return out[key]
    raise AssertionError(f"no main output among {list(out.keys())}")


def run_family_case(name: str, device: torch.device | str, precision: str = "no") -> str:
    """One model class on `device` (in `precision` autocast) next to the same weights on the CPU in fp32.

    fp32 must match the CPU (loss, main output, greedy tokens); bf16/fp16 must stay within 5% of
    its loss (measured: under 3%) with finite gradients.
    """
    from hf_lm.generation_static import unsupported_model
    from hf_lm.testing import FAMILY_CASES, VARIANT_CASES

    case = next(c for c in FAMILY_CASES + VARIANT_CASES if c.name == name)
    reference = case.make_model(seed=0)
    batch = case.make_batch()
    with torch.no_grad():
        expected = reference(**batch)
    model = case.make_model(seed=0).to(device)
    autocast = contextlib.nullcontext()
    if precision != "no":
        autocast = torch.autocast(torch.device(device).type, HALF[precision])
    with autocast:
        out = model(**{k: v.to(device) for k, v in batch.items()})
    loss = out.get("loss")
    if loss is not None:
        if not torch.isfinite(loss).item():
            raise AssertionError(f"loss {loss.item()}")
        tolerance = 1e-4 if precision == "no" else 0.05
        if not math.isclose(loss.item(), expected.loss.item(), rel_tol=tolerance, abs_tol=tolerance):
            raise AssertionError(f"loss {loss.item():.5f} on {device}, {expected.loss.item():.5f} on the CPU")
        if loss.requires_grad:  # the n-gram model is counted, not trained
            loss.backward()
        bad = [
            n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()
        ]
        if bad:
            raise AssertionError(f"non-finite gradients in {bad[:3]}")
    if precision == "no":
        torch.testing.assert_close(
            _main_output(out).detach().cpu(), _main_output(expected), atol=1e-4, rtol=1e-4
        )
    detail = f"loss {loss.item():.4f}" if loss is not None else f"output {tuple(_main_output(out).shape)}"
    if case.generates:
        greedy = dict(max_new_tokens=3, do_sample=False)
        with autocast:
            tokens = model.generate(**{k: v.to(device) for k, v in case.prompt(batch).items()}, **greedy)
        if precision == "no":
            expected_tokens = reference.generate(**case.prompt(batch), **greedy)
            if not torch.equal(tokens.cpu(), expected_tokens):
                raise AssertionError(
                    f"greedy tokens {tokens.tolist()} != the CPU's {expected_tokens.tolist()}"
                )
        detail += f", generated {tuple(tokens.shape)}"
        if precision == "no" and unsupported_model(model) is None:  # a static cache, no sliding window
            detail += ", " + _static_decode_agrees(
                model, {k: v.to(device) for k, v in case.prompt(batch).items()}
            )
    return detail


def _static_decode_agrees(model, prompt: dict) -> str:
    """hf_lm's static-cache decoding loop gives `generate()`'s tokens on this device: greedy, and
    sampled from one seed (its draw is `torch.multinomial`'s without its validity checks). Uncompiled:
    benchmarks.gpu times the compiled loop."""
    from hf_lm.generation_static import static_decode

    loop = dict(cache_implementation="static", custom_generate=static_decode, disable_compile=True)
    for do_sample in (False, True):
        runs = []
        for extra in ({}, loop):
            torch.manual_seed(0)
            runs.append(model.generate(**prompt, max_new_tokens=5, do_sample=do_sample, **extra))
        if not torch.equal(*runs):
            how = "sampled" if do_sample else "greedy"
            raise AssertionError(
                f"static_decode's {how} tokens {runs[1].tolist()} != generate()'s {runs[0].tolist()}"
            )
    return "static_decode = generate() (greedy, sampled)"


def run_compiled_static_case(name: str, device: torch.device | str) -> str:
    """`generate()` compiles the decoding step of a family with a static cache, in one graph, and
    decodes the dynamic cache's greedy tokens (fp32). Inductor on a GPU, as `generate()` does by
    itself there; the eager backend elsewhere (the CPU run checks the tracing, not the kernels)."""
    from torch._dynamo.utils import counters
    from transformers import CompileConfig

    from hf_lm.testing import FAMILY_CASES

    case = next(c for c in FAMILY_CASES if c.name == name)
    model = case.make_model(seed=0).to(device).eval()
    prompt = {k: v.to(device) for k, v in case.prompt(case.make_batch()).items()}
    cuda = torch.device(device).type == "cuda"
    config = CompileConfig(fullgraph=True, backend="inductor" if cuda else "eager")
    if not cuda:
        config.mode, config._compile_all_devices = None, True  # generate() compiles on accelerators only
    greedy = dict(max_new_tokens=5, do_sample=False)
    torch._dynamo.reset()  # a fresh cache: no graph of another model counts towards the recompile limit
    dynamic = model.generate(**prompt, **greedy)
    before = counters["stats"]["unique_graphs"]
    static = model.generate(**prompt, **greedy, cache_implementation="static", compile_config=config)
    graphs = counters["stats"]["unique_graphs"] - before
    if not hasattr(model, "_compiled_call") or graphs == 0:
        raise AssertionError("generate() did not compile the decoding step")
    if not torch.equal(dynamic, static):
        raise AssertionError(
            f"compiled static tokens {static.tolist()} != the dynamic cache's {dynamic.tolist()}"
        )
    return f"{config.backend}, {graphs} graph(s) with fullgraph=True; tokens = the dynamic cache's"


def run_vocab_projection_case(device: torch.device | str, precision: str = "no") -> str:
    """The LM heads' vocabulary projection (GPT, T5/BART, BERT) at training size, against `F.linear`:
    on CUDA it pads the weight of a vocabulary that is no multiple of 64 for the product
    (`VocabProjection.aligned_linear`), which must give the same logits and gradients."""
    import torch.nn.functional as F

    from hf_lm.models.hflm_layers import (
        VocabProjection,
    )

    torch.manual_seed(0)
    head = VocabProjection(64, 1001, bias=True).to(device)  # 1001 = 15 x 64 + 41
    torch.nn.init.normal_(head.bias)
    x = torch.randn(2, VocabProjection.ALIGN_MIN_ROWS // 2, 64, device=device)
    aligned = []
    original = head.aligned_linear
    head.aligned_linear = lambda *args: aligned.append(True) or original(*args)
    autocast = contextlib.nullcontext()
    if precision != "no":
        autocast = torch.autocast(torch.device(device).type, HALF[precision])
    results = []
    for project in (head, lambda h: F.linear(h, head.weight, head.bias)):
        h = x.clone().requires_grad_(True)
        with autocast:
            out = project(h)  # (2, 128, 1001)
        grads = torch.autograd.grad(out.float().square().sum(), (h, head.weight, head.bias))
        results.append((out.float(), *grads))
    tolerance = {"atol": 1e-4, "rtol": 1e-4} if precision == "no" else {"atol": 5e-2, "rtol": 2e-2}
    for got, expected in zip(*results):
        torch.testing.assert_close(got, expected, **tolerance)
    if torch.device(device).type == "cuda" and not aligned:
        raise AssertionError("the padded product (aligned_linear) was not used on CUDA")
    if not results[0][0].is_contiguous():
        raise AssertionError("the logits are not contiguous")
    return f"logits and gradients equal F.linear's; padded product: {'yes' if aligned else 'no (CPU)'}"


# ----------------------------------------------------------------------------------------------
# Pipelines: each task the README lists, on a tiny saved folder, against the same pipeline on the CPU
# ----------------------------------------------------------------------------------------------

PIPELINE_CORPUS = [
    "The cat sat on the mat near the door.",
    "Alice lives in Paris and Bob lives in London.",
    "A dog ran in the park with a red ball.",
    "The treasure is hidden in the golden harbor.",
    "Ships wait in the harbor at night.",
] * 4


@dataclass(frozen=True)
class PipelineCase:
    """A pipeline task on a tiny model: `build(folder)` saves the model and tokenizer there."""

    task: str
    build: Callable[[Path], None]
    inputs: object
    kwargs: dict = field(default_factory=dict)


def _save(folder: Path, model, tokenizer) -> None:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _gpt_folder(folder: Path, head: str = "lm") -> None:
    from hf_lm import HfLmGPTConfig, HfLmGPTForCausalLM, HfLmGPTModel
    from training.data.tokenizer import train_tokenizer

    tok = train_tokenizer(PIPELINE_CORPUS, kind="byte_bpe", vocab_size=300, padding_side="left")
    config = HfLmGPTConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        max_position_embeddings=64, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    _save(folder, (HfLmGPTForCausalLM if head == "lm" else HfLmGPTModel)(config), tok)


def _bert_folder(folder: Path, head: str) -> None:
    import hf_lm
    from training.data.tokenizer import BERT_SPECIAL_TOKENS, train_tokenizer

    tok = train_tokenizer(
        PIPELINE_CORPUS, kind="wordpiece", vocab_size=200, special_tokens=BERT_SPECIAL_TOKENS
    )
    config = hf_lm.HfLmBertConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        max_position_embeddings=128, pad_token_id=tok.pad_token_id, num_labels=5 if head == "token" else 2,
    )  # fmt: skip
    model_class = {
        "mlm": hf_lm.HfLmBertForMaskedLM,
        "sequence": hf_lm.HfLmBertForSequenceClassification,
        "token": hf_lm.HfLmBertForTokenClassification,
        "qa": hf_lm.HfLmBertForQuestionAnswering,
    }[head]
    _save(folder, model_class(config), tok)


def _seq2seq_folder(folder: Path, family: str) -> None:
    import hf_lm
    from training.data.tokenizer import BART_SPECIAL_TOKENS, T5_SPECIAL_TOKENS, train_tokenizer

    specials = T5_SPECIAL_TOKENS if family == "t5" else BART_SPECIAL_TOKENS
    tok = train_tokenizer(PIPELINE_CORPUS, kind="byte_bpe", vocab_size=300, special_tokens=specials)
    ids = dict(
        vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.pad_token_id if family == "t5" else tok.eos_token_id,
    )  # fmt: skip
    if family == "rnn_seq2seq":
        config = hf_lm.HfLmRNNSeq2SeqConfig(hidden_size=32, embedding_size=32, cell_type="gru", **ids)
        model = hf_lm.HfLmRNNSeq2SeqForConditionalGeneration(config)
    else:
        config_class = hf_lm.HfLmT5Config if family == "t5" else hf_lm.HfLmBartConfig
        sizes = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
        config = config_class(**sizes, max_position_embeddings=128, **ids)
        model = (
            hf_lm.HfLmT5ForConditionalGeneration if family == "t5" else hf_lm.HfLmBartForConditionalGeneration
        )(config)
    _save(folder, model, tok)


GREEDY = dict(max_new_tokens=6, do_sample=False)
PIPELINE_CASES: dict[str, PipelineCase] = {
    "gpt_text_generation": PipelineCase(
        "text-generation", _gpt_folder, ["The cat", "Alice lives in"], GREEDY
    ),
    "gpt_feature_extraction": PipelineCase(
        "feature-extraction", lambda f: _gpt_folder(f, "base"), "The cat sat.", {"return_tensors": True}
    ),
    "bert_fill_mask": PipelineCase(
        "fill-mask", lambda f: _bert_folder(f, "mlm"), "The cat sat on the [MASK].", {"top_k": 3}
    ),
    "bert_text_classification": PipelineCase(
        "text-classification",
        lambda f: _bert_folder(f, "sequence"),
        ["A dog ran.", "The cat sat on the mat."],
    ),
    "bert_token_classification": PipelineCase(
        "token-classification", lambda f: _bert_folder(f, "token"), "Alice lives in Paris."
    ),
    "bert_question_answering": PipelineCase(
        "hflm-question-answering",
        lambda f: _bert_folder(f, "qa"),
        {"question": "Where is the treasure?", "context": "The treasure is hidden in the golden harbor."},
    ),
    "t5_text2text": PipelineCase(
        "hflm-text2text-generation",
        lambda f: _seq2seq_folder(f, "t5"),
        ["The cat sat.", "A dog ran."],
        GREEDY,
    ),
    "t5_translation": PipelineCase(
        "hflm-translation_en_to_de",
        lambda f: _seq2seq_folder(f, "t5"),
        "The cat sat.",
        {**GREEDY, "num_beams": 2},
    ),
    "bart_summarization": PipelineCase(
        "hflm-summarization",
        lambda f: _seq2seq_folder(f, "bart"),
        "Ships wait in the harbor at night.",
        GREEDY,
    ),
    "rnn_seq2seq_text2text": PipelineCase(
        "hflm-text2text-generation", lambda f: _seq2seq_folder(f, "rnn_seq2seq"), "The cat sat.", GREEDY
    ),
}


def _plain(output):
    """A pipeline's output with tensors as nested lists, for comparison."""
    if isinstance(output, torch.Tensor):
        return output.detach().cpu().float().tolist()
    if isinstance(output, dict):
        return {k: _plain(v) for k, v in output.items()}
    if isinstance(output, (list, tuple)):
        return [_plain(v) for v in output]
    return output


def _is_float(x) -> bool:
    """A Python or NumPy float (pipelines return scores as np.float32, which is not a `float`)."""
    return isinstance(x, numbers.Real) and not isinstance(x, numbers.Integral)


def _close(a, b, tol: float = 1e-3) -> bool:
    """Equal structure and values, floats within `tol` (ids, labels and offsets exactly)."""
    if _is_float(a) and _is_float(b):
        return math.isclose(a, b, rel_tol=tol, abs_tol=tol)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], tol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y, tol) for x, y in zip(a, b))
    return a == b


def run_pipeline_case(
    name: str, workdir: Path, device: torch.device | str, dtype: torch.dtype = torch.float32
) -> str:
    """Run one pipeline on `device` and on the CPU (fp32); the outputs must agree (fp32) or exist (half)."""
    from transformers import pipeline

    import hf_lm  # noqa: F401  (registers hf_lm's pipeline tasks)

    case = PIPELINE_CASES[name]
    folder = workdir / f"pipeline_{name}"
    if not (folder / "config.json").is_file():
        case.build(folder)
    expected = _plain(pipeline(case.task, model=str(folder), device="cpu")(case.inputs, **case.kwargs))
    pipe = pipeline(case.task, model=str(folder), device=device, dtype=dtype)
    if pipe.model.device.type != torch.device(device).type:
        raise AssertionError(f"the pipeline's model is on {pipe.model.device}, not {device}")
    got = _plain(pipe(case.inputs, **case.kwargs))
    if dtype == torch.float32 and not _close(got, expected):
        raise AssertionError(
            f"output on {device} {str(got)[:120]} differs from the CPU's {str(expected)[:120]}"
        )
    if dtype != torch.float32 and type(got) is not type(expected):
        raise AssertionError(f"output of type {type(got).__name__}, expected {type(expected).__name__}")
    return f"{case.task}: {str(got)[:60]}"


# ----------------------------------------------------------------------------------------------
# Tools: the fine-tuning scripts (Trainer), the perplexity CLI and the demo
# ----------------------------------------------------------------------------------------------

_WORDS = (
    "dog cat man woman child ball tree house water street red blue green big small runs jumps sits".split()
)
_SENTIMENT = {"good": 1, "great": 1, "fine": 1, "bad": 0, "awful": 0, "dull": 0}
FINETUNE_CASES = (
    "classification",
    "translation_transformer",
    "translation_t5",
    "translation_bart",
    "translation_rnn",
)


def write_toy_data(folder: Path) -> None:
    """A sentiment task (`{train,dev,test}.tsv`) and a copy "translation" task (`{train,val,test}.{xx,yy}`)."""
    import random

    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    for stem, n in (("train", 48), ("dev", 16), ("test", 16)):
        rows = ["sentence\tlabel"]
        for _ in range(n):
            word = rng.choice(sorted(_SENTIMENT))
            rows.append(" ".join([*rng.choices(_WORDS, k=rng.randint(2, 6)), word]) + f"\t{_SENTIMENT[word]}")
        (folder / f"{stem}.tsv").write_text("\n".join(rows) + "\n")
    for stem, n in (("train", 32), ("val", 6), ("test", 8)):
        lines = "\n".join(" ".join(rng.choices(_WORDS, k=rng.randint(3, 8))) for _ in range(n)) + "\n"
        (folder / f"{stem}.xx").write_text(lines)
        (folder / f"{stem}.yy").write_text(lines)


def finetune_argv(case: str, data: Path, output_dir: Path, precision: str = "no") -> list[str]:
    """Tiny from-scratch flags of `training.finetune_classification` or `training.finetune_translation`."""
    common = [
        "--from_scratch", "--hidden_size", "16", "--num_hidden_layers", "1", "--max_steps", "3",
        "--per_device_train_batch_size", "8", "--save_strategy", "no", "--disable_tqdm", "true", "--seed", "0",
        "--output_dir", str(output_dir), "--data_dir", str(data), "--report_to", "none",
    ]  # fmt: skip
    common += {"no": [], "bf16": ["--bf16", "true"], "fp16": ["--fp16", "true"]}[precision]
    if case == "classification":
        return common + [
            "--vocab_size", "80", "--num_attention_heads", "2", "--max_seq_length", "16", "--eval_strategy", "epoch",
        ]  # fmt: skip
    family = case.removeprefix("translation_")
    family_flags = (
        ["--family", "rnn_seq2seq", "--cell_type", "gru"] if family == "rnn" else ["--family", family]
    )
    return common + [
        "--source_lang", "xx", "--target_lang", "yy", *family_flags, "--vocab_size", "300",
        "--eval_strategy", "steps", "--eval_steps", "2", "--generation_max_length", "12",
        "--generation_num_beams", "2",
    ]  # fmt: skip


def run_finetune_case(case: str, workdir: Path, precision: str = "no", extra: tuple[str, ...] = ()) -> str:
    """Fine-tune (from scratch, 3 steps) and evaluate with the Trainer script of `case`."""
    from training import finetune_classification, finetune_translation

    data = workdir / "toy_data"
    if not (data / "train.tsv").is_file():
        write_toy_data(data)
    script = finetune_classification if case == "classification" else finetune_translation
    argv = finetune_argv(case, data, workdir / f"finetune_{case}_{precision}", precision) + list(extra)
    metrics = script.finetune(*script.parse_args(argv))
    if metrics["train_steps"] != 3:
        raise AssertionError(f"trained {metrics['train_steps']} steps, expected 3")
    key = "test_accuracy" if case == "classification" else "test_bleu"
    if not 0 <= metrics[key] <= (1 if case == "classification" else 100):
        raise AssertionError(f"{key} = {metrics[key]}")
    return f"{key} {metrics[key]:.3f}"


def run_evaluate_cli(workdir: Path, device: str, precision: str) -> str:
    """`training.evaluate_cli` on a model trained by the loop (trained first if needed)."""
    from training import evaluate_cli, train

    model = workdir / "loop_gpt_no" / "final"
    if not (model / "config.json").is_file():
        train.main(loop_argv("gpt", model.parent))
    text = workdir / "eval.txt"
    text.write_text(" ".join(PIPELINE_CORPUS))
    dtype = {"no": "float32", "bf16": "bfloat16", "fp16": "float16"}[precision]
    argv = [
        "--model",
        str(model),
        "--text_file",
        str(text),
        "--device",
        device,
        "--dtype",
        dtype,
        "--batch_size",
        "2",
    ]
    result = evaluate_cli.main(argv)
    if not math.isfinite(result["perplexity"]) or result["n_tokens"] < 1:
        raise AssertionError(f"perplexity {result['perplexity']} over {result['n_tokens']} tokens")
    return f"perplexity {result['perplexity']:.2f} over {result['n_tokens']} tokens"


def run_demo(workdir: Path, precision: str) -> str:
    """`make demo` at tiny size: train, bits per word against the floor, samples."""
    from training import demo

    argv = [
        "--output_dir", str(workdir / f"demo_{precision}"), "--model_size", "tiny", "--max_steps", "20",
        "--max_documents", "200", "--vocab_size", "300", "--eval_every", "10", "--eval_words", "500",
        "--num_samples", "1", "--mixed_precision", precision,
    ]  # fmt: skip
    result = demo.run_demo(argv)
    bits = result["metrics"]["bits_per_word"]
    if not math.isfinite(bits) or not result["samples"][0]:
        raise AssertionError(f"bits per word {bits}, sample {result['samples']!r}")
    return f"{bits:.3f} bits/word; sample {result['samples'][0][:40]!r}"


# ----------------------------------------------------------------------------------------------
# Leaderboards and the ablation runner, at smoke size, each in a process of its own
# ----------------------------------------------------------------------------------------------

SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
# case name -> the arguments of `python -m benchmarks.leaderboard`
LEADERBOARDS = {
    "leaderboard_lm": ["lm", "--smoke", "--data", "{data}/tinyshakespeare/input.txt"],
    "leaderboard_translation": ["translation", "--smoke", "--data", "{data}/multi30k"],
    "leaderboard_sst2": ["sst2", "--smoke", "--data", "{data}/sst2"],
    "ablations": ["ablations", "--smoke", "--data", "{data}/tinyshakespeare/input.txt"],
}


def run_leaderboard(name: str, workdir: Path, data_dir: Path = SHARED_DATA) -> str:
    """One leaderboard's smoke run (fp32: the leaderboards set their own precision)."""
    if not data_dir.is_dir():
        raise FileNotFoundError(f"{data_dir} (the shared data) is missing")
    output_dir = workdir / name
    command = [
        sys.executable,
        "-m",
        "benchmarks.leaderboard",  # run from the repository root (`_run`)
        *(a.format(data=data_dir) for a in LEADERBOARDS[name]),
        "--output_dir",
        str(output_dir),
    ]
    _run(command, workdir / f"{name}.log")
    written = sorted(p.name for p in output_dir.iterdir()) if output_dir.is_dir() else []
    if not any(p.endswith(".md") for p in written):
        raise AssertionError(f"no markdown table in {output_dir}: {written}")
    return f"wrote {', '.join(written[:4])}"


def _run(command: list[str], log: Path) -> None:
    """Run a command from the repository root; its output goes to `log`; raise with its tail if it fails."""
    with open(log, "w") as f:
        done = subprocess.run(command, cwd=REPO_ROOT, stdout=f, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise RuntimeError(f"exit status {done.returncode}: " + " | ".join(tail))


def sweep_ids() -> set[str]:
    """Every case of the sweep in every precision it runs in, as `group/check/precision`: what
    `pytest -m cuda` must collect (`tests/test_cuda.py` builds its parameters on its own)."""
    from hf_lm.testing import FAMILY_CASES, STATIC_CACHE_CASES, VARIANT_CASES

    every, fp32 = ("fp32", "bf16", "fp16"), ("fp32",)
    names = [("loop", case, every) for case in [*LOOP_CASES, "ddp_2_processes"]]
    names += [("families", case.name, every) for case in FAMILY_CASES + VARIANT_CASES]
    names += [("families", f"{case.name}/compiled_static", fp32) for case in STATIC_CACHE_CASES]
    names += [("families", "vocab_projection", every)]
    names += [("pipelines", name, every) for name in PIPELINE_CASES]
    names += [("tools", f"finetune_{case}", every) for case in FINETUNE_CASES]
    names += [("tools", "evaluate_cli", every), ("tools", "demo", every)]
    names += [("leaderboards", name, fp32) for name in LEADERBOARDS]
    return {f"{group}/{name}/{p}" for group, name, precisions in names for p in precisions}
