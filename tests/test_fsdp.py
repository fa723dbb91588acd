"""FSDP2 in the training loop (`--fsdp`, `training.sharding`), on gloo CPU processes: the path GPUs run.

- Every Transformer family (GPT, with experts too, BERT, ELECTRA, T5, BART) trains sharded: each
  process holds about 1/N of the parameters and of the optimizer's state (`final_metrics.json`'s
  "sharding", measured on each process), and the run follows the DDP run of the same settings.
- bf16 mixed precision, activation checkpointing, `shard_grad_op` and torch.compile combine with it.
- Sharded checkpoints resume bit-exactly after a kill, and on another number of processes
  (2 -> 1, 1 -> 2, 2 -> 4) to the same model; `final/` is one consolidated safetensors folder.
- Two "nodes" of one process each (torchrun --nnodes 2 on one machine) train what one node of two does.
"""

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import test_faults as faults
import torch
from conftest import TORCHRUN_2
from safetensors.torch import load_file
from test_train import REPO_ROOT, RUNS_IN_ONE_LAUNCH, TINY, _env, _fresh_accelerate_state  # noqa: F401  (fixture)

import training.run.setup
import training.state.checkpoint as ckpt
import training.train as T
from training.args import as_flags, parse_args
from training.run.processes import end_process_group
from training.state.checkpoint import load_checkpoint, load_latest_checkpoint
from training.state.folders import list_checkpoints, verify_checkpoint
from training.state.stateful import CheckpointState
from training.train import train

# a run short enough to launch many: a sharded checkpoint at step 3, an evaluation, final/
SHORT = {**TINY, "per_device_batch_size": 4, "max_steps": 3, "save_every": 3, "eval_every": 3, "eval_batches": 2,
         "report_to": "none"}  # fmt: skip
FAMILIES = {
    "gpt": {},
    # and gradient accumulation: the reduce-scatter of the last micro-step only
    "gpt_moe": {
        "config_overrides": json.dumps({"num_local_experts": 4, "num_experts_per_tok": 2}),
        "per_device_batch_size": 2,
        "gradient_accumulation_steps": 2,
    },  # fmt: skip
    # 9 evaluation blocks, 4 per batch: one process evaluates 2 batches, the other 1 (`Lockstep`)
    "bert": {
        "family": "bert",
        "objective": "mlm",
        "pseudo_perplexity_blocks": 3,
        "max_eval_blocks": 9,
        "eval_batches": 8,
    },  # fmt: skip
    "electra": {"family": "electra", "objective": "electra", "pseudo_perplexity_blocks": 0},
    "t5": {"family": "t5", "objective": "span_corruption"},
    "bart": {"family": "bart", "objective": "bart_denoising"},
}
# the runs that also train under DDP, to compare the numbers (the others check sharding and final/)
TWINS = ("gpt", "gpt_moe", "bert", "combined")
# everything the sharded path combines with (and CPU offload), against DDP with the same precision and recomputation
COMBINED = {"mixed_precision": "bf16", "gradient_checkpointing": True, "torch_compile": True,
            "torch_compile_backend": "aot_eager"}  # fmt: skip


def _flags(out: Path, **settings) -> list[str]:
    return as_flags({**SHORT, "output_dir": str(out), **settings})


def _launch(cmd: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, cwd=REPO_ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)
    errors = [line for line in result.stderr.splitlines() if line.startswith("[rank")]
    assert result.returncode == 0, "\n".join(errors[-40:]) or result.stderr[-4000:]
    return result


def _runs(script_dir: Path, launcher: list[str], runs: list[list[str]], timeout: int = 600):
    """Several runs, one after the other, in one launch (`RUNS_IN_ONE_LAUNCH`)."""
    script = script_dir / "runs.py"
    script.write_text(RUNS_IN_ONE_LAUNCH)
    argv = [a for i, run in enumerate(runs) for a in ([] if i == 0 else ["--then"]) + run]
    return _launch([*launcher, str(script), *argv], timeout)


def _metrics(out: Path) -> dict:
    return json.loads((out / "final_metrics.json").read_text())


def _weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(out / "final" / "model.safetensors")


def _close(a: Path, b: Path, tol: float) -> bool:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    return max((wa[k].float() - wb[k].float()).abs().max().item() for k in wa) <= tol


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_nodes(script_dir: Path, runs: list[list[str]]) -> None:
    """`runs` on two "nodes" of one process each, rehearsed on this machine: the command a real
    two-node launch runs on each node, with this machine's address as the rendezvous."""
    script = script_dir / "runs.py"
    script.write_text(RUNS_IN_ONE_LAUNCH)
    argv = [a for i, run in enumerate(runs) for a in ([] if i == 0 else ["--then"]) + run]
    endpoint = f"127.0.0.1:{_free_port()}"
    nodes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--nproc_per_node",
                "1",
                "--node_rank",
                str(rank),
                "--rdzv_endpoint",
                endpoint,
                str(script),
                *argv,
            ],
            cwd=REPO_ROOT,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for rank in (0, 1)
    ]
    errors = [node.communicate(timeout=600)[1] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], errors[0][-3000:] + errors[1][-3000:]


