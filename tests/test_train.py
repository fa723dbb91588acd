"""The accelerate training loop: outputs, argument files, exact resume after SIGKILL, divergence, DDP."""

import csv
import functools
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from conftest import TORCHRUN_2
from safetensors.torch import load_file

from hf_lm import HfLmGPTForCausalLM
from training.args import DataArguments, ModelArguments, TrainArguments, as_flags, parse_args
from training.data.batches import GlobalBatchSampler
from training.run.log import projected_steps
from training.run.setup import seed_process_rngs
from training.state.divergence import TrainingDivergedError
from training.state.folders import latest_checkpoint, list_checkpoints
from training.train import train

REPO_ROOT = Path(__file__).resolve().parents[1]

# A tiny run: 200 synthetic documents (~50k tokens), a 300-token BPE, 2 layers of width 32.
TINY = {
    "dataset": "synthetic",
    "max_documents": 200,
    "vocab_size": 300,
    "block_size": 32,
    "num_hidden_layers": 2,
    "hidden_size": 32,
    "num_attention_heads": 4,
    "per_device_batch_size": 8,
    "learning_rate": 3e-3,
    "warmup_steps": 2,
    "eval_every": 10,
    "eval_batches": 4,
    "log_every": 2,
    "save_every": 10,
}


def _argv(output_dir, settings: dict = TINY, **overrides) -> list[str]:
    """The command-line flags of a run of `settings` (TINY, or another test file's variant of it)."""
    return as_flags({**settings, "output_dir": str(output_dir), **overrides})


def _run(output_dir, settings: dict = TINY, **overrides) -> dict:
    """`train()` in process, as the command line with these flags would run it."""
    return train(*parse_args(_argv(output_dir, settings, **overrides)))


def _env() -> dict:
    # one thread, as in this process (conftest), so the float results are bitwise comparable; the
    # repository on the path, for scripts that import `training` (installed as `hf_lm_training`)
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": path,
    }


def _weights(output_dir) -> dict[str, torch.Tensor]:
    return load_file(Path(output_dir) / "final" / "model.safetensors")


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    """Accelerate keeps process-wide singletons; each in-process run starts from a clean state."""
    yield
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def test_tiny_run_outputs_and_learns(tmp_path, drawn_figures):
    out = tmp_path / "run"
    metrics = _run(out, max_steps=20, report_to=["csv", "tensorboard"])
    final = out / "final"
    for name in ("model.safetensors", "config.json", "tokenizer.json", "README.md"):
        assert (final / name).is_file(), name
    assert (out / "loss.png").stat().st_size > 1000
    assert (out / "tensorboard").is_dir()
    assert metrics["world_size"] == 1 and metrics["step"] == 20
    assert math.isclose(metrics["eval_perplexity"], math.exp(metrics["eval_loss"]))
    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    losses = [float(r["loss"]) for r in rows if r["loss"]]
    assert len(losses) == 10
    assert losses[-1] < losses[0] - 0.5  # from ~ln(300) = 5.7 down
    # loss.png draws the logged curves (read back from the figure: any PNG has the same magic bytes)
    (curve_figure,) = drawn_figures
    lines = {line.get_label(): line for line in curve_figure.axes[0].get_lines()}
    assert list(lines["train"].get_xdata()) == [int(r["step"]) for r in rows if r["loss"]]
    assert list(lines["train"].get_ydata()) == pytest.approx(losses)
    evals = [r for r in rows if r.get("eval_loss")]
    assert list(lines["eval"].get_xdata()) == [int(r["step"]) for r in evals] == [10, 20]
    assert list(lines["eval"].get_ydata()) == pytest.approx([float(r["eval_loss"]) for r in evals])
    assert "held-out perplexity" in (final / "README.md").read_text()
    assert json.loads((out / "final_metrics.json").read_text())["step"] == 20

    # bits per token, and per character and word of the text the scored tokens spell
    assert metrics["eval_bits_per_token"] == pytest.approx(metrics["eval_loss"] / math.log(2))
    assert metrics["eval_bits_per_character"] < metrics["eval_bits_per_token"] < metrics["eval_bits_per_word"]
    assert float(rows[-1]["eval_bits_per_word"]) == pytest.approx(metrics["eval_bits_per_word"])
    assert "held-out bits per character" in (final / "README.md").read_text()

    model = HfLmGPTForCausalLM.from_pretrained(final)
    assert model.config.num_hidden_layers == 2 and model.config.vocab_size == 300


