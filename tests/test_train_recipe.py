"""nanoGPT's recipe as options of the one training loop: random windows, the best checkpoint,
torch.compile, fused AdamW and TF32 selection, nanoGPT's character split, the ready configurations."""

import functools
import json
import math
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from accelerate.state import AcceleratorState, GradientState
from conftest import AS_MAIN_REPORTING_THE_GROUP, TORCHRUN_2
from datasets import Dataset
from safetensors.torch import load_file
from test_train import TINY as TRAIN_TINY
from test_train import _argv as train_argv
from test_train import _run as train_run
from test_train import assert_document_inputs, spy_on_model_inputs

import training.objectives.evaluation
import training.train as T
from training.args import parse_args
from training.data.batches import BatchPlan, DataPosition, RandomWindows, window_document_columns
from training.data.packing import tokenize_and_pack
from training.data.splits import tail_split
from training.data.tokenizer import train_tokenizer
from training.run.optimizer import build_optimizer, configure_tf32, optimizer_kwargs
from training.state.folders import list_checkpoints
from training.train import train

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIGS = REPO_ROOT / "training" / "configs"
SHAKESPEARE = REPO_ROOT.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"

# the tiny run of tests/test_train.py, evaluating and saving every 2 steps
TINY = {**TRAIN_TINY, "eval_every": 2, "eval_batches": 2, "save_every": 2, "report_to": ["none"]}
_argv = functools.partial(train_argv, settings=TINY)
_run = functools.partial(train_run, settings=TINY)


def _reset() -> None:
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    """Accelerate keeps process-wide singletons; each in-process run starts from a clean state."""
    yield
    _reset()


class Crash(Exception):
    """Stands for a killed process: raised right after a given checkpoint is written."""


def _crash_after_checkpoint(monkeypatch, at_step: int) -> None:
    save = T.save_checkpoint

    def save_then_crash(directory, *args, **kwargs):
        path = save(directory, *args, **kwargs)
        if Path(directory).name == "checkpoints" and kwargs["step"] == at_step:
            raise Crash
        return path

    monkeypatch.setattr(T, "save_checkpoint", save_then_crash)


def _weights(folder) -> dict[str, torch.Tensor]:
    return load_file(Path(folder) / "model.safetensors")


TIED = ("model.embed_tokens.weight", "lm_head.weight")  # one tensor, stored under either name


def _assert_same(a: dict, b: dict) -> None:
    """The same weights, bit for bit; a checkpoint stores the tied embedding under one of its names
    and `save_pretrained` under the other."""
    a, b = (
        {TIED[0]: w.get(TIED[0], w.get(TIED[1])), **{k: v for k, v in w.items() if k not in TIED}}
        for w in (a, b)
    )
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


# ----------------------------------------------------------------------------------------------
# Random windows
# ----------------------------------------------------------------------------------------------


def _updates(windows: RandomWindows, n_updates: int) -> list[list[torch.Tensor]]:
    stream = iter(windows)
    return [[next(stream) for _ in range(windows.accum)] for _ in range(n_updates)]


def test_random_windows_are_nanogpt_windows_and_a_pure_function_of_the_step():
    tokens = torch.arange(1000)  # token i is i: a window shows its offset
    windows = RandomWindows(tokens, block_size=16, per_device=4, world=1, rank=0, accum=2, seed=7)
    updates = _updates(windows, 5)
    for micro_batches in updates:
        for batch in micro_batches:
            assert list(batch) == ["input_ids", "shift_labels"]  # model inputs with their targets
            x, y = batch["input_ids"], batch["shift_labels"]
            assert x.shape == y.shape == (4, 16)
            # x = data[i : i + T], y = data[i + 1 : i + 1 + T], inside the stream
            assert torch.equal(x, x[:, :1] + torch.arange(16)) and torch.equal(y, x + 1)
            assert int(x[:, 0].min()) >= 0 and int(y[:, -1].max()) <= 999
    starts = torch.cat([b["input_ids"][:, 0] for u in updates for b in u])
    assert len(set(starts.tolist())) > 30  # fresh offsets every micro-batch and update

    # update 3 of a run resumed at step 3 is update 3 of the uninterrupted run, whatever ran before
    torch.manual_seed(123)
    np.random.seed(123)
    resumed = RandomWindows(tokens, block_size=16, per_device=4, world=1, rank=0, accum=2, seed=7)
    resumed.set_position(3)
    for a, b in zip(_updates(resumed, 2), updates[3:5], strict=True):
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x["input_ids"], y["input_ids"])
    other_seed = RandomWindows(tokens, block_size=16, per_device=4, world=1, rank=0, accum=2, seed=8)
    assert not torch.equal(_updates(other_seed, 1)[0][0]["input_ids"], updates[0][0]["input_ids"])