@pytest.mark.slow
def test_every_transformer_family_trains_sharded_as_ddp_does(tmp_path):
    runs = []
    for name, settings in FAMILIES.items():
        runs.append(_flags(tmp_path / f"{name}_fsdp", fsdp="full_shard", **settings))
        if name in TWINS:
            runs.append(_flags(tmp_path / f"{name}_ddp", **settings))
    runs += [
        _flags(tmp_path / "combined_fsdp", fsdp="shard_grad_op offload", **COMBINED),
        _flags(tmp_path / "combined_ddp", **COMBINED),
    ]
    _runs(tmp_path, TORCHRUN_2, runs)
    for name in [*FAMILIES, "combined"]:
        fsdp = _metrics(tmp_path / f"{name}_fsdp")
        sharding, total = fsdp["sharding"], fsdp["sharding"]["model_parameters"]
        assert sharding["engine"].startswith("FSDP2"), name
        # each process holds about half of the parameters and of AdamW's two moments per parameter
        for held in sharding["parameters_per_process"]:
            assert 0.4 * total < held < 0.6 * total, (name, sharding)
        for held in sharding["optimizer_state_per_process"]:
            assert 0.8 * total < held < 1.2 * total, (name, sharding)
        if name not in TWINS:  # trained, sharded, and final/ loads (below); the twins check the numbers
            assert math.isfinite(fsdp["train_loss"]) and math.isfinite(fsdp["eval_loss"]), name
            assert len(_weights(tmp_path / f"{name}_fsdp")) > 0  # one consolidated model.safetensors
        else:
            ddp = _metrics(tmp_path / f"{name}_ddp")
            assert ddp["sharding"]["parameters_per_process"] == [total, total], name  # DDP: everything, twice
            tol = 2e-2 if name == "combined" else 1e-4
            assert fsdp["train_loss"] == pytest.approx(ddp["train_loss"], rel=tol), name
            assert fsdp["eval_loss"] == pytest.approx(ddp["eval_loss"], rel=tol), name
            # final/ is one consolidated folder that loads as the DDP run's does
            assert _close(
                tmp_path / f"{name}_fsdp", tmp_path / f"{name}_ddp", 5e-2 if name == "combined" else 1e-4
            ), name
        checkpoint = tmp_path / f"{name}_fsdp" / "checkpoints" / "checkpoint-00000003"
        assert sorted(p.name for p in (checkpoint / "shards").iterdir()) == [
            ".metadata",
            "__0_0.distcp",
            "__1_0.distcp",
        ]
        assert not (checkpoint / "model.safetensors").exists()

    # two nodes of one process each train what one node of two processes does, DDP and FSDP
    _two_nodes(tmp_path, [_flags(tmp_path / "nodes_fsdp", fsdp="full_shard"), _flags(tmp_path / "nodes_ddp")])
    for engine in ("fsdp", "ddp"):
        assert _metrics(tmp_path / f"nodes_{engine}")["world_size"] == 2
        one_node, two_nodes = _weights(tmp_path / f"gpt_{engine}"), _weights(tmp_path / f"nodes_{engine}")
        assert all(torch.equal(one_node[k], two_nodes[k]) for k in one_node), engine


# The fault-injection suite's kills (`test_faults`: a forked child SIGKILLs itself at a chosen point),
# on a sharded run of one process: a group of one, the same sharded save and load as N.
def die_at_sharded_commit(step: int):
    """Die with the shards of checkpoint `step` written, one of them cut short, the folder not committed."""

    def install():
        commit = ckpt.save_checkpoint

        def dying(*args, **kwargs):
            if kwargs.get("staged") is not None and kwargs["step"] == step:
                shard = Path(kwargs["staged"]) / "shards" / "__0_0.distcp"
                shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
                os.kill(os.getpid(), signal.SIGKILL)
            return commit(*args, **kwargs)

        ckpt.save_checkpoint = dying

    return install


def _faults_run(out: Path, **flags) -> dict:
    try:
        return faults._run(out, fsdp="full_shard", **flags)
    finally:
        end_process_group()  # a forked child must not inherit the group