def test_parse_args_files_match_flags(tmp_path):
    values = {
        **TINY,
        "output_dir": str(tmp_path / "x"),
        "report_to": ["csv", "none"],
        "resume": "auto",
        "config_overrides": '{"norm_type": "rmsnorm"}',
        "streaming": True,
    }
    from_flags = parse_args(_argv(tmp_path / "x", **{k: v for k, v in values.items() if k != "output_dir"}))
    (tmp_path / "a.json").write_text(json.dumps(values))
    yaml = "\n".join(f"{k}: {json.dumps(v)}" for k, v in values.items())  # JSON values are YAML
    (tmp_path / "a.yaml").write_text(yaml)
    assert parse_args([str(tmp_path / "a.json")]) == from_flags
    assert parse_args([str(tmp_path / "a.yaml")]) == from_flags
    # a file then flags: the flags override the file's values, the rest stays the file's
    for name in ("a.json", "a.yaml"):
        data, model, args = parse_args(
            [str(tmp_path / name), "--learning_rate", "0.5", "--report_to", "none"]
        )
        assert args.learning_rate == 0.5 and args.report_to == ["none"]
        assert model.overrides() == {"norm_type": "rmsnorm"} and data.streaming is True
        assert (data, model) == from_flags[:2] and args.resume == "auto"
    with pytest.raises(ValueError, match="first argument"):
        parse_args(["run.txt", "--learning_rate", "0.5"])
    data, model, args = from_flags
    assert (
        isinstance(data, DataArguments)
        and isinstance(model, ModelArguments)
        and isinstance(args, TrainArguments)
    )
    assert (
        args.report_to == ["csv", "none"]
        and args.trackers == ["csv"]
        and model.overrides() == {"norm_type": "rmsnorm"}
    )
    # `--resume` alone means "true"
    assert parse_args(["--resume"])[2].resume == "true"


@pytest.mark.parametrize(
    "flags, field",
    [
        (["--lr_scheduler", "step"], "lr_scheduler"),
        (["--block_size", "0"], "block_size"),
        (["--eval_fraction", "1.5"], "eval_fraction"),
        (["--report_to", "wandb"], "report_to"),
        (["--config_overrides", "[1]"], "config_overrides"),
        (["--resume", "maybe"], "resume"),
        # an infinite rate passes `> 0` and trains NaN weights; every float must be finite
        (["--learning_rate", "inf"], "learning_rate"),
        (["--learning_rate", "nan"], "learning_rate"),
        (["--max_grad_norm", "inf"], "max_grad_norm"),
        (["--weight_decay=-inf"], "weight_decay"),
        (["--max_train_seconds", "inf"], "max_train_seconds"),
        (["--rollback_on_divergence", "--spike_threshold", "0.5"], "spike_threshold"),
        (["--spike_threshold", "2"], "spike_threshold"),  # without rollback_on_divergence
        (["--rollback_on_divergence", "--rollback_skip_batches", "-1"], "rollback_skip_batches"),
        (["--rollback_on_divergence", "--max_rollbacks", "0"], "max_rollbacks"),
        (["--max_eval_blocks", "0"], "max_eval_blocks"),  # optional, but positive when given
        (["--eval_batches", "0"], "eval_batches"),
        (["--keep_last", "0"], "keep_last"),
    ],
)
def test_parse_args_validates(flags, field):
    with pytest.raises(ValueError, match=f"`{field}`"):
        parse_args(flags)


def test_sampler_same_global_batch_for_any_split():
    """The union of all ranks' micro-batches of an update does not depend on processes x accumulation."""

    def updates(per_device, world, accum, n_updates=5):
        streams = [iter(GlobalBatchSampler(50, per_device, world, r, accum, seed=3)) for r in range(world)]
        return [sorted(i for _ in range(accum) for s in streams for i in next(s)) for _ in range(n_updates)]

    reference = updates(8, 1, 1)
    assert updates(4, 2, 1) == reference == updates(2, 2, 2) == updates(1, 1, 8)
    sampler = GlobalBatchSampler(50, 8, 1, 0, 1, seed=3)
    sampler.set_position(1, 2)  # 6 updates per epoch: update 2 of epoch 1 is update 8 overall
    full = iter(GlobalBatchSampler(50, 8, 1, 0, 1, seed=3))
    assert [next(full) for _ in range(9)][8] == next(iter(sampler))