def test_random_windows_same_global_batch_for_any_split():
    """The union of all ranks' micro-batches of an update does not depend on processes x accumulation."""
    tokens = torch.arange(5000)

    def union(per_device, world, accum, n_updates=4):
        ranks = [iter(RandomWindows(tokens, 8, per_device, world, r, accum, seed=3)) for r in range(world)]
        return [
            sorted(int(s) for _ in range(accum) for it in ranks for s in next(it)["input_ids"][:, 0])
            for _ in range(n_updates)
        ]

    reference = union(8, 1, 1)
    assert union(4, 2, 1) == reference == union(2, 2, 2) == union(1, 1, 8)


def test_window_document_columns_equal_the_packed_blocks_columns():
    """With document_mask, a window that is a packed block gets that block's document and position ids."""
    docs = [f"doc {i} " + "abc" * (i % 7 + 1) for i in range(40)]
    tokenizer = train_tokenizer(docs, kind="char", vocab_size=100, model_max_length=16)
    blocks = tokenize_and_pack(Dataset.from_dict({"text": docs}), tokenizer, 16, document_mask=True)
    ids = torch.tensor(blocks["input_ids"])  # (N, 16)
    columns = window_document_columns(ids, tokenizer.eos_token_id)
    assert torch.equal(columns["document_ids"], torch.tensor(blocks["document_ids"]))
    assert torch.equal(columns["position_ids"], torch.tensor(blocks["position_ids"]))
    assert int(columns["document_ids"].max()) >= 1  # the corpus has blocks spanning documents


def test_random_windows_resume_exactly(tmp_path, monkeypatch):
    """A run with random windows and dropout, interrupted after its checkpoint of step 4 and resumed,
    ends with the uninterrupted run's weights, bit for bit."""
    run = dict(
        sampling="random_windows",
        max_steps=8,
        save_every=4,
        eval_every=4,
        hidden_dropout=0.1,
        attention_dropout=0.1,
    )
    _run(tmp_path / "a", **run)
    _reset()
    _crash_after_checkpoint(monkeypatch, at_step=4)
    with pytest.raises(Crash):
        _run(tmp_path / "b", **run)
    monkeypatch.undo()
    _reset()
    torch.manual_seed(999)  # the resumed run must not depend on the global RNG it finds
    metrics = _run(tmp_path / "b", resume="true", **run)
    assert metrics["step"] == 8
    _assert_same(_weights(tmp_path / "a" / "final"), _weights(tmp_path / "b" / "final"))

    # and the windows are not the blocks: the same run with sampling=blocks trains other weights
    _reset()
    _run(tmp_path / "blocks", **{**run, "sampling": "blocks"})
    a, blocks = _weights(tmp_path / "a" / "final"), _weights(tmp_path / "blocks" / "final")
    assert any(not torch.equal(a[k], blocks[k]) for k in a)


