"""Shared fixtures: tiny configs, offline hub, deterministic seeds.

Convergence tests (a loss, BLEU or accuracy bar after training) must pass on any CPU. Another CPU runs
other kernels (MKL's and ATen's code paths differ between Intel and AMD and between vector widths),
which changes the order of floating-point sums and so the whole training trajectory: a seed fixes the
data, not the numbers. Before settling a test's steps and bar, run it under a few seeds and with
other kernels on this machine:

    ATEN_CPU_CAPABILITY=avx2 pytest tests/test_x.py -k name      # also =default (no vectorization)
    MKL_CBWR=COMPATIBLE pytest tests/test_x.py -k name           # MKL's generic matrix products
    ONEDNN_MAX_CPU_ISA=AVX2 pytest tests/test_x.py -k name       # oneDNN capped (bf16, as test_precision)

and keep the bar well clear of the worst result. Where learning is a phase transition (a plateau,
then a drop: copy tasks, attention alignment), train well past the latest drop seen, never to its
edge: tests/test_mask_predict.py's copy task is the example.
"""

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

import hf_lm  # noqa: E402,F401  (registers the Auto classes)
from hf_lm import HfLmGPTConfig  # noqa: E402
from hf_lm.testing import GPT_VARIANTS  # noqa: E402

torch.set_num_threads(1)  # pytest-xdist runs one worker per core

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.path.join(os.path.dirname(REPO_ROOT), "shared", "data")

# For a torchrun script: at the interpreter's exit, say whether this process's group is still alive.
# An entry point must end it (`training.run.processes`): a live gloo group can abort the process at exit.
REPORT_THE_GROUP_AT_EXIT = """
import atexit, sys
import torch.distributed as dist
state = lambda: "alive" if dist.is_initialized() else "ended"
atexit.register(lambda: print(f"process group at exit: {state()}", file=sys.stderr))
"""

# `python script.py MODULE ARGS...` runs MODULE as `python -m MODULE ARGS...` would, and reports
# the group's state at exit
AS_MAIN_REPORTING_THE_GROUP = (
    REPORT_THE_GROUP_AT_EXIT
    + """
import os, runpy
sys.path[0] = os.getcwd()  # as `python -m` puts it, not the script's folder
runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)
"""
)


# two CPU processes of one torchrun launch on this machine (the script and its arguments follow)
TORCHRUN_2 = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def tiny_gpt_config(**overrides) -> HfLmGPTConfig:
    """A 2-layer, 32-wide GPT: big enough to exercise every path, small enough for milliseconds."""
    kwargs = dict(
        vocab_size=97,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    kwargs.update(overrides)
    return HfLmGPTConfig(**kwargs)


# the GPT variant grid (every value of every variant field at least once), defined with the cases
VARIANTS = GPT_VARIANTS


@pytest.fixture(params=sorted(VARIANTS))
def variant_config(request):
    return tiny_gpt_config(**VARIANTS[request.param])


def pytest_addoption(parser):
    group = parser.getgroup("gpu-check", "the cuda tests (`pytest -m cuda`, `make gpu-check`)")
    group.addoption(
        "--gpu-check-device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="Where the cuda tests run: cuda (skipped without a CUDA device) or cpu (the same cases on "
        "the CPU, fp16 skipped; slow).",
    )
    group.addoption(
        "--gpu-check-dir",
        default="out/gpu_check",
        help="Where the cuda tests' pass/fail table goes (summary.md, summary.json), from the repository "
        "root unless absolute (default: %(default)s).",
    )


def pytest_configure(config):
    from gpu_summary import GpuCheckSummary

    config.pluginmanager.register(GpuCheckSummary(config), "gpu_check_summary")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def parameters_after_one_trainer_step(make_model, dataset, tmp_path, **overrides) -> list[torch.Tensor]:
    """All parameters, flattened, after one SGD step of transformers' `Trainer` on the 8 rows of
    `dataset`: first as one batch of 8, then as 2 accumulated micro-batches of 4.

    transformers 5's Trainer passes `num_items_in_batch` and no longer divides by the accumulation
    steps: a head that ignores it gets gradients k times too large, and the two results differ.
    `make_model()` must give the same initial weights each call; `overrides` go to TrainingArguments.
    """
    from transformers import Trainer, TrainingArguments

    finals = []
    for batch_size, accumulation in ((8, 1), (4, 2)):
        torch.manual_seed(0)
        model = make_model()
        settings = dict(
            output_dir=str(tmp_path / f"{batch_size}"),
            per_device_train_batch_size=batch_size,
            gradient_accumulation_steps=accumulation,
            max_steps=1,
            learning_rate=1e-2,
            lr_scheduler_type="constant",
            optim="sgd",
            report_to=[],
            save_strategy="no",
            use_cpu=True,
            dataloader_drop_last=True,
            disable_tqdm=True,
        )
        Trainer(
            model=model, args=TrainingArguments(**{**settings, **overrides}), train_dataset=dataset
        ).train()
        finals.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    return finals


@pytest.fixture
def drawn_figures(monkeypatch) -> list:
    """The matplotlib figures saved during the test, as they were drawn (so a test can check the plotted
    data itself, not only that a PNG exists: a PNG of empty axes has the same magic bytes)."""
    from matplotlib.figure import Figure

    figures, savefig = [], Figure.savefig

    def recording_savefig(self, *args, **kwargs):
        figures.append(self)
        return savefig(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", recording_savefig)
    return figures
