"""The GPU sweep: every part of hf_lm on the CUDA device present, at tiny size, in fp32, bf16 and
fp16 autocast (the cases are in `tests/gpu_cases.py`).

    make gpu-check                                    # all of them, with a pass/fail table
    pytest -m cuda tests/test_cuda.py -k "loop/ and bf16"
    pytest -m cuda tests/test_cuda.py -k families/gpt-causal-lm/fp32
    pytest -m cuda tests/test_cuda.py --gpu-check-device cpu -k pipelines/   # the same on the CPU

Each test's id is `group/check/precision`; at the end of the run the table of every cuda test
(`tests/gpu_summary.py`) is printed and written to `out/gpu_check/summary.md` (`--gpu-check-dir`).
Without a CUDA device every test is skipped and the run says so. `--gpu-check-device cpu` runs the
cases on the CPU instead (fp16 autocast needs CUDA: skipped there); `tests/test_device_placement.py`
runs them in CPU CI with the model on a simulated accelerator.
"""

from __future__ import annotations

import pytest
import torch
from gpu_cases import (
    FINETUNE_CASES,
    HALF,
    LEADERBOARDS,
    LOOP_CASES,
    PIPELINE_CASES,
    PRECISIONS,
    SHARED_DATA,
    matmul_precision_for,
    run_compiled_static_case,
    run_ddp,
    run_demo,
    run_evaluate_cli,
    run_family_case,
    run_finetune_case,
    run_leaderboard,
    run_loop_case,
    run_pipeline_case,
    run_vocab_projection_case,
)

from hf_lm.testing import FAMILY_CASES, STATIC_CACHE_CASES, VARIANT_CASES

pytestmark = pytest.mark.cuda

PRECISION_IDS = {"no": "fp32", "bf16": "bf16", "fp16": "fp16"}


def cases(group: str, names, precisions: tuple[str, ...] = PRECISIONS) -> list:
    """`(name, precision)` parameters with the ids `group/name/precision` the table reads."""
    return [
        pytest.param(name, precision, id=f"{group}/{name}/{PRECISION_IDS[precision]}")
        for name in names
        for precision in precisions
    ]


@pytest.fixture
def device(request) -> str:
    """The device the case runs on ("cuda", or "cpu" with `--gpu-check-device cpu`), under the
    float32 matmul setting its precision needs (fp32: TF32 off, to compare with the CPU at 1e-4)."""
    device = request.config.getoption("gpu_check_device")
    precision = request.node.callspec.params["precision"]
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device (`--gpu-check-device cpu` runs the case on the CPU)")
    if precision == "fp16" and device != "cuda":
        pytest.skip("fp16 autocast needs CUDA")
    with matmul_precision_for(precision):
        yield device


@pytest.mark.parametrize("case, precision", cases("loop", LOOP_CASES))
def test_loop(case, precision, device, tmp_path, record_property):
    """`training.train` trained, evaluated, checkpointed and resumed two steps further."""
    record_property("detail", run_loop_case(case, tmp_path, precision))


@pytest.mark.parametrize("case, precision", cases("loop", ["ddp_2_processes"]))
def test_ddp(case, precision, device, tmp_path, record_property):
    """Two processes of the loop (`torchrun`), one GPU each."""
    if device != "cuda" or torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    record_property("detail", run_ddp(tmp_path, precision))


@pytest.mark.parametrize("name, precision", cases("families", [c.name for c in FAMILY_CASES + VARIANT_CASES]))
def test_family(name, precision, device, record_property):
    """Forward with labels, backward and `generate()` next to the same weights on the CPU."""
    record_property("detail", run_family_case(name, device, precision))


@pytest.mark.parametrize(
    "name, precision",
    cases("families", [f"{c.name}/compiled_static" for c in STATIC_CACHE_CASES], ("no",)),
)
def test_compiled_static(name, precision, device, record_property):
    """`generate()` compiles the static-cache decoding step in one graph, with the dynamic cache's tokens."""
    record_property("detail", run_compiled_static_case(name.removesuffix("/compiled_static"), device))


@pytest.mark.parametrize("name, precision", cases("families", ["vocab_projection"]))
def test_vocab_projection(name, precision, device, record_property):
    """The LM heads' padded product equals `F.linear`'s logits and gradients."""
    record_property("detail", run_vocab_projection_case(device, precision))


@pytest.mark.parametrize("name, precision", cases("pipelines", PIPELINE_CASES))
def test_pipeline(name, precision, device, tmp_path, record_property):
    """Each pipeline the README lists on the device, against the CPU pipeline's output."""
    record_property("detail", run_pipeline_case(name, tmp_path, device, HALF[precision]))


@pytest.mark.parametrize("name, precision", cases("tools", [f"finetune_{c}" for c in FINETUNE_CASES]))
def test_finetune(name, precision, device, tmp_path, record_property):
    """The `Trainer` fine-tuning scripts, 3 steps from scratch, with `--bf16`/`--fp16`."""
    record_property("detail", run_finetune_case(name.removeprefix("finetune_"), tmp_path, precision))


@pytest.mark.parametrize("name, precision", cases("tools", ["evaluate_cli"]))
def test_evaluate_cli(name, precision, device, tmp_path, record_property):
    record_property("detail", run_evaluate_cli(tmp_path, device, precision))


@pytest.mark.parametrize("name, precision", cases("tools", ["demo"]))
def test_demo(name, precision, device, tmp_path, record_property):
    record_property("detail", run_demo(tmp_path, precision))


@pytest.mark.parametrize("name, precision", cases("leaderboards", LEADERBOARDS, ("no",)))
def test_leaderboard(name, precision, device, tmp_path, record_property):
    """Each leaderboard's and the ablation runner's smoke run, in a process of its own (fp32: the
    leaderboards set their own precision)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"the leaderboards' data ({SHARED_DATA}) is absent")
    record_property("detail", run_leaderboard(name, tmp_path))