@pytest.mark.slow
def test_two_process_random_windows_match_one_process(tmp_path):
    """2 gloo processes x b windows follow the trajectory of 1 process x 2b: the same windows per update.

    The launch also reports to tensorboard, and each process must end its process group and exit 0:
    ending the tracker must not take the group from the last barrier, and a live group at exit can
    abort a finished run."""
    script = tmp_path / "as_main.py"
    script.write_text(AS_MAIN_REPORTING_THE_GROUP)
    cmd = list(TORCHRUN_2)
    run = dict(max_steps=6, eval_every=6, save_every=6, sampling="random_windows")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    ddp_argv = _argv(tmp_path / "ddp", per_device_batch_size=4, report_to=["tensorboard"], **run)
    result = subprocess.run(
        [*cmd, str(script), "training.train", *ddp_argv],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("process group at exit: ended") == 2, result.stderr[-3000:]
    assert any((tmp_path / "ddp" / "tensorboard").rglob("events.out.tfevents.*"))
    single = _run(tmp_path / "one", per_device_batch_size=8, **run)
    ddp = json.loads((tmp_path / "ddp" / "final_metrics.json").read_text())
    assert ddp["world_size"] == 2 and ddp["global_batch_size"] == single["global_batch_size"] == 8
    x, y = _weights(tmp_path / "ddp" / "final"), _weights(tmp_path / "one" / "final")
    for name in x:
        torch.testing.assert_close(x[name], y[name], atol=1e-5, rtol=0, msg=name)


def test_random_windows_train_with_document_mask(tmp_path, monkeypatch):
    calls = spy_on_model_inputs(monkeypatch)
    metrics = _run(tmp_path / "run", sampling="random_windows", document_mask=True, max_steps=4)
    assert math.isfinite(metrics["eval_loss"])
    assert_document_inputs(calls)  # each window's own document ids and positions reach the model
    assert "random windows" in (tmp_path / "run" / "final" / "README.md").read_text()


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"objective": "mlm"}, "sampling"),
        ({"arch": "rnn", "tbptt": True}, "sampling"),
        ({"arch": "rnn", "scheduled_sampling": "linear"}, "sampling"),
        ({"sampling": "windows"}, "sampling"),
    ],
)
def test_random_windows_refused_where_they_cannot_apply(tmp_path, overrides, field):
    with pytest.raises(ValueError, match=f"`{field}`"):
        parse_args(_argv(tmp_path / "x", **{"sampling": "random_windows", **overrides}))


@pytest.mark.parametrize("overrides", [{"streaming": True}, {"arch": "ngram"}], ids=["streaming", "ngram"])
def test_random_windows_refused_with_streaming_and_ngram(tmp_path, overrides):
    with pytest.raises(ValueError, match="random_windows"):
        _run(tmp_path / "x", sampling="random_windows", max_steps=2, **overrides)


@pytest.mark.parametrize(
    "overrides, source",
    [({}, "blocks"), ({"sampling": "random_windows"}, "windows"), ({"streaming": True}, "stream")],
)
def test_the_batch_plan_is_the_one_reader_of_the_batch_flags(tmp_path, overrides, source):
    """`BatchPlan.from_args` decides the source once; the loop asks it whether the batches come labelled
    (random windows carry `shift_labels`, so the objective does not label them), the checkpoint for its
    data order, the card for its sampling."""
    data_args, _, train_args = parse_args(
        _argv(tmp_path / "x", per_device_batch_size=3, gradient_accumulation_steps=2, **overrides)
    )
    plan = BatchPlan.from_args(data_args, train_args, world=2, rank=1)
    assert (plan.source, plan.global_batch, plan.labelled) == (source, 12, source == "windows")
    order = plan.data_order()
    assert order["sampling"] == train_args.sampling and order["streaming"] == data_args.streaming
    assert order["shuffle_buffer_size"] == (data_args.shuffle_buffer_size if source == "stream" else None)
    assert ("random windows" in plan.describe()) == (source == "windows")
    blocks = {"input_ids": torch.arange(40 * 8).reshape(40, 8)}
    if source != "stream":  # the first micro-batch of rank 1: windows with their targets, or bare blocks
        batch = next(plan.batches(blocks, DataPosition())[0])
        assert sorted(batch) == (["input_ids", "shift_labels"] if plan.labelled else ["input_ids"])
        assert batch["input_ids"].shape == (3, data_args.block_size if plan.labelled else 8)


