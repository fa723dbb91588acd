"""Device placement, checked on a CPU: everything runs with the model on a simulated accelerator.

A GPU rejects a CPU tensor next to a CUDA tensor; a CPU-only CI never sees the difference. Here the
model lives on `tests/simulated_device.py`'s device (real CPU data that reports another device and
follows CUDA's mixing rules), the data starts on the CPU, and every path of the training loop,
every model family and config variant (tests/config_variants.py), the pipelines and the tools must
still run. The same cases run on a real GPU with `make gpu-check` (`pytest -m cuda`,
`tests/test_cuda.py`), which this suite shares its case lists with (`tests/gpu_cases.py`).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, tiny_gpt_config
from gpu_cases import (
    COMPILED,
    FINETUNE_CASES,
    LOOP_CASES,
    NOT_RESUMED,
    PIPELINE_CASES,
    _close,
    _main_output,
    check_loop_metrics,
    loop_argv,
    matmul_precision_for,
    run_demo,
    run_evaluate_cli,
    run_family_case,
    run_finetune_case,
    run_pipeline_case,
    sweep_ids,
)
from gpu_summary import CUDA_MARK, GpuCheckSummary
from simulated_device import DEVICE, DeviceTensor, simulated_accelerator, simulated_device, to_cpu

import training.objectives.evaluation
import training.train as train_module
from hf_lm import HfLmGPTForCausalLM
from hf_lm.testing import FAMILY_CASES, VARIANT_CASES

# ----------------------------------------------------------------------------------------------
# The simulated device follows CUDA's rules
# ----------------------------------------------------------------------------------------------


def test_mixing_a_cpu_tensor_with_a_device_tensor_raises_like_cuda():
    with simulated_device() as sim:
        x = torch.ones(3, device=sim.device)
        assert isinstance(x, DeviceTensor) and x.device == DEVICE
        for mixed in (
            lambda: torch.stack([x, torch.ones(3)]),
            lambda: x + torch.ones(3),
            lambda: torch.stack([x.sum(), torch.tensor(1.0)]),  # 0-dim CPU tensors too, outside pointwise ops
            lambda: torch.nn.functional.embedding(torch.tensor([0, 1]), x.reshape(3, 1)),
        ):
            with pytest.raises(RuntimeError, match="same device"):
                mixed()
        with pytest.raises(TypeError, match="numpy"):
            x.numpy()


def test_what_cuda_allows_is_allowed_and_exact():
    a = torch.randn(4, 3)
    with simulated_device() as sim:
        x = a.to(sim.device)
        assert torch.equal(to_cpu(x * torch.tensor(2.0)), a * 2)  # a 0-dim CPU tensor is a scalar
        assert torch.equal(to_cpu(x[torch.tensor([2, 0])]), a[[2, 0]])  # CPU indices
        assert x.sum().item() == pytest.approx(a.sum().item())  # host reads work
        assert x.tolist() == a.tolist()
        assert torch.equal(x.cpu(), a) and type(x.cpu()) is torch.Tensor
        assert sim.ops > 0


def test_model_to_device_keeps_parameter_identity_and_logits():
    model = HfLmGPTForCausalLM(tiny_gpt_config()).eval()
    ids = torch.randint(3, 97, (2, 7))
    with torch.no_grad():
        expected = model(ids).logits
    params = list(model.parameters())
    with simulated_device() as sim:
        model.to(sim.device)
        assert model.device == DEVICE and all(a is b for a, b in zip(params, model.parameters()))
        logits = model(ids.to(model.device)).logits
        torch.testing.assert_close(to_cpu(logits), expected, atol=1e-5, rtol=1e-5)
        with pytest.raises(RuntimeError, match="same device"):
            model(ids)  # a batch left on the CPU


# ----------------------------------------------------------------------------------------------
# The training loop
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(set(LOOP_CASES) - set(COMPILED)))
def test_training_loop_runs_with_the_model_on_the_accelerator(case, tmp_path):
    """Every architecture, objective and data path of `training.train`, trained, evaluated,
    checkpointed and resumed with the model on the simulated accelerator."""
    with simulated_accelerator() as sim:
        metrics = train_module.main(loop_argv(case, tmp_path / "run"))
        check_loop_metrics(metrics, case, resumed=False)
        ops = sim.ops
        assert ops > 100, "the run did not use the simulated device"
        if case not in NOT_RESUMED and case in ("gpt", "gru_tbptt", "bart_denoising"):
            check_loop_metrics(train_module.main(loop_argv(case, tmp_path / "run", resume=True)), case, True)


def test_the_loop_test_catches_a_cpu_tensor_in_the_evaluation(tmp_path, monkeypatch):
    """The regression this suite was written for: evaluation aggregated a CUDA loss with a CPU
    tensor (`torch.tensor(float(len(idx)))`), which crashed every GPU run at its first evaluation."""

    @torch.no_grad()
    def evaluate_as_before(model, blocks, accelerator, batch_size, max_batches=None):
        model.eval()
        n = training.objectives.evaluation.eval_block_count(
            len(blocks["input_ids"]), batch_size, 1, max_batches
        )
        total = torch.zeros(2, dtype=torch.float64, device=accelerator.device)
        for start in range(0, n, batch_size):
            idx = torch.arange(start, min(start + batch_size, n))
            batch = {k: v[idx].to(accelerator.device) for k, v in blocks.items()}
            loss = model(**batch, labels=batch["input_ids"]).loss
            total += torch.stack(
                [loss.double() * len(idx), torch.tensor(float(len(idx)), dtype=torch.float64)]
            )
        model.train()
        mean = (total[0] / total[1]).item()
        return mean, math.exp(mean)

    monkeypatch.setattr(training.objectives.evaluation, "evaluate", evaluate_as_before)
    train_module.main(loop_argv("gpt", tmp_path / "cpu"))  # on a CPU alone the bug is invisible
    with simulated_accelerator(), pytest.raises(RuntimeError, match="same device"):
        train_module.main(loop_argv("gpt", tmp_path / "sim"))


# ----------------------------------------------------------------------------------------------
# Pipelines
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PIPELINE_CASES))
def test_pipelines_run_on_the_accelerator_and_agree_with_the_cpu(name, tmp_path):
    with simulated_device() as sim:
        run_pipeline_case(name, tmp_path, sim.device)
        assert sim.ops > 10


def test_pipeline_outputs_compare_floats_within_tolerance_and_ids_exactly():
    """Pipelines return scores as np.float32: a GPU's last-bit difference is not a failure, while a
    different label, token or offset is (on an H200 this compared np.float32 scores exactly)."""
    cpu = [{"entity": "LABEL_1", "score": np.float32(0.22114019), "index": 1, "start": 0}]
    gpu = [{"entity": "LABEL_1", "score": np.float32(0.22114025), "index": 1, "start": 0}]
    assert _close(gpu, cpu)
    assert not _close([{**gpu[0], "score": np.float32(0.3)}], cpu)
    assert not _close([{**gpu[0], "index": np.int64(2)}], cpu)
    assert not _close([{**gpu[0], "entity": "LABEL_0"}], cpu)


# ----------------------------------------------------------------------------------------------
# The tools: Trainer fine-tuning scripts, the perplexity CLI, the demo
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def trainer_on_the_accelerator(monkeypatch):
    """`Trainer` places the model and batches on the simulated device (as on a GPU machine)."""
    from transformers import TrainingArguments

    setup = TrainingArguments.device
    monkeypatch.setattr(TrainingArguments, "device", property(lambda self: (setup.fget(self), DEVICE)[1]))
    with simulated_accelerator() as sim:
        yield sim


@pytest.mark.parametrize("case", FINETUNE_CASES)
def test_finetuning_scripts_train_and_evaluate_on_the_accelerator(case, tmp_path, trainer_on_the_accelerator):
    # torch's fused AdamW (the Trainer's default) knows real devices only
    run_finetune_case(case, tmp_path, extra=("--optim", "adamw_torch"))
    assert trainer_on_the_accelerator.ops > 100


def test_evaluate_cli_and_demo_on_the_accelerator(tmp_path, monkeypatch):
    import training.demo

    with simulated_accelerator() as sim:
        run_evaluate_cli(tmp_path, "meta", "no")
        monkeypatch.setattr(training.demo, "resolve_device", lambda name: sim.device)
        ops = sim.ops
        run_demo(tmp_path, "no")
        assert sim.ops > ops


# ----------------------------------------------------------------------------------------------
# `make gpu-check` itself
# ----------------------------------------------------------------------------------------------


def _pytest_cuda(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`pytest -m cuda tests/test_cuda.py ARGS` from the repository root, as `make gpu-check` runs it."""
    command = [sys.executable, "-m", "pytest", "-m", "cuda", "tests/test_cuda.py", "-p", "no:cacheprovider"]
    return subprocess.run(
        [*command, *args], cwd=REPO_ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})}
    )


