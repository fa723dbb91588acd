"""Atomic training checkpoints (`training.state`) and sliding-window perplexity
(`hf_lm.metrics`, the `evaluate` module and `training.evaluate_cli`)."""

import json
import math
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, tiny_gpt_config
from transformers import get_cosine_schedule_with_warmup

from hf_lm import HfLmGPTForCausalLM
from hf_lm.metrics.sliding_window import sliding_window_perplexity, sliding_windows
from training.state import atomic, folders
from training.state import checkpoint as ckpt
from training.state.checkpoint import load_checkpoint, save_checkpoint
from training.state.folders import latest_checkpoint, list_checkpoints
from training.state.rng import RngStates, get_rng_state
from training.state.stateful import CheckpointState, Values

METRIC_DIR = os.path.join(REPO_ROOT, "hf_lm", "metrics", "perplexity")


# ---------------------------------------------------------------------------------------------
# checkpoints
# ---------------------------------------------------------------------------------------------


def _train_setup(seed: int, tie: bool = True):
    torch.manual_seed(seed)
    model = HfLmGPTForCausalLM(tiny_gpt_config(tie_word_embeddings=tie))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    scheduler = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=2, num_training_steps=20)
    return model, optimizer, scheduler


def _train_steps(model, optimizer, scheduler, n: int, seed: int = 123) -> None:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(n):
        ids = torch.randint(3, 97, (2, 12), generator=gen)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