@pytest.mark.slow
def test_a_killed_sharded_run_resumes_exactly_and_passes_over_a_corrupt_shard(tmp_path, caplog):
    """Killed mid-save (a torn shard in the staging folder) and mid-step, with dropout, gradient
    accumulation and the best model: both resume to the uninterrupted run's weights, bit for bit."""
    reference, mid_save, mid_step = tmp_path / "reference", tmp_path / "mid_save", tmp_path / "mid_step"
    _faults_run(reference)
    kills = {mid_save: die_at_sharded_commit(8), mid_step: faults.kill_at_call(T, "forward_loss", 13)}
    for out, hook in kills.items():
        status = faults.run_in_child(out, [hook], fsdp="full_shard")
        assert faults._killed(status), (out.name, status)
    # the kills left the newest complete checkpoints intact, and (mid-save) a staging folder
    assert [s for s, _ in list_checkpoints(mid_save / "checkpoints")] == [4, 6]
    assert [s for s, _ in list_checkpoints(mid_step / "checkpoints")] == [4, 6]
    assert any(p.name.startswith(".tmp-hflm-") for p in (mid_save / "checkpoints").iterdir())
    for out in kills:
        assert _faults_run(out, resume="true")["sharding"]["engine"] == "FSDP2 full_shard"
        assert faults._same_weights(reference, out), out.name  # bit for bit

    # a shard damaged after its save: named, and the previous checkpoint is loaded instead; a
    # sharded checkpoint also loads into an unsharded model in a process of its own
    newest = list_checkpoints(mid_save / "checkpoints")[-1][1]
    shard = newest / "shards" / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert verify_checkpoint(newest) == [
        "shards/__0_0.distcp: sha256 mismatch (contents changed since the save: corrupt)"
    ]
    from transformers import AutoModelForCausalLM

    models = [AutoModelForCausalLM.from_pretrained(reference / "final") for _ in range(2)]
    optimizer = torch.optim.AdamW(models[0].parameters())
    state = load_latest_checkpoint(
        mid_save / "checkpoints", CheckpointState(models[0], optimizer=optimizer, rng=None)
    )
    assert state["step"] == 10 and newest in state["damaged"] and "__0_0.distcp" in caplog.text
    load_checkpoint(reference / "checkpoints" / "checkpoint-00000010", CheckpointState(models[1], rng=None))
    for (name, p), q in zip(models[0].named_parameters(), models[1].parameters(), strict=True):
        assert torch.equal(p, q), name  # the checkpoint of step 10 the uninterrupted run wrote
    assert len(optimizer.state) == len(list(models[0].parameters()))  # the moments, unsharded


# no dropout: a run resumed on another number of processes draws other masks, so only without
# them does it follow the run that kept its processes (up to float rounding)
RESHARDED = {**SHORT, "max_steps": 8, "save_every": 4, "eval_every": 4, "fsdp": "full_shard"}


def _in_this_process(runs: list[list[str]]) -> None:
    """Runs of one process, in this one: FSDP2 on a group of one (ended after each run)."""
    for argv in runs:
        faults._reset_accelerate()
        try:
            train(*parse_args(argv))
        finally:
            end_process_group()
            faults._reset_accelerate()


TORCHRUN_4 = [*TORCHRUN_2[:-1], "4"]


