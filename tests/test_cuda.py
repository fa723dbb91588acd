"""The GPU sweep as tests: they run only where CUDA is (`pytest -m cuda`), and skip cleanly elsewhere.

`make gpu-check` runs the same checks with a pass/fail table; these let `pytest` select and debug one.
"""

from __future__ import annotations

import pytest
import torch

from training import gpu_check

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA GPU (run `make gpu-check` on one)"
    ),
]
PRECISIONS = ("no", "bf16", "fp16")


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", sorted(gpu_check.LOOP_CASES))
def test_training_loop_on_cuda(case, precision, tmp_path):
    gpu_check.run_loop_case(case, tmp_path, precision)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", sorted(gpu_check.PIPELINE_CASES))
def test_pipeline_on_cuda(name, precision, tmp_path):
    dtype = {"no": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    gpu_check.run_pipeline_case(name, tmp_path, 0, dtype)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", gpu_check.FINETUNE_CASES)
def test_finetuning_on_cuda(case, precision, tmp_path):
    gpu_check.run_finetune_case(case, tmp_path, precision)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_evaluate_cli_and_demo_on_cuda(precision, tmp_path):
    gpu_check.run_evaluate_cli(tmp_path, "cuda", precision)
    gpu_check.run_demo(tmp_path, precision)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_vocab_projection_pads_its_product_on_cuda(precision):
    gpu_check.run_vocab_projection_case("cuda", precision)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_ddp_two_processes(tmp_path):
    gpu_check.run_ddp(tmp_path, "bf16")