def _assert_nested_equal(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_nested_equal(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_nested_equal(x, y)
    else:
        assert a == b


@pytest.mark.parametrize("tie", [True, False])
def test_round_trip_model_optimizer_scheduler_data(tmp_path, tie):
    model, optimizer, scheduler = _train_setup(0, tie)
    _train_steps(model, optimizer, scheduler, 3)
    data_state = {"epoch": 1, "sample_index": 4242, "shard": "train-00001"}
    path = save_checkpoint(
        tmp_path,
        CheckpointState(
            model,
            optimizer=optimizer,
            scheduler=scheduler,
            data=Values(data_state),
            extra={"notes": Values({"loss": 1.5})},
        ),
        step=3,
    )
    assert path == tmp_path / "checkpoint-00000003"
    assert sorted(os.listdir(path)) == sorted(
        [
            "model.safetensors",
            "config.json",
            "optimizer.pt",
            "scheduler.pt",
            "rng.pt",
            "state.json",
            "manifest.json",
            "COMPLETE",
        ]
    )

    model2, optimizer2, scheduler2 = _train_setup(1, tie)  # different init, fresh optimizer state
    info = load_checkpoint(path, CheckpointState(model2, optimizer=optimizer2, scheduler=scheduler2))
    assert info["step"] == 3 and info["data_state"] == data_state and info["extra"] == {"loss": 1.5}

    _assert_nested_equal(model.state_dict(), model2.state_dict())
    if tie:  # still one shared tensor after loading
        assert model2.lm_head.weight is model2.model.embed_tokens.weight
    else:
        assert model2.lm_head.weight.data_ptr() != model2.model.embed_tokens.weight.data_ptr()
    _assert_nested_equal(optimizer.state_dict(), optimizer2.state_dict())
    assert scheduler.state_dict() == scheduler2.state_dict()
    assert scheduler2.get_last_lr() == scheduler.get_last_lr()

    # training continues identically
    _train_steps(model, optimizer, scheduler, 2, seed=7)
    _train_steps(model2, optimizer2, scheduler2, 2, seed=7)
    _assert_nested_equal(model.state_dict(), model2.state_dict())
    assert scheduler.get_last_lr() == scheduler2.get_last_lr()


class _Counter:
    """A part with state of its own, as the training loop's parts (best model, divergence guard) are."""

    def __init__(self, count: int) -> None:
        self.count = count

    def state_dict(self) -> dict:
        return {"count": self.count}

    def load_state_dict(self, extra: dict) -> None:
        self.count = extra["count"]


def test_parts_save_and_restore_their_own_state(tmp_path):
    """Each extra part writes its keys of state.json's "extra" and is given them back on load; a part
    left None (here the RNG streams) is neither written nor restored."""
    model = HfLmGPTForCausalLM(tiny_gpt_config())
    saved = CheckpointState(model, rng=None, extra={"counter": _Counter(7), "notes": Values(loss=1.5)})
    path = save_checkpoint(tmp_path, saved, step=1)
    assert json.loads((path / "state.json").read_text())["extra"] == {"count": 7, "loss": 1.5}
    assert not any(name.startswith("rng") for name in os.listdir(path))
    counter, data = _Counter(0), Values(stale=True)
    torch.manual_seed(3)
    before = torch.get_rng_state()
    load_checkpoint(path, CheckpointState(model, rng=None, data=data, extra={"counter": counter}))
    assert counter.count == 7 and data == {}  # saved without a data position: an empty one back
    assert torch.equal(torch.get_rng_state(), before)


def _draw():
    return (
        [random.random() for _ in range(3)] + [random.gauss(0, 1)],
        np.random.rand(3).tolist() + [float(np.random.standard_normal())],
        torch.rand(3).tolist() + torch.randn(2).tolist(),
    )


def test_rng_restore_is_exact(tmp_path):
    model = HfLmGPTForCausalLM(tiny_gpt_config())
    random.seed(5)
    np.random.seed(5)
    random.gauss(0, 1)  # leave a cached gaussian in python's state
    np.random.standard_normal()  # ... and in numpy's
    save_checkpoint(tmp_path, CheckpointState(model), step=0)
    expected = _draw()
    _draw()  # move every stream on
    load_checkpoint(tmp_path / "checkpoint-00000000", CheckpointState(model))
    assert _draw() == expected


def test_pt_files_load_with_weights_only(tmp_path):
    model, optimizer, scheduler = _train_setup(0)
    _train_steps(model, optimizer, scheduler, 1)
    scaler = torch.amp.GradScaler("cpu")
    path = save_checkpoint(
        tmp_path, CheckpointState(model, optimizer=optimizer, scheduler=scheduler, scaler=scaler), step=1
    )
    for name in ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng.pt"):
        torch.load(path / name, weights_only=True)  # raises UnpicklingError on any non-allowlisted type


def _scaled_steps(model, optimizer, scaler, n: int, overflow_at=()) -> None:
    """fp16-style steps through a GradScaler; an inf gradient at the listed steps backs the scale off."""
    gen = torch.Generator().manual_seed(n)
    for i in range(n):
        ids = torch.randint(3, 97, (2, 12), generator=gen)
        loss = model(input_ids=ids, labels=ids).loss
        scaler.scale(loss * (float("inf") if i in overflow_at else 1.0)).backward()
        scaler.step(optimizer)  # skipped when the gradients hold inf/NaN
        scaler.update()
        optimizer.zero_grad()


def test_grad_scaler_state_round_trip(tmp_path):
    """The fp16 loss scale and its growth tracker survive a checkpoint, and training continues identically.

    accelerate creates its GradScaler only on a GPU; torch's CPU GradScaler has the same state.
    """
    model, optimizer, _ = _train_setup(0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12, growth_interval=2)
    _scaled_steps(model, optimizer, scaler, 3, overflow_at=(1,))  # back off once, then count towards growth
    assert scaler.get_scale() == 2.0**11 and scaler.state_dict()["_growth_tracker"] == 1
    path = save_checkpoint(tmp_path, CheckpointState(model, optimizer=optimizer, scaler=scaler), step=3)

    model2, optimizer2, _ = _train_setup(1)
    scaler2 = torch.amp.GradScaler("cpu", init_scale=2.0**12, growth_interval=2)
    load_checkpoint(path, CheckpointState(model2, optimizer=optimizer2, scaler=scaler2))
    assert scaler2.state_dict() == scaler.state_dict()
    _scaled_steps(model, optimizer, scaler, 3, overflow_at=(2,))
    _scaled_steps(model2, optimizer2, scaler2, 3, overflow_at=(2,))
    assert scaler2.state_dict() == scaler.state_dict()
    _assert_nested_equal(model.state_dict(), model2.state_dict())

    # a checkpoint without scaler state (an fp32 run) still loads: the scale starts afresh
    plain = save_checkpoint(tmp_path, CheckpointState(model, optimizer=optimizer), step=6)
    fresh = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    load_checkpoint(plain, CheckpointState(model2, optimizer=optimizer2, scaler=fresh))
    assert fresh.get_scale() == 2.0**12


def test_rng_states_of_every_process(tmp_path):
    """A multi-process checkpoint stores one RNG file per rank; each rank restores its own."""
    model = HfLmGPTForCausalLM(tiny_gpt_config())
    states, expected = [], []
    for rank in range(3):  # stand-ins for three processes' streams
        torch.manual_seed(100 + rank)
        random.seed(100 + rank)
        np.random.seed(100 + rank)
        states.append(get_rng_state())
        expected.append(_draw())
    path = save_checkpoint(tmp_path, CheckpointState(model, rng=RngStates(states=states)), step=1)
    assert {"rng.pt", "rng-1.pt", "rng-2.pt"} <= set(os.listdir(path))
    assert json.loads((path / "state.json").read_text())["num_rng_states"] == 3
    for rank in (2, 0, 1):
        load_checkpoint(path, CheckpointState(model, rng=RngStates(rank)))
        assert _draw() == expected[rank]
    # a rank the checkpoint has no state for (more processes than when saved) keeps its streams
    torch.manual_seed(7)
    before = torch.get_rng_state()
    load_checkpoint(path, CheckpointState(model, rng=RngStates(3)))
    assert torch.equal(torch.get_rng_state(), before)


def test_model_config_mismatch_names_the_fields(tmp_path):
    model = HfLmGPTForCausalLM(tiny_gpt_config())
    path = save_checkpoint(tmp_path, CheckpointState(model), step=1)
    assert json.loads((path / "config.json").read_text())["hidden_size"] == 32
    other = HfLmGPTForCausalLM(tiny_gpt_config(hidden_size=48, num_attention_heads=4, hidden_dropout=0.1))
    with pytest.raises(ValueError, match="Cannot resume") as info:
        load_checkpoint(path, CheckpointState(other))
    message = str(info.value)
    for expected in ("hidden_size: 32 → 48", "head_dim: 8 → 12", "hidden_dropout: 0.0 → 0.1", "resume=false"):
        assert expected in message, message
    assert "vocab_size" not in message and "transformers_version" not in message
    # bookkeeping fields (name, dtype, attention implementation) do not count
    same = HfLmGPTForCausalLM(tiny_gpt_config())
    same.config._name_or_path = "elsewhere"
    same.config.use_cache = False
    load_checkpoint(path, CheckpointState(same))
    # a checkpoint saved before config.json existed loads without the check
    os.remove(path / "config.json")
    with pytest.raises(RuntimeError):  # torch's own shape error
        load_checkpoint(path, CheckpointState(other))
    assert ckpt.config_differences({"a": 1, "dtype": "float32"}, {"a": 2, "b": 3}) == {
        "a": (1, 2),
        "b": (None, 3),
    }


def test_load_missing_part_raises(tmp_path):
    model, optimizer, _ = _train_setup(0)
    path = save_checkpoint(tmp_path, CheckpointState(model), step=1)
    with pytest.raises(FileNotFoundError, match="optimizer.pt"):
        load_checkpoint(path, CheckpointState(model, optimizer=optimizer))


@pytest.mark.parametrize("fail_on", ["optimizer", "marker", "rename"])
def test_crash_mid_save_keeps_previous_checkpoint(tmp_path, monkeypatch, fail_on):
    model, optimizer, scheduler = _train_setup(0)
    save_checkpoint(tmp_path, CheckpointState(model, optimizer=optimizer, scheduler=scheduler), step=1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    _train_steps(model, optimizer, scheduler, 1)

    real_torch_save, real_write_text, real_replace = ckpt._torch_save, ckpt.write_text_synced, os.replace

    def torch_save(obj, path):
        if fail_on == "optimizer" and path.name == "optimizer.pt":
            real_torch_save(obj, path)  # a partially written file
            raise OSError("disk full")
        real_torch_save(obj, path)

    def write_text(path, text):
        if fail_on == "marker" and path.name == "COMPLETE":
            raise OSError("killed")
        real_write_text(path, text)

    def replace(src, dst):
        if fail_on == "rename":
            raise OSError("rename failed")
        real_replace(src, dst)

    monkeypatch.setattr(ckpt, "_torch_save", torch_save)
    monkeypatch.setattr(ckpt, "write_text_synced", write_text)
    monkeypatch.setattr(ckpt.os, "replace", replace)
    for step in (2, 1):  # a new step, and overwriting the existing one
        with pytest.raises(OSError):
            save_checkpoint(
                tmp_path, CheckpointState(model, optimizer=optimizer, scheduler=scheduler), step=step
            )
    monkeypatch.undo()

    assert sorted(os.listdir(tmp_path)) == ["checkpoint-00000001"]  # no partial dir, no temp left
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-00000001"
    fresh, opt2, sched2 = _train_setup(3)
    assert (
        load_checkpoint(
            tmp_path / "checkpoint-00000001", CheckpointState(fresh, optimizer=opt2, scheduler=sched2)
        )["step"]
        == 1
    )
    _assert_nested_equal(before, fresh.state_dict())


def test_overwrite_same_step(tmp_path):
    model, _, _ = _train_setup(0)
    save_checkpoint(tmp_path, CheckpointState(model, extra={"notes": Values({"v": 1})}), step=5)
    save_checkpoint(tmp_path, CheckpointState(model, extra={"notes": Values({"v": 2})}), step=5)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-00000005"]
    assert load_checkpoint(tmp_path / "checkpoint-00000005", CheckpointState(model))["extra"] == {"v": 2}


def test_latest_checkpoint_ignores_temp_and_incomplete(tmp_path):
    assert latest_checkpoint(tmp_path / "missing") is None
    assert latest_checkpoint(tmp_path) is None
    model = HfLmGPTForCausalLM(tiny_gpt_config())
    save_checkpoint(tmp_path, CheckpointState(model), step=3)
    save_checkpoint(tmp_path, CheckpointState(model), step=12)
    (tmp_path / "checkpoint-00000020").mkdir()  # incomplete: no COMPLETE marker
    tmp = tmp_path / ".tmp-checkpoint-00000030-1-abc"
    tmp.mkdir()
    (tmp / "COMPLETE").write_text("30")
    (tmp_path / "checkpoint-notanumber").mkdir()
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-00000012"
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3, 12]
    with pytest.raises(FileNotFoundError, match="COMPLETE"):
        load_checkpoint(tmp_path / "checkpoint-00000020", CheckpointState(model))


def test_keep_last_prunes_oldest(tmp_path):
    model = HfLmGPTForCausalLM(tiny_gpt_config())
    for step in (1, 2, 5, 10):
        save_checkpoint(tmp_path, CheckpointState(model), step=step, keep_last=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [5, 10]
    # a save below the newest step means the run went back (past a damaged checkpoint, or a
    # rollback): the checkpoint just written is kept, the abandoned later one goes
    save_checkpoint(tmp_path, CheckpointState(model), step=3, keep_last=1)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3]
    with pytest.raises(ValueError, match="keep_last"):
        save_checkpoint(tmp_path, CheckpointState(model), step=4, keep_last=0)
    with pytest.raises(TypeError):
        save_checkpoint(tmp_path, CheckpointState(model, data=Values({"x": object()})), step=4)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-00000003"]


def test_keep_last_prunes_only_the_runs_own_checkpoints(tmp_path):
    """Two runs in one folder: each prunes its own checkpoints only, whatever the other's steps."""
    model = HfLmGPTForCausalLM(tiny_gpt_config())
    for step in (10, 12):
        save_checkpoint(tmp_path, CheckpointState(model), step=step, keep_last=2, run_id="first")
    for step in (2, 4, 6):
        save_checkpoint(tmp_path, CheckpointState(model), step=step, keep_last=2, run_id="second")
    assert [(s, rid) for s, _, rid in folders.list_checkpoints_with_run_ids(tmp_path)] == [
        (4, "second"),
        (6, "second"),
        (10, "first"),
        (12, "first"),
    ]
    assert folders.checkpoint_record(tmp_path / "checkpoint-00000006")["run_id"] == "second"
    assert folders.latest_run_id(tmp_path) == "second"  # the run that saved last, not the highest step
    assert folders.remove_checkpoints_except(tmp_path, {4}, run_id="second") == [6]
    assert [s for s, _ in list_checkpoints(tmp_path)] == [4, 10, 12]


def test_manifest_checksums_every_file(tmp_path):
    model, optimizer, scheduler = _train_setup(0)
    path = save_checkpoint(
        tmp_path, CheckpointState(model, optimizer=optimizer, scheduler=scheduler), step=1, run_id="r"
    )
    manifest = json.loads((path / "manifest.json").read_text())
    assert sorted(manifest["files"]) == sorted(set(os.listdir(path)) - {"manifest.json", "COMPLETE"})
    assert manifest["run_id"] == "r" and manifest["step"] == 1
    assert "manifest.json sha256" in (path / "COMPLETE").read_text()  # the manifest is checksummed too
    assert folders.verify_checkpoint(path) == []
    data = bytearray((path / "optimizer.pt").read_bytes())
    data[100] ^= 1
    (path / "optimizer.pt").write_bytes(bytes(data))
    assert folders.verify_checkpoint(path) == [
        "optimizer.pt: sha256 mismatch (contents changed since the save: corrupt)"
    ]
    with pytest.raises(folders.CorruptCheckpointError, match="optimizer.pt"):
        load_checkpoint(path, CheckpointState(model, optimizer=optimizer))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused_before_writing(tmp_path, bad):
    model = HfLmGPTForCausalLM(tiny_gpt_config())
    assert math.isfinite(ckpt.max_abs_weight(model))
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight[3, 4] = bad
    assert not math.isfinite(ckpt.max_abs_weight(model))
    with pytest.raises(ckpt.NonFiniteWeightsError, match="step 7"):
        save_checkpoint(tmp_path, CheckpointState(model), step=7)
    assert os.listdir(tmp_path) == []  # nothing written, not even a temporary folder
    save_checkpoint(tmp_path, CheckpointState(model), step=7, check_finite=False)  # the caller's choice


def test_atomic_writes_keep_the_old_contents_when_interrupted(tmp_path, monkeypatch):
    target = tmp_path / "final_metrics.json"
    atomic.atomic_write_text(target, "old")
    folder = tmp_path / "tokenizer"
    with atomic.atomic_folder(folder) as staging:
        (staging / "tokenizer.json").write_text("old")
    real_write_text = atomic.write_text_synced

    def write_half_then_fail(path, text):
        real_write_text(path, text[: len(text) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic, "write_text_synced", write_half_then_fail)
    with pytest.raises(OSError):
        atomic.atomic_write_text(target, "new contents")
    with pytest.raises(OSError), atomic.atomic_folder(folder) as staging:
        (staging / "tokenizer.json").write_text("new")
        raise OSError(28, "No space left on device")
    assert target.read_text() == "old" and (folder / "tokenizer.json").read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["final_metrics.json", "tokenizer"]  # no temporary left


_SAVER_SCRIPT = """
import sys, torch
from training.state.checkpoint import save_checkpoint
from training.state.stateful import CheckpointState, Values
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 1024))  # ~8 MB
opt = torch.optim.AdamW(model.parameters())
model(torch.randn(2, 1024)).sum().backward()
opt.step()
step = 0
while True:
    step += 1
    with torch.no_grad():
        model[0].weight.fill_(float(step))
    state = CheckpointState(model, optimizer=opt, data=Values(step=step))
    save_checkpoint(sys.argv[1], state, step=step, keep_last=3)
"""


@pytest.mark.slow
def test_sigkill_never_leaves_a_partial_checkpoint(tmp_path):
    script = tmp_path / "saver.py"
    script.write_text(_SAVER_SCRIPT)
    root = tmp_path / "ckpts"
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rng = random.Random(0)
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, str(script), str(root)], env=env, cwd=REPO_ROOT)
        try:
            deadline = time.time() + 60
            while latest_checkpoint(root) is None and time.time() < deadline and proc.poll() is None:
                time.sleep(0.02)
            assert proc.poll() is None, "the saver died on its own"
            time.sleep(rng.uniform(0.05, 0.6))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        dirs = sorted(p for p in root.iterdir() if p.name.startswith("checkpoint-"))
        assert dirs, "no checkpoint at all"
        for path in dirs:  # every folder under a final name is complete and loads
            model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 1024))
            opt = torch.optim.AdamW(model.parameters())
            info = load_checkpoint(path, CheckpointState(model, optimizer=opt, rng=None))
            assert info["data_state"] == {"step": info["step"]}
            assert path.name == f"checkpoint-{info['step']:08d}"
            assert torch.all(model[0].weight == float(info["step"]))
        assert latest_checkpoint(root) == dirs[-1]


