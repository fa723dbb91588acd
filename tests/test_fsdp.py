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
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import TORCHRUN_2
from safetensors.torch import load_file
from test_train import REPO_ROOT, RUNS_IN_ONE_LAUNCH, TINY, _env

from training.args import as_flags

pytestmark = pytest.mark.slow

# a run short enough to launch many: a sharded checkpoint at step 3, an evaluation, final/
SHORT = {**TINY, "per_device_batch_size": 4, "max_steps": 3, "save_every": 3, "eval_every": 3, "eval_batches": 2,
         "report_to": "none"}  # fmt: skip
FAMILIES = {
    "gpt": {},
    "gpt_moe": {"config_overrides": json.dumps({"num_local_experts": 4, "num_experts_per_tok": 2})},
    "bert": {"family": "bert", "objective": "mlm", "pseudo_perplexity_blocks": 2},
    "electra": {"family": "electra", "objective": "electra", "pseudo_perplexity_blocks": 0},
    "t5": {"family": "t5", "objective": "span_corruption"},
    "bart": {"family": "bart", "objective": "bart_denoising"},
}
# everything the sharded path combines with, against DDP with the same precision and recomputation
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


def _close(a: Path, b: Path, tol: float) -> float:
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    return max((wa[k].float() - wb[k].float()).abs().max().item() for k in wa) <= tol


def test_every_transformer_family_trains_sharded_as_ddp_does(tmp_path):
    runs = []
    for name, settings in FAMILIES.items():
        runs += [
            _flags(tmp_path / f"{name}_fsdp", fsdp="full_shard", **settings),
            _flags(tmp_path / f"{name}_ddp", **settings),
        ]
    runs += [
        _flags(tmp_path / "combined_fsdp", fsdp="shard_grad_op", **COMBINED),
        _flags(tmp_path / "combined_ddp", **COMBINED),
    ]
    _runs(tmp_path, TORCHRUN_2, runs)
    for name in [*FAMILIES, "combined"]:
        fsdp, ddp = _metrics(tmp_path / f"{name}_fsdp"), _metrics(tmp_path / f"{name}_ddp")
        sharding, total = fsdp["sharding"], fsdp["sharding"]["model_parameters"]
        assert sharding["engine"].startswith("FSDP2"), name
        # each process holds about half of the parameters and of AdamW's two moments per parameter
        for held in sharding["parameters_per_process"]:
            assert 0.4 * total < held < 0.6 * total, (name, sharding)
        for held in sharding["optimizer_state_per_process"]:
            assert 0.8 * total < held < 1.2 * total, (name, sharding)
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