def test_gpu_check_without_cuda_collects_every_case_skips_it_and_says_so(tmp_path):
    """`make gpu-check` on a machine without a GPU: every case is collected and skipped, the run says
    why and exits 0, and writes no table of skipped rows."""
    done = _pytest_cuda("-v", "--gpu-check-dir", str(tmp_path), env={"CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stdout[-3000:]
    skipped = [line.split("[", 1)[1].split("]")[0] for line in done.stdout.splitlines() if " SKIPPED" in line]
    expected = sweep_ids()
    assert len(expected) == 267  # 264 on one GPU, with the 3 DDP runs of two
    assert sorted(skipped) == sorted(expected)
    assert "gpu-check: no CUDA device on this machine, so there is nothing to check" in done.stdout
    assert f"the {len(expected)} cuda tests were skipped" in done.stdout
    assert not list(tmp_path.iterdir())


def test_gpu_check_runs_on_the_cpu_and_writes_the_table(tmp_path):
    """`--gpu-check-device cpu` runs the cases on the CPU (fp16 skipped: autocast needs CUDA there),
    and the table lists every selected case, printed and written as markdown and JSON."""
    picked = "loop/gpt/ or families/gpt/ or pipelines/bert_fill_mask/"
    done = _pytest_cuda("-q", "--gpu-check-device", "cpu", "--gpu-check-dir", str(tmp_path), "-k", picked)
    assert done.returncode == 0, done.stdout[-3000:]
    table = (tmp_path / "summary.md").read_text()
    assert table in done.stdout.replace("\r", "")
    assert table.startswith("# gpu-check on cpu (torch ")
    assert "| loop | gpt | bf16 | pass |" in table and "resumed: step 6" in table
    assert "| families | gpt | fp16 | skipped | 0.0 | fp16 autocast needs CUDA |" in table
    assert table.rstrip().endswith("6 passed, 0 failed, 3 skipped.")
    rows = json.loads((tmp_path / "summary.json").read_text())["rows"]
    assert [(r["group"], r["check"], r["precision"], r["result"]) for r in rows[:3]] == [
        ("loop", "gpt", "fp32", "pass"),
        ("loop", "gpt", "bf16", "pass"),
        ("loop", "gpt", "fp16", "skipped"),
    ]


def test_gpu_check_table_rows_pass_fail_and_skip(tmp_path):
    """A failure is a row with its first line (and the phase, outside the test body); a check's name
    may hold a slash; a test without the cuda mark is no row."""

    class Config:
        rootpath = tmp_path

        def getoption(self, name):
            return {"gpu_check_device": "cpu", "gpu_check_dir": "gpu"}[name]

    def report(test_id, outcome, when="call", longrepr=None, detail=None, cuda=True):
        properties = [(CUDA_MARK, True)] if cuda else []
        properties += [("detail", detail)] if detail else []
        nodeid = f"tests/test_cuda.py::test_x[{test_id}]"
        return pytest.TestReport(
            nodeid, ("", 0, ""), {}, outcome, longrepr, when, user_properties=properties, duration=1.25
        )

    summary = GpuCheckSummary(Config())
    for r in (
        report("families/gpt-causal-lm/compiled_static/fp32", "passed", detail="eager | 1 graph"),
        report("loop/gpt/bf16", "failed", longrepr="AssertionError: loss nan\nthe traceback"),
        report("loop/gpt/fp16", "skipped", "setup", ("f.py", 1, "Skipped: fp16 autocast needs CUDA")),
        report("pipelines/t5_text2text/fp32", "failed", "setup", "RuntimeError: no folder"),
        report("other", "passed", cuda=False),
    ):
        summary.pytest_runtest_logreport(r)
    lines = summary.table().splitlines()
    assert lines[4:] == [
        "| families | gpt-causal-lm/compiled_static | fp32 | pass | 1.2 | eager \\| 1 graph |",
        "| loop | gpt | bf16 | **FAIL** | 0.0 | AssertionError: loss nan |",
        "| loop | gpt | fp16 | skipped | 0.0 | fp16 autocast needs CUDA |",
        "| pipelines | t5_text2text | fp32 | **FAIL** | 0.0 | setup: RuntimeError: no folder |",
        "",
        "1 passed, 2 failed, 1 skipped.",
    ]


def test_fp32_cases_run_without_tf32_whatever_ran_before():
    """On an H100 every fp32 family check failed, 1e-3 off the CPU: the loop checks before them had
    turned TF32 on for the whole process. fp32 cases now run with it off, and the caller's setting
    comes back after each case."""
    seen = []
    saved = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    try:
        torch.set_float32_matmul_precision("high")  # TF32 on, as a run on a GPU leaves it
        torch.backends.cudnn.allow_tf32 = True
        for precision in ("no", "bf16"):
            with matmul_precision_for(precision):
                seen.append(
                    (precision, torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)
                )
                torch.set_float32_matmul_precision("medium")  # a case that changes it (a training run)
                torch.backends.cudnn.allow_tf32 = False
            assert torch.get_float32_matmul_precision() == "high" and torch.backends.cudnn.allow_tf32 is True
        assert seen == [("no", "highest", False), ("bf16", "high", True)]
    finally:
        torch.set_float32_matmul_precision(saved[0])
        torch.backends.cudnn.allow_tf32 = saved[1]


# ----------------------------------------------------------------------------------------------
# Every model class
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", FAMILY_CASES + VARIANT_CASES, ids=str)
def test_every_family_runs_on_the_accelerator_like_on_the_cpu(case):
    """Forward with labels, backward and greedy `generate()` on the device equal the CPU's."""
    with simulated_device() as sim:
        run_family_case(case.name, sim.device)
        assert sim.ops > 10


def test_every_config_variant_runs_on_the_accelerator_like_on_the_cpu():
    """The variants beyond the cases (tests/config_variants.py: imported Llama and BERT, experts with a
    capacity, Mask-Predict's decoding) build their tensors on the model's device: every forward equals
    the CPU's, the searches' tokens are identical."""
    from config_variants import variant_models

    failures = []
    for name, model, _, checks in variant_models():
        with torch.no_grad():
            expected = [
                model(**x) if search is None else model.generate(**x, **search) for x, search in checks
            ]
            try:
                with simulated_device() as sim:
                    model.to(sim.device)
                    for (inputs, search), want in zip(checks, expected):
                        moved = {key: value.to(sim.device) for key, value in inputs.items()}
                        if search is None:
                            got = to_cpu(_main_output(model(**moved)))
                            torch.testing.assert_close(got, _main_output(want), atol=1e-5, rtol=1e-5)
                        else:
                            got = to_cpu(model.generate(**moved, **search))
                            assert torch.equal(got, want), (got.tolist(), want.tolist())
            except (AssertionError, RuntimeError, ValueError) as error:
                failures.append(f"{name}: {type(error).__name__}: {str(error)[:300]}")
    assert not failures, failures