# ---------------------------------------------------------------------------------------------
# sliding-window perplexity
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def lm():
    torch.manual_seed(0)
    return HfLmGPTForCausalLM(tiny_gpt_config(max_position_embeddings=32)).eval()


def test_short_stream_equals_model_loss(lm):
    ids = torch.randint(3, 97, (20,))
    with torch.no_grad():
        expected = lm(input_ids=ids[None], labels=ids[None]).loss.item()
    result = sliding_window_perplexity(lm, ids, max_length=32, stride=32)
    assert result["n_tokens"] == 19 and result["n_windows"] == 1
    assert result["loss"] == pytest.approx(expected, rel=1e-5)
    assert result["perplexity"] == pytest.approx(math.exp(expected), rel=1e-5)
    assert result["bits_per_token"] == pytest.approx(expected / math.log(2), rel=1e-5)


@pytest.mark.parametrize(
    "n,max_length,stride", [(50, 8, 8), (50, 8, 3), (50, 8, 7), (9, 8, 8), (64, 16, 1), (8, 8, 4), (1, 8, 4)]
)
def test_window_target_counts(n, max_length, stride):
    windows = sliding_windows(n, max_length, stride)
    targets = [t for w in windows for t in range(w.first_target, w.end)]
    assert len(targets) == len(set(targets))  # nothing scored twice
    assert all(w.end - w.begin <= max_length and w.first_target > w.begin for w in windows)
    if stride < max_length:
        assert targets == list(range(1, n))  # every token after the first, once, in order
    else:  # disjoint chunks: each chunk's first token is context only
        assert len(targets) == n - math.ceil(n / max_length)