def test_resume_refuses_another_sampling(tmp_path):
    _run(tmp_path / "run", max_steps=2)
    _reset()
    with pytest.raises(ValueError, match="sampling: 'blocks' -> 'random_windows'"):
        _run(tmp_path / "run", max_steps=4, resume="true", sampling="random_windows")


# ----------------------------------------------------------------------------------------------
# The best checkpoint
# ----------------------------------------------------------------------------------------------


def _scripted_evaluate(monkeypatch, losses: list[float], calls: dict) -> None:
    """`evaluate` returns the next scripted loss (evaluation k of the run gets losses[k])."""

    def scripted(model, blocks, accelerator, batch_size, max_batches=None):
        loss = losses[calls["n"]]
        calls["n"] += 1
        if isinstance(loss, Exception):
            raise loss
        return loss, math.exp(loss)

    monkeypatch.setattr(training.objectives.evaluation, "evaluate", scripted)


BEST = dict(max_steps=10, eval_every=2, save_every=2, load_best_model_at_end=True)


def test_best_model_is_final_and_survives_pruning(tmp_path, monkeypatch):
    """The best evaluation (step 4 of evaluations at 2, 4, ..., 10) is final/, keep_last=1 deleting its
    checkpoint does not lose it, and final_metrics.json and the card report the best and the last."""
    losses = [5.0, 3.0, 4.0, 6.0, 7.0]
    _scripted_evaluate(monkeypatch, losses, {"n": 0})
    _run(tmp_path / "all", keep_last=100, **BEST)  # every checkpoint kept: the reference weights
    step4 = _weights(tmp_path / "all" / "checkpoints" / "checkpoint-00000004")
    _assert_same(_weights(tmp_path / "all" / "final"), step4)

    _reset()
    _scripted_evaluate(monkeypatch, losses, {"n": 0})
    out = tmp_path / "pruned"
    metrics = _run(out, keep_last=1, **BEST)
    assert [s for s, _ in list_checkpoints(out / "checkpoints")] == [10]
    assert [s for s, _ in list_checkpoints(out / "best")] == [4]
    _assert_same(_weights(out / "final"), step4)
    assert (
        metrics["eval_loss"] == 3.0 and metrics["best"]["step"] == 4 and metrics["best"]["eval_loss"] == 3.0
    )
    assert metrics["last"] == {"step": 10, **{k: v for k, v in metrics["last"].items() if k != "step"}}
    assert metrics["last"]["eval_loss"] == 7.0 and metrics["step"] == 10
    assert json.loads((out / "final_metrics.json").read_text())["best"]["step"] == 4
    card = (out / "final" / "README.md").read_text()
    assert "at step 4 of 10" in card and "last evaluation (step 10)" in card


def test_best_model_survives_resume_and_ignores_the_lost_future(tmp_path, monkeypatch):
    """Checkpoint 6 records the best of step 4; the interrupted run then found a better model at step 8
    and died. The resumed run replays steps 7..10, whose evaluations decide again (here worse than
    step 4, as a nondeterministic GPU replay may): final/ is step 4's model, and step 8's is gone."""
    calls = {"n": 0}
    _scripted_evaluate(monkeypatch, [5.0, 3.0, 4.0, 2.0, Crash()], calls)  # evaluations at 2, 4, 6, 8, 10
    out = tmp_path / "run"
    run = {**BEST, "save_every": 6, "keep_last": 1}
    with pytest.raises(Crash):
        _run(out, **run)
    assert [s for s, _ in list_checkpoints(out / "best")] == [4, 8]  # 4: checkpoint 6 needs it
    step4 = _weights(out / "best" / "checkpoint-00000004")

    _reset()
    calls["n"] = 0
    _scripted_evaluate(monkeypatch, [4.5, 6.0], calls)  # the replayed evaluations at 8 and 10
    metrics = _run(out, resume="true", **run)
    assert calls["n"] == 2 and metrics["step"] == 10
    assert [s for s, _ in list_checkpoints(out / "best")] == [4]
    assert metrics["best"]["step"] == 4 and metrics["last"]["eval_loss"] == 6.0
    _assert_same(_weights(out / "final"), step4)