def _resharded(out: Path, processes: int, **overrides) -> list[str]:
    # the same global batch of 8 blocks on any number of processes
    return as_flags(
        {**RESHARDED, "output_dir": str(out), "per_device_batch_size": 8 // processes, **overrides}
    )


def _copy_at(run: Path, step: int, to: Path) -> Path:
    """A copy of `run` as it was at its checkpoint of `step` (its later checkpoints and outputs dropped)."""
    shutil.copytree(run, to)
    for name in ("final", "final_metrics.json", "best", "loss.png"):
        path = to / name
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    for checkpoint in (to / "checkpoints").iterdir():
        if checkpoint.name > f"checkpoint-{step:08d}":
            shutil.rmtree(checkpoint)
    return to


@pytest.mark.slow
def test_a_sharded_checkpoint_resumes_on_another_number_of_processes(tmp_path):
    """2 -> 1, 2 -> 4 and 1 -> 2 processes: the states are resharded on load, and the resumed run
    continues as the run that kept its processes (a wrong optimizer state would not)."""
    two, one = tmp_path / "two", tmp_path / "one"
    _in_this_process([_resharded(one, 1)])
    one_to_two = _copy_at(one, 4, tmp_path / "one_to_two")
    _runs(tmp_path, TORCHRUN_2, [_resharded(two, 2), _resharded(one_to_two, 2, resume="true")])
    two_to_one = _copy_at(two, 4, tmp_path / "two_to_one")
    two_to_four = _copy_at(two, 4, tmp_path / "two_to_four")
    unsharded = _copy_at(two, 4, tmp_path / "unsharded")  # resumed without --fsdp: the whole states
    _in_this_process(
        [_resharded(two_to_one, 1, resume="true"), _resharded(unsharded, 1, resume="true", fsdp="")]
    )
    _runs(tmp_path, TORCHRUN_4, [_resharded(two_to_four, 4, resume="true")])
    for out, processes in ((two_to_one, 1), (two_to_four, 4), (one_to_two, 2), (unsharded, 1)):
        metrics = _metrics(out)
        assert metrics["step"] == 8, out.name
        if out != unsharded:
            assert len(metrics["sharding"]["parameters_per_process"]) == processes, out.name
        assert _close(out, two, 1e-5), out.name
    # a run of one process shards too (one shard): the same path, on one GPU
    assert sorted(p.name for p in (one / "checkpoints" / "checkpoint-00000004" / "shards").iterdir()) == [
        ".metadata",
        "__0_0.distcp",
    ]
    assert _close(one, two, 1e-5)


# ---------------------------------------------------------------------------------------------
# no silent fallback: what the loop does not run is refused at the start, on every device
# ---------------------------------------------------------------------------------------------


def _run(out: Path, **settings) -> dict:
    return train(*parse_args(_flags(out, **settings)))


@pytest.mark.parametrize(
    ("environment", "engine"),
    [
        ({"ACCELERATE_USE_DEEPSPEED": "true"}, "DeepSpeed"),
        ({"ACCELERATE_USE_MEGATRON_LM": "true"}, "Megatron-LM"),
        ({"ACCELERATE_USE_FSDP": "true"}, "FSDP version 1"),  # accelerate's default version
        ({"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "1"}, "FSDP version 1"),
    ],
)
def test_an_engine_the_loop_does_not_run_is_refused_on_the_cpu_too(
    tmp_path, monkeypatch, environment, engine
):
    """accelerate runs CPU processes as MULTI_CPU and drops these configs: the run would be plain DDP."""
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=f"{engine}.*--fsdp full_shard"):
        _run(tmp_path / "run")
    assert not (tmp_path / "run" / "checkpoints").exists() and not (tmp_path / "run" / "final").exists()


def test_an_engine_accelerate_reports_is_refused_too(tmp_path, monkeypatch):
    """The backstop: an Accelerator that reports DeepSpeed, whatever configured it."""
    from accelerate import Accelerator
    from accelerate.utils import DistributedType

    class DeepSpeedAccelerator(Accelerator):
        distributed_type = DistributedType.DEEPSPEED

    monkeypatch.setattr(training.run.setup, "Accelerator", DeepSpeedAccelerator)
    with pytest.raises(ValueError, match="does not run accelerate's DEEPSPEED engine.*--fsdp full_shard"):
        _run(tmp_path / "run")


@pytest.mark.parametrize("family", ["rnn", "ffnn", "ngram"])
def test_fsdp_on_a_family_without_transformer_blocks_is_refused_by_name(tmp_path, family):
    with pytest.raises(
        ValueError, match=f"`--fsdp` shards a model's Transformer blocks, and family '{family}'"
    ):
        _run(tmp_path / "run", family=family, fsdp="full_shard")


@pytest.mark.parametrize(
    ("value", "message"),
    [("hybrid_shard", "it takes full_shard, shard_grad_op, offload"), ("full_shard auto_wrap", "always wraps each"),
     ("full_shard shard_grad_op", "not both")],
)  # fmt: skip
def test_an_fsdp_option_the_loop_does_not_take_is_refused(tmp_path, value, message):
    with pytest.raises(ValueError, match=message):
        parse_args(_flags(tmp_path / "run", fsdp=value))


def test_an_accelerate_fsdp2_config_shards_a_run_of_one_process(tmp_path, monkeypatch):
    """`accelerate launch --config_file` with `fsdp_version: 2` sets these; the run shards (a group of
    one process here: the single-GPU path) and its checkpoint is sharded."""
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    monkeypatch.setenv("FSDP_RESHARD_AFTER_FORWARD", "false")
    try:
        metrics = _run(tmp_path / "run", max_steps=2, save_every=2, eval_every=2)
    finally:
        end_process_group()
    assert metrics["sharding"]["engine"] == "FSDP2 shard_grad_op"
    assert (tmp_path / "run" / "checkpoints" / "checkpoint-00000002" / "shards" / ".metadata").is_file()


def test_an_unsharded_checkpoint_does_not_resume_sharded(tmp_path):
    """A DDP checkpoint's optimizer state is keyed by position, not by name: refused with the way out."""
    _run(tmp_path / "run", max_steps=2, save_every=2, eval_every=2)
    try:
        with pytest.raises(ValueError, match="saved by an unsharded run.*--init_from"):
            _run(tmp_path / "run", max_steps=4, save_every=2, eval_every=2, resume="true", fsdp="full_shard")
    finally:
        end_process_group()