def _brute_force_nll(model, ids, max_length, stride):
    """Score token t alone, with context ids[b:t], b the start of the first window reaching past t."""
    nll, count = 0.0, 0
    for t in range(1, len(ids)):
        k = max(0, math.ceil((t - max_length + 1) / stride))  # smallest k with k*stride + L > t
        begin = k * stride
        if t <= begin:  # only with stride == max_length: t is its chunk's first token
            continue
        with torch.no_grad():
            logits = model(input_ids=ids[None, begin : t + 1]).logits[0, -2]
        nll -= torch.log_softmax(logits.double(), -1)[ids[t]].item()
        count += 1
    return nll, count


@pytest.mark.parametrize("max_length,stride", [(8, 8), (8, 3), (8, 1), (12, 5)])
def test_matches_brute_force(lm, max_length, stride):
    ids = torch.randint(3, 97, (30,))
    nll, count = _brute_force_nll(lm, ids, max_length, stride)
    result = sliding_window_perplexity(lm, ids, max_length=max_length, stride=stride, batch_size=3)
    assert result["n_tokens"] == count
    assert result["nll_sum"] == pytest.approx(nll, rel=1e-5)
    assert result["loss"] == pytest.approx(nll / count, rel=1e-5)


def test_batch_size_and_bits(lm):
    ids = torch.randint(3, 97, (45,))
    one = sliding_window_perplexity(lm, ids, max_length=10, stride=4)
    many = sliding_window_perplexity(
        lm, ids[None], max_length=10, stride=4, batch_size=5, num_characters=90, num_words=15
    )
    assert one["n_tokens"] == many["n_tokens"] == 44
    assert many["nll_sum"] == pytest.approx(one["nll_sum"], rel=1e-5)
    assert one["bits_per_character"] is None
    assert many["bits_per_character"] == pytest.approx(many["nll_sum"] / math.log(2) / 90)
    assert many["bits_per_word"] == pytest.approx(many["nll_sum"] / math.log(2) / 15)
    assert lm.training is False
    with pytest.raises(ValueError, match="stride"):
        sliding_window_perplexity(lm, ids, max_length=10, stride=11)