def test_best_model_metric_validation(tmp_path):
    _, _, args = parse_args(_argv(tmp_path / "x", metric_for_best_model="bits_per_character"))
    assert args.metric_for_best_model == "eval_bits_per_character" and args.greater_is_better is False
    _, _, args = parse_args(_argv(tmp_path / "x", objective="mlm", metric_for_best_model="mlm_accuracy"))
    assert args.greater_is_better is True
    with pytest.raises(ValueError, match="`metric_for_best_model`"):
        parse_args(_argv(tmp_path / "x", metric_for_best_model="eval_mlm_accuracy"))  # not a clm metric


# ----------------------------------------------------------------------------------------------
# torch.compile, fused AdamW, TF32
# ----------------------------------------------------------------------------------------------


def test_compiled_training_saves_clean_weights(tmp_path, monkeypatch):
    """torch.compile (aot_eager: dynamo's graph capture and AOT autograd without inductor's code
    generation, so it compiles in seconds) trains like eager and saves the plain model's names.
    Evaluation runs the plain model: compiling its few forwards cost more than it saved."""
    from training.objectives import CausalLM

    evaluated = []
    plain_evaluate = CausalLM.evaluate

    def spy(self, model, *args):
        evaluated.append(type(model).__name__)
        return plain_evaluate(self, model, *args)

    monkeypatch.setattr(CausalLM, "evaluate", spy)
    run = dict(max_steps=4, save_every=4, eval_every=4, sampling="random_windows")
    compiled = _run(tmp_path / "compiled", torch_compile=True, torch_compile_backend="aot_eager", **run)
    assert evaluated and "OptimizedModule" not in evaluated, evaluated
    _reset()
    eager = _run(tmp_path / "eager", **run)
    for folder in ("final", "checkpoints/checkpoint-00000004"):
        a, b = _weights(tmp_path / "compiled" / folder), _weights(tmp_path / "eager" / folder)
        assert a.keys() == b.keys() and not any("_orig_mod" in k for k in a), folder
        for name in a:
            torch.testing.assert_close(a[name], b[name], atol=1e-5, rtol=0, msg=name)
    assert compiled["eval_loss"] == pytest.approx(eager["eval_loss"], abs=1e-5)
    assert (
        "| torch.compile | aot_eager, mode default |"
        in (tmp_path / "compiled" / "final" / "README.md").read_text()
    )


def test_random_window_targets_are_scored_inside_the_compiled_forward():
    """Random windows hand their targets to the model as `shift_labels`, so the cross-entropy is part
    of the forward that `--torch_compile` compiles (one graph, no break) instead of running eagerly
    on the (B, T, V) logits after it, a cost at a 50k vocabulary."""
    from hf_lm import HfLmGPTConfig, HfLmGPTForCausalLM
    from hf_lm.models.hflm_losses import (
        lm_loss,
    )

    config = HfLmGPTConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=16
    )
    model = HfLmGPTForCausalLM(config).train()
    x, y = torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16))
    seen = {}

    def spy(**kwargs):
        seen.update(kwargs)
        return model(**kwargs)

    out = T.forward_loss(spy, {"input_ids": x, "shift_labels": y}, {})
    assert torch.equal(seen["shift_labels"], y) and "labels" not in seen
    torch.testing.assert_close(out.loss, lm_loss(out.logits, y, shift=False))
    explained = torch._dynamo.explain(model)(input_ids=x, shift_labels=y)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    targets = [str(n.target) for g in explained.graphs for n in g.graph.nodes if n.op == "call_function"]
    assert any("cross_entropy" in t for t in targets)