def test_gradient_accumulation_matches_big_batch(tmp_path):
    big = _run(tmp_path / "big", max_steps=6, report_to=["none"])
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    small = _run(
        tmp_path / "acc",
        max_steps=6,
        report_to=["none"],
        per_device_batch_size=4,
        gradient_accumulation_steps=2,
    )
    assert small["global_batch_size"] == big["global_batch_size"] == 8
    a, b = _weights(tmp_path / "big"), _weights(tmp_path / "acc")
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-5, rtol=0, msg=name)


RESUME = {"max_steps": 12, "save_every": 4, "eval_every": 4, "hidden_dropout": 0.1, "attention_dropout": 0.1}

# Runs training in a child process that sleeps forever right after writing checkpoint 8, so the
# test can SIGKILL it at a known point (the steps are too fast to race a poll).
KILLABLE = """
import sys, time
import training.train as T
save = T.save_checkpoint
def save_then_hang(*args, **kwargs):
    path = save(*args, **kwargs)
    if kwargs["step"] == 8:
        time.sleep(600)
    return path
T.save_checkpoint = save_then_hang
T.main(sys.argv[1:])
"""


@pytest.mark.slow
def test_exact_resume_after_sigkill(tmp_path):
    _run(tmp_path / "a", report_to=["none"], **RESUME)

    out_b = tmp_path / "b"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLABLE, *_argv(out_b, report_to=["csv"], **RESUME)],
        cwd=REPO_ROOT,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while latest_checkpoint(out_b / "checkpoints") != out_b / "checkpoints" / "checkpoint-00000008":
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "checkpoint 8 never appeared"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert not (out_b / "final").exists()

    metrics = _run(out_b, report_to=["csv"], resume="true", **RESUME)
    assert metrics["step"] == 12
    a, b = _weights(tmp_path / "a"), _weights(out_b)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    with open(out_b / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    steps = [int(r["step"]) for r in rows]
    assert steps == sorted(set(steps)) and steps[-1] == 12  # no duplicated rows after the resume
    # the run's clock goes on from checkpoint 8's: its time covers both sessions
    seconds = [float(r["seconds"]) for r in rows if r.get("seconds")]
    assert len(seconds) > 2 and seconds == sorted(seconds), seconds
    saved = json.loads((out_b / "checkpoints" / "checkpoint-00000008" / "state.json").read_text())
    assert metrics["seconds"] > saved["extra"]["seconds"] > 0


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    forward = HfLmGPTForCausalLM.forward
    calls = {"n": 0}

    def poisoned(self, *args, **kwargs):
        out = forward(self, *args, **kwargs)
        if self.training:
            calls["n"] += 1
            if calls["n"] == 7:  # the 7th update
                out.loss = out.loss * float("nan")
        return out

    monkeypatch.setattr(HfLmGPTForCausalLM, "forward", poisoned)
    out = tmp_path / "nan"
    with pytest.raises(TrainingDivergedError, match="step 7") as info:
        _run(out, max_steps=20, save_every=3, report_to=["none"])
    assert isinstance(info.value, RuntimeError)
    assert [step for step, _ in list_checkpoints(out / "checkpoints")] == [3, 6]
    assert "checkpoint-00000006" in str(info.value)
    assert not (out / "final").exists()


def test_non_finite_weights_are_never_checkpointed(tmp_path, monkeypatch):
    """An update that leaves an infinite weight (as one with an overflowing learning rate does) has
    a finite loss: computed before it. The save after it finds the weight: the run stops naming
    the last good checkpoint, and no checkpoint ever holds a non-finite weight."""
    step = torch.optim.AdamW.step
    calls = {"n": 0}

    def step_then_overflow(self, *args, **kwargs):
        out = step(self, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 6:
            with torch.no_grad():
                self.param_groups[0]["params"][0][0, 0] = float("inf")
        return out

    monkeypatch.setattr(torch.optim.AdamW, "step", step_then_overflow)
    out = tmp_path / "inf"
    with pytest.raises(TrainingDivergedError, match="Non-finite weights") as info:
        _run(out, max_steps=20, save_every=3, report_to=["none"])
    assert "step 6" in str(info.value) and "checkpoint-00000003" in str(info.value)
    saved = list_checkpoints(out / "checkpoints")
    assert [s for s, _ in saved] == [3]
    for _, path in saved:
        assert all(torch.isfinite(t).all() for t in load_file(path / "model.safetensors").values())


# Runs in one launch, saving a launch's start-up: `script.py ARGS --then ARGS ...` runs `train` on
# each ARGS in turn, in the one process group, and ends the group as `main` does
RUNS_IN_ONE_LAUNCH = """
import sys
from accelerate.state import AcceleratorState, GradientState
import training.train as T
from training.run.processes import end_process_group

runs = [[]]
for arg in sys.argv[1:]:
    runs.append([]) if arg == "--then" else runs[-1].append(arg)
for argv in runs:
    T.train(*T.parse_args(argv))
    AcceleratorState._reset_state(True)  # the process group stays; the next run joins it again
    GradientState._reset_state()
end_process_group()
"""


@pytest.mark.slow
def test_two_process_ddp_matches_one_process(tmp_path):
    """2 gloo processes x b blocks follow the trajectory of 1 process x 2b, in memory and streaming
    (both 2-process runs in one launch)."""
    b = 4
    data = {"in_memory": {}, "streaming": {"streaming": True, "shuffle_buffer_size": 64}}
    script = tmp_path / "runs.py"
    script.write_text(RUNS_IN_ONE_LAUNCH)
    argvs = [
        _argv(tmp_path / f"ddp_{mode}", max_steps=8, per_device_batch_size=b, report_to=["none"], **flags)
        for mode, flags in data.items()
    ]
    cmd = [*TORCHRUN_2, str(script)]
    cmd += [*argvs[0], "--then", *argvs[1]]
    result = subprocess.run(cmd, cwd=REPO_ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]

    for mode, flags in data.items():
        ddp = json.loads((tmp_path / f"ddp_{mode}" / "final_metrics.json").read_text())
        assert ddp["world_size"] == 2 and ddp["global_batch_size"] == 2 * b, mode
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
        single = _run(
            tmp_path / f"one_{mode}", max_steps=8, per_device_batch_size=2 * b, report_to=["none"], **flags
        )
        assert single["world_size"] == 1
        x, y = _weights(tmp_path / f"ddp_{mode}"), _weights(tmp_path / f"one_{mode}")
        for name in x:
            torch.testing.assert_close(x[name], y[name], atol=1e-5, rtol=0, msg=f"{mode}: {name}")
    assert math.isclose(ddp["eval_loss"], single["eval_loss"], rel_tol=1e-4)


def test_cli_help_renders(capsys):
    """argparse formats help strings with %: every field's help must survive it (in this process; the
    installed `hflm-train --help` runs in test_console_scripts.py)."""
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--max_steps" in out and "--resume" in out


def test_document_mask_run_keeps_attention_inside_documents(tmp_path):
    """--document_mask feeds restarting positions and document ids, so blocks never attend across documents."""
    from training.data.prepare import prepare_data

    metrics = _run(tmp_path / "docs", max_steps=4, document_mask=True)
    assert metrics["step"] == 4 and math.isfinite(metrics["eval_loss"])
    data_args, _, train_args = parse_args(_argv(tmp_path / "p", document_mask=True))
    _, blocks, _, _ = prepare_data(data_args, train_args, Accelerator(cpu=True))
    assert set(blocks) == {"input_ids", "position_ids", "document_ids"}
    starts = blocks["position_ids"] == 0
    assert torch.equal(starts[:, 1:], blocks["document_ids"][:, 1:] != blocks["document_ids"][:, :-1])


def spy_on_model_inputs(monkeypatch) -> list[dict]:
    """Record the tensors each `HfLmGPTForCausalLM.forward` call of a run receives (and whether the model
    was training), so a test sees what the loop really feeds the model."""
    calls, forward = [], HfLmGPTForCausalLM.forward

    @functools.wraps(forward)
    def recording_forward(self, *args, **kwargs):
        calls.append({"training": self.training, **{k: v for k, v in kwargs.items() if torch.is_tensor(v)}})
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(HfLmGPTForCausalLM, "forward", recording_forward)
    return calls


def assert_document_inputs(calls: list[dict]) -> None:
    """Every training and evaluation forward got document ids and positions restarting with each document."""
    assert {call["training"] for call in calls} == {True, False}
    for call in calls:
        assert {"document_ids", "position_ids"} <= call.keys(), sorted(call)
        docs, positions = call["document_ids"], call["position_ids"]
        assert docs.shape == positions.shape == call["input_ids"].shape
        assert torch.equal(positions[:, 1:] == 0, docs[:, 1:] != docs[:, :-1])
    assert any((call["document_ids"][:, -1] > 0).any() for call in calls)  # blocks do span documents


def test_document_mask_run_feeds_the_document_ids_to_the_model(tmp_path, monkeypatch):
    """Through `train()`: the loop passes each block's document ids and positions to every forward
    (dropping them would silently attend across documents); without --document_mask it passes none."""
    calls = spy_on_model_inputs(monkeypatch)
    _run(tmp_path / "docs", max_steps=2, eval_every=2, save_every=2, document_mask=True)
    assert_document_inputs(calls)
    calls.clear()
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    _run(tmp_path / "plain", max_steps=2, eval_every=2, save_every=2)
    assert calls and not any("document_ids" in call or "position_ids" in call for call in calls)


def test_eval_text_units_count_what_the_loss_scores():
    """Characters and words of the scored tokens 1..T-1: a word begun in token 0 is not counted."""
    from training.data.tokenizer import train_tokenizer
    from training.objectives.evaluation import bits_metrics, eval_text_units

    tokenizer = train_tokenizer(["ab cd", "ef"] * 5, kind="char", vocab_size=40, min_frequency=1)
    eos = tokenizer.eos_token_id
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    # block 0 = "ab cd" EOS scores "b cd" EOS: 5 characters (an EOS counts one), 1 word ("cd": "b"
    # ends "ab", begun in the context token); block 1 = "ef" EOS "a" EOS EOS scores "f" EOS "a"
    # EOS EOS: 5 characters, 1 word ("a")
    blocks = {
        "input_ids": torch.tensor([encode("ab cd") + [eos], encode("ef") + [eos] + encode("a") + [eos, eos]])
    }
    assert blocks["input_ids"].shape == (2, 6)
    units = eval_text_units(tokenizer, blocks, 1)
    assert units == {"tokens": 5, "characters": 5, "words": 1}
    units = eval_text_units(tokenizer, blocks, 2)
    assert units == {"tokens": 10, "characters": 5 + 5, "words": 1 + 1}
    bits = bits_metrics(math.log(2), units)  # 1 bit per token
    assert bits == {"eval_bits_per_token": 1.0, "eval_bits_per_character": 1.0, "eval_bits_per_word": 5.0}


@pytest.mark.skipif(torch.cuda.is_available(), reason="fp16 runs where there is a CUDA GPU")
def test_fp16_without_gpu_fails_early(tmp_path):
    with pytest.raises(ValueError, match="fp16.*needs a CUDA GPU.*bf16"):
        _run(tmp_path / "fp16", max_steps=2, mixed_precision="fp16")
    assert not (tmp_path / "fp16").exists()  # before any output


def test_a_block_longer_than_the_learned_positions_fails_before_any_work(tmp_path):
    """Named by `block_size`, before the tokenizer or the data: a fresh model's table given by
    `max_position_embeddings`, or an `init_from` checkpoint's."""
    with pytest.raises(ValueError, match=r"`block_size` \(32\) is longer than the 16 learned positions"):
        _run(tmp_path / "fresh", max_steps=2, block_size=32, max_position_embeddings=16)
    assert not (tmp_path / "fresh").exists()
    from conftest import tiny_gpt_config

    folder = tmp_path / "small"
    HfLmGPTForCausalLM(tiny_gpt_config(max_position_embeddings=16)).save_pretrained(folder)
    with pytest.raises(ValueError, match="`block_size` \\(32\\) is longer .* `init_from` checkpoint"):
        _run(tmp_path / "init", max_steps=2, block_size=32, init_from=str(folder))
    assert not (tmp_path / "init").exists()


def test_bf16_run_trains(tmp_path):
    """bf16 autocast runs on CPU (accelerate's native AMP) and the loss falls as in fp32."""
    out = tmp_path / "bf16"
    metrics = _run(out, max_steps=20, mixed_precision="bf16", report_to=["csv"])
    with open(out / "metrics.csv") as f:
        losses = [float(r["loss"]) for r in csv.DictReader(f) if r["loss"]]
    assert losses[-1] < losses[0] - 0.5 and math.isfinite(metrics["eval_loss"])
    assert "| precision | bf16 mixed |" in (out / "final" / "README.md").read_text()
    assert _weights(out)["model.embed_tokens.weight"].dtype == torch.float32  # fp32 master weights


def test_resume_with_another_model_config_names_the_fields(tmp_path):
    out = tmp_path / "run"
    _run(out, max_steps=4, save_every=4, report_to=["none"])
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    with pytest.raises(ValueError, match="Cannot resume") as info:
        _run(
            out,
            max_steps=8,
            save_every=4,
            report_to=["none"],
            resume="true",
            hidden_size=64,
            num_hidden_layers=3,
        )
    message = str(info.value)
    for expected in (
        "hidden_size: 32 → 64",
        "num_hidden_layers: 2 → 3",
        "same ModelArguments",
        "fresh output_dir",
    ):
        assert expected in message, message


def test_ranks_draw_different_dropout_masks():
    """Each process re-seeds torch with (seed, rank): independent dropout per rank, reproducible per rank."""
    from conftest import tiny_gpt_config

    torch.manual_seed(0)
    model = HfLmGPTForCausalLM(tiny_gpt_config(hidden_dropout=0.3, attention_dropout=0.3)).train()
    ids = torch.randint(3, 97, (2, 16), generator=torch.Generator().manual_seed(1))

    def loss_on(seed, rank):
        seed_process_rngs(seed, rank)
        return model(input_ids=ids, labels=ids).loss.item()

    rank0, rank1 = loss_on(0, 0), loss_on(0, 1)
    assert rank0 != rank1  # different masks on the same batch
    assert loss_on(0, 0) == rank0 and loss_on(0, 1) == rank1
    assert loss_on(1, 0) not in (rank0, rank1)  # and another seed, other streams
    assert len({seed_process_rngs(s, r) for s in range(4) for r in range(4)}) == 16


# Run A to the end, then run B in the same launch (`RUNS_IN_ONE_LAUNCH`), which exits right after
# writing checkpoint 8 (rank 0 writes it; torchrun then stops the other rank), so the 2-process run B
# is interrupted at a known point.
RUN_A_THEN_INTERRUPTED_B = (
    """
import os
import training.train as T

save, eighth = T.save_checkpoint, []
def save_then_exit(*args, **kwargs):
    path = save(*args, **kwargs)
    if kwargs["step"] == 8:
        eighth.append(path)
        if len(eighth) == 2:  # run A's checkpoint 8 was the first
            os._exit(17)
    return path
T.save_checkpoint = save_then_exit
"""
    + RUNS_IN_ONE_LAUNCH
)


@pytest.mark.slow
def test_two_process_resume_with_dropout_is_exact(tmp_path):
    """Two processes with dropout: each rank's own RNG stream is saved (rank 0 gathers them) and
    restored by that rank, so an interrupted and resumed run ends with the uninterrupted run's weights."""
    script = tmp_path / "a_then_b.py"
    script.write_text(RUN_A_THEN_INTERRUPTED_B)

    def torchrun(*args: str):
        cmd = [*TORCHRUN_2, *args]
        return subprocess.run(cmd, cwd=REPO_ROOT, env=_env(), capture_output=True, text=True, timeout=300)

    def argv(out, **flags):
        return _argv(out, per_device_batch_size=4, report_to=["none"], **RESUME, **flags)

    result = torchrun(str(script), *argv(tmp_path / "a"), "--then", *argv(tmp_path / "b"))
    assert (tmp_path / "a" / "final").is_dir(), result.stderr[-3000:]
    assert result.returncode != 0 and not (tmp_path / "b" / "final").exists()
    checkpoint = latest_checkpoint(tmp_path / "b" / "checkpoints")
    assert checkpoint.name == "checkpoint-00000008", result.stderr[-3000:]
    states = [torch.load(checkpoint / name, weights_only=True) for name in ("rng.pt", "rng-1.pt")]
    assert not torch.equal(states[0]["torch"], states[1]["torch"])  # one dropout stream per rank

    result = torchrun("-m", "training.train", *argv(tmp_path / "b", resume="true"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "b" / "final_metrics.json").read_text())["world_size"] == 2
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_time_budget_stops_then_evaluates_and_saves(tmp_path):
    """`max_train_seconds` ends the run at a step boundary; the final metrics evaluate the last weights."""
    out = tmp_path / "budget"
    metrics = _run(out, max_steps=10_000, max_train_seconds=3, eval_every=10_000, report_to=["csv"])
    assert 0 < metrics["step"] < 10_000
    assert (out / "final" / "model.safetensors").is_file()
    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert int(rows[-1]["step"]) == metrics["step"] and float(rows[-1]["eval_loss"]) == pytest.approx(
        metrics["eval_loss"]
    )


def test_projected_steps_give_the_budgeted_bar_its_total():
    """With a time budget the progress bar's total is the step the budget will allow at the pace so
    far, capped by `max_steps` and never below the steps already done."""
    assert projected_steps(0, 0, 10_000, 0.0, 60.0) == 10_000  # no pace yet
    assert projected_steps(0, 10, 10_000, 5.0, 60.0) == 120  # 2 steps/s for 60 s
    assert projected_steps(100, 110, 10_000, 5.0, 60.0) == 220  # resumed at step 100
    assert projected_steps(0, 10, 50, 5.0, 60.0) == 50  # max_steps first
    assert projected_steps(0, 10, 10_000, 80.0, 60.0) == 10  # past the budget: the steps done


def test_eval_dataset_and_whole_file_documents(tmp_path):
    """`eval_dataset` evaluates on a given file (nothing held out of `dataset`); `sample_by=document`
    keeps a text file one character stream, as nanoGPT's Tiny Shakespeare split does."""
    text = "".join(f"line {i} of the corpus.\n\n" for i in range(400))
    cut = int(len(text) * 0.9)
    (tmp_path / "train.txt").write_text(text[:cut])
    (tmp_path / "val.txt").write_text(text[cut:])
    metrics = _run(
        tmp_path / "run",
        dataset=str(tmp_path / "train.txt"),
        eval_dataset=str(tmp_path / "val.txt"),
        sample_by="document",
        tokenizer_kind="char",
        max_steps=4,
        report_to=["none"],
    )
    card = (tmp_path / "run" / "final" / "README.md").read_text()
    assert "1 documents; evaluated on" in card
    assert math.isfinite(metrics["eval_loss"])
    with pytest.raises(ValueError, match="sample_by"):
        parse_args(_argv(tmp_path / "x", sample_by="sentence"))


def test_resume_from_a_checkpoint_written_before_new_config_fields(tmp_path):
    """A config field added after the checkpoint was written takes its default, not a refusal."""
    out = tmp_path / "run"
    _run(out, max_steps=4, save_every=4, report_to=["none"])
    config_file = out / "checkpoints" / "checkpoint-00000004" / "config.json"
    saved = json.loads(config_file.read_text())
    for added in ("embedding_size", "num_hidden_groups"):  # fields newer than some checkpoints
        saved.pop(added)
    config_file.write_text(json.dumps(saved))
    (config_file.parent / "manifest.json").unlink()  # such a checkpoint also predates manifests
    (config_file.parent / "COMPLETE").write_text("4\n")
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    metrics = _run(out, max_steps=6, save_every=4, report_to=["none"], resume="true")
    assert metrics["step"] == 6


def test_misspelled_config_overrides_are_refused_with_a_did_you_mean(tmp_path):
    """transformers' configs keep unknown keywords as attributes: a typo used to train the default and
    be saved in config.json. It now fails before any data is read, naming the key and the field meant."""
    typos = '{"num_hiden_layers": 1, "postion_embedding_type": "rope"}'
    with pytest.raises(ValueError) as info:
        _run(tmp_path / "typo", max_steps=1, config_overrides=typos)
    message = str(info.value)
    assert "'num_hiden_layers' (did you mean 'num_hidden_layers'" in message
    assert "'postion_embedding_type' (did you mean 'position_embedding_type'" in message
    assert not (tmp_path / "typo" / "tokenizer").exists()  # refused before the tokenizer was trained
    for arch, objective, key in (
        ("rnn", "clm", "cel_type"),
        ("transformer", "span_corruption", "decoder_layer"),
    ):
        with pytest.raises(ValueError, match=f"'{key}'"):
            _run(
                tmp_path / arch,
                max_steps=1,
                arch=arch,
                objective=objective,
                config_overrides=f'{{"{key}": 1}}',
            )
    with pytest.raises(ValueError, match="init_from"):
        _run(
            tmp_path / "init",
            max_steps=1,
            init_from=str(tmp_path),
            config_overrides='{"norm_type": "rmsnorm"}',
        )