@pytest.fixture(scope="module")
def saved_lm(tmp_path_factory):
    from training.data.tokenizer import train_tokenizer

    corpus = ["the quick brown fox jumps over the lazy dog."] * 5 + ["hello world, hello perplexity!"] * 5
    tokenizer = train_tokenizer(corpus, kind="char", vocab_size=64, min_frequency=1, model_max_length=32)
    torch.manual_seed(0)
    config = tiny_gpt_config(
        vocab_size=len(tokenizer),
        max_position_embeddings=32,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = HfLmGPTForCausalLM(config).eval()
    path = tmp_path_factory.mktemp("tiny_lm")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, model, tokenizer


def test_evaluate_module_loads_offline_and_matches(saved_lm, monkeypatch):
    import evaluate

    monkeypatch.setenv("HF_EVALUATE_OFFLINE", "1")
    path, model, tokenizer = saved_lm
    texts = ["the quick brown fox jumps over the lazy dog, hello world.", "hello fox"]
    for location in (METRIC_DIR, os.path.join(METRIC_DIR, "perplexity.py")):
        metric = evaluate.load(location)
        result = metric.compute(predictions=texts, model=model, tokenizer=tokenizer, max_length=16, stride=5)
        nll, count = 0.0, 0
        for text in texts:
            ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"])
            core = sliding_window_perplexity(model, ids, max_length=16, stride=5)
            nll += core["nll_sum"]
            count += core["n_tokens"]
        assert result["n_tokens"] == count == sum(len(t) - 1 for t in texts)  # char tokenizer
        assert result["loss"] == pytest.approx(nll / count, rel=1e-6)
        assert len(result["perplexities"]) == 2
        assert result["bits_per_character"] == pytest.approx(nll / math.log(2) / sum(map(len, texts)))

    # from a folder path, with the BOS token scoring the first character as well
    by_id = metric.compute(
        predictions=texts, model_id=str(path), max_length=16, stride=5, add_start_token=True
    )
    assert by_id["n_tokens"] == sum(len(t) for t in texts)


def test_cli_prints_json(saved_lm, tmp_path, capsys):
    from training import evaluate_cli

    path, model, tokenizer = saved_lm
    text = "the quick brown fox jumps over the lazy dog.\nhello world, hello perplexity!\n" * 2
    text_file = tmp_path / "eval.txt"
    text_file.write_text(text, encoding="utf-8")
    evaluate_cli.main(
        ["--model", str(path), "--text_file", str(text_file), "--max_length", "16", "--stride", "4"]
    )
    result = json.loads(capsys.readouterr().out)
    ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"])
    core = sliding_window_perplexity(model, ids, max_length=16, stride=4)
    assert result["n_tokens"] == len(ids) - 1 == len(text) - 1
    assert result["perplexity"] == pytest.approx(core["perplexity"], rel=1e-5)
    for key in ("loss", "bits_per_token", "bits_per_character", "bits_per_word"):
        assert isinstance(result[key], float)
    assert result["bits_per_word"] == pytest.approx(core["nll_sum"] / math.log(2) / len(text.split()))


@pytest.mark.parametrize(
    "flags, match",
    [
        (["--dtype", "load"], r"`dtype` must be one of \['float32', 'bfloat16', 'float16'\], got 'load'"),
        (["--stride", "0"], "`stride` must be a positive number of tokens, got 0"),
        (["--max_length", "1"], "`max_length` must be at least 2"),
        (["--max_length", "8", "--stride", "9"], r"`stride` \(9\) must be at most `max_length` \(8\)"),
        (["--batch_size", "0"], "`batch_size` must be at least 1"),
        (["--device", "gpu0"], "`device` must be auto or a torch device name"),
        (["--max_length", "33"], r"`max_length` \(33\) is longer than the model's 32 learned positions"),
    ],
)
def test_cli_rejects_bad_arguments(saved_lm, tmp_path, flags, match):
    from training import evaluate_cli

    text_file = tmp_path / "eval.txt"
    text_file.write_text("hello world", encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        evaluate_cli.main(["--model", str(saved_lm[0]), "--text_file", str(text_file), *flags])


@pytest.mark.parametrize(
    "content, flags, match",
    [
        (b"", [], r"empty\.txt: 0 characters, 0 token\(s\); at least 2 tokens"),
        (b"h", [], r"empty\.txt: 1 characters, 1 token\(s\)"),
        (b"", ["--add_start_token"], r"empty\.txt: 0 characters, 1 token\(s\)"),
        (b"hello\nw\xe9rld\n", [], r"empty\.txt, line 2 \(byte 7\): not UTF-8"),
    ],
)
def test_cli_rejects_empty_short_or_non_utf8_text(saved_lm, tmp_path, capsys, content, flags, match):
    """No NaN perplexity with exit status 0, no raw UnicodeDecodeError: an error naming the file."""
    from training import evaluate_cli

    text_file = tmp_path / "empty.txt"
    text_file.write_bytes(content)
    with pytest.raises(ValueError, match=match):
        evaluate_cli.main(["--model", str(saved_lm[0]), "--text_file", str(text_file), *flags])
    assert capsys.readouterr().out == ""  # nothing printed as a result