@pytest.mark.slow
def test_inductor_compiled_training_saves_clean_weights(tmp_path):
    """The default backend, inductor (C++ code generation on CPU: slow to compile)."""
    metrics = _run(tmp_path / "run", max_steps=2, save_every=2, eval_every=2, torch_compile=True)
    assert math.isfinite(metrics["eval_loss"])
    weights = _weights(tmp_path / "run" / "final")
    assert weights and not any("_orig_mod" in k for k in weights)


def test_optimizer_and_tf32_selection():
    cuda, cpu = torch.device("cuda:0"), torch.device("cpu")
    assert optimizer_kwargs([cuda, torch.device("cuda:1")]) == {"fused": True}
    assert (
        optimizer_kwargs([cpu]) == {} and optimizer_kwargs([cuda, cpu]) == {} and optimizer_kwargs([]) == {}
    )
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        assert configure_tf32(True, cpu) is False and torch.backends.cuda.matmul.allow_tf32 is False
        assert configure_tf32(False, cuda) is False and torch.backends.cuda.matmul.allow_tf32 is False
        assert configure_tf32(True, cuda) is True and torch.backends.cuda.matmul.allow_tf32 is True
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_a_run_gives_back_the_tf32_setting_it_found(tmp_path, monkeypatch):
    """`--tf32` turns TF32 on for the process (on CUDA, here made to act as on CUDA); once `train`
    returns, the caller's float32 matmuls are exact again. Left on, it made every fp32 check that
    followed a loop run in gpu-check fail on an H100."""
    import training.run.setup

    def as_on_cuda(enabled, device):
        return configure_tf32(enabled, torch.device("cuda"))

    monkeypatch.setattr(training.run.setup, "configure_tf32", as_on_cuda)
    saved = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    try:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.allow_tf32 = False
        metrics = _run(tmp_path / "run", max_steps=2)
        card = (tmp_path / "run" / "final" / "README.md").read_text()
        assert re.search(r"TF32 matmuls\W+on", card), "the run did not turn TF32 on"
        assert math.isfinite(metrics["eval_loss"])
        assert torch.get_float32_matmul_precision() == "highest" and torch.backends.cudnn.allow_tf32 is False
    finally:
        torch.set_float32_matmul_precision(saved[0])
        torch.backends.cudnn.allow_tf32 = saved[1]


def test_cpu_run_records_its_choices_in_the_card(tmp_path):
    _run(tmp_path / "run", max_steps=2, min_lr_rate=0.1)
    card = (tmp_path / "run" / "final" / "README.md").read_text()
    for row in (
        "| fused AdamW | off |",
        "| TF32 matmuls | off |",
        "| torch.compile | off |",
        "cosine to 0.1 x peak",
    ):
        assert row in card, row


def test_min_lr_rate_ends_the_cosine_at_a_share_of_the_peak(tmp_path):
    _, _, args = parse_args(
        _argv(tmp_path / "x", max_steps=50, warmup_steps=5, learning_rate=1e-3, min_lr_rate=0.1)
    )
    optimizer, scheduler = build_optimizer(torch.nn.Linear(2, 2), args)
    rates = []
    for _ in range(50):
        optimizer.step()
        scheduler.step()
        rates.append(scheduler.get_last_lr()[0])
    assert rates[4] == pytest.approx(1e-3) and rates[-1] == pytest.approx(1e-4)
    assert all(a >= b for a, b in zip(rates[4:], rates[5:], strict=False))
    with pytest.raises(ValueError, match="`min_lr_rate`"):
        parse_args(_argv(tmp_path / "x", lr_scheduler="linear", min_lr_rate=0.1))


# ----------------------------------------------------------------------------------------------
# nanoGPT's split and the ready configurations
# ----------------------------------------------------------------------------------------------


def test_tail_split_holds_out_the_last_characters():
    docs = Dataset.from_dict({"text": ["a" * 40, "b" * 40, "c" * 20]})  # 100 characters
    split = tail_split(docs, 0.25)  # the last 25 characters: 5 of "b" and the 20 of "c"
    assert split["train"]["text"] == ["a" * 40, "b" * 35]
    assert split["eval"]["text"] == ["b" * 5, "c" * 20]
    split = tail_split(docs, 0.2)  # the cut falls between two documents: none is cut
    assert split["train"]["text"] == ["a" * 40, "b" * 40] and split["eval"]["text"] == ["c" * 20]
    with pytest.raises(ValueError, match="empty side"):
        tail_split(Dataset.from_dict({"text": ["ab"]}), 0.9)


@pytest.mark.parametrize(
    "overrides",
    [
        {"eval_split": "tail", "streaming": True},
        {"eval_split": "tail", "eval_dataset": "synthetic"},
        {"eval_split": "head"},
    ],
)
def test_tail_split_validation(tmp_path, overrides):
    with pytest.raises(ValueError, match="`eval_split`"):
        parse_args(_argv(tmp_path / "x", **overrides))


NANOGPT = {  # config/train_shakespeare_char.py and the README's CPU flags, each with its one documented change
    "shakespeare_char.yaml": dict(
        num_hidden_layers=6, num_attention_heads=6, hidden_size=384, block_size=256, per_device_batch_size=64,
        max_steps=2000, hidden_dropout=0.2, mixed_precision="bf16", torch_compile=True,
        position_embedding_type="learned",
    ),
    "shakespeare_char_cpu.yaml": dict(
        num_hidden_layers=4, num_attention_heads=4, hidden_size=128, block_size=64, per_device_batch_size=12,
        max_steps=2000, hidden_dropout=0.0, mixed_precision="no", torch_compile=False,
        position_embedding_type="rope",  # nanoGPT: learned; rotary positions reach its published 1.88
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(NANOGPT))
def test_configs_parse_and_hold_nanogpts_recipe(name):
    data, model, args = parse_args([str(CONFIGS / name)])
    values = {**vars(data), **vars(model), **vars(args)}
    for key, expected in NANOGPT[name].items():
        assert values[key] == expected, key
    common = dict(
        learning_rate=1e-3, min_lr_rate=0.1, warmup_steps=100, adam_beta2=0.99, weight_decay=0.1,
        max_grad_norm=1.0, eval_every=250, sampling="random_windows", load_best_model_at_end=True,
        eval_split="tail", eval_fraction=0.1, sample_by="document", tokenizer_kind="char",
        intermediate_size=4 * model.hidden_size, hidden_act="gelu",
    )  # fmt: skip
    for key, expected in common.items():
        assert values[key] == expected, key
    assert model.overrides() == {"attention_bias": False, "mlp_bias": False}
    assert (REPO_ROOT / data.dataset).resolve() == SHAKESPEARE.resolve()


@pytest.mark.skipif(not SHAKESPEARE.is_file(), reason="Tiny Shakespeare is not under ../shared/data")
def test_cpu_config_runs_on_nanogpts_split(tmp_path, monkeypatch):
    """The CPU configuration, a few steps of it: nanoGPT's split of input.txt (the first
    int(0.9 n) characters train) and nanoGPT's 65-character vocabulary (plus 3 special tokens)."""
    monkeypatch.chdir(REPO_ROOT)  # the configuration's data path is relative to the repository
    data, model, args = parse_args([str(CONFIGS / "shakespeare_char_cpu.yaml")])
    args.output_dir, args.max_steps, args.eval_batches, args.save_every = str(tmp_path / "run"), 3, 1, 3
    metrics = train(data, model, args)
    assert metrics["step"] == 3 and metrics["best"]["step"] == 3
    tokenizer = json.loads((tmp_path / "run" / "final" / "tokenizer.json").read_text())
    assert len(tokenizer["model"]["vocab"]) == 65 + 3  # <|endoftext|>, <|pad|> and <|unk|>
    text = SHAKESPEARE.read_text(encoding="utf-8")
    card = (tmp_path / "run" / "final" / "README.md").read_text()
    assert "the last 10.0% of the characters held out" in card
    n_train = int(len(text) * 0.9)
    assert f"{(n_train + 1) // 64:,} training" in card  # the training characters and EOS, in blocks of 64
