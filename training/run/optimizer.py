"""The optimizer, its schedule, and the GPU speed settings of the training loop."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import torch
from transformers import get_scheduler

logger = logging.getLogger(__name__)


def optimizer_kwargs(devices) -> dict:
    """AdamW's implementation for parameters on `devices` (an iterable of `torch.device`).

    The fused kernel (one launch updates every parameter; nanoGPT's `configure_optimizers`) when
    every parameter is on a CUDA GPU; otherwise torch's default (foreach on CPU).
    """
    types = {torch.device(d).type for d in devices}
    return {"fused": True} if types == {"cuda"} else {}


def build_optimizer(model, train_args):
    """AdamW decaying the 2-D matrices only; biases and norm gains stay undecayed (nanoGPT).

    Embedding matrices are 2-D and are decayed, as in nanoGPT's `configure_optimizers`. Fused
    (`optimizer_kwargs`) when the model is on a CUDA GPU: build it on its device first. The cosine
    schedule ends at `min_lr_rate` times the peak rate (nanoGPT's min_lr; 0 by default).
    """
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": train_args.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    kwargs = optimizer_kwargs(p.device for p in params)
    logger.info("AdamW: %s.", "fused (CUDA)" if kwargs.get("fused") else "torch's default implementation")
    optimizer = torch.optim.AdamW(
        groups, lr=train_args.learning_rate, betas=(train_args.adam_beta1, train_args.adam_beta2), **kwargs
    )
    return optimizer, build_scheduler(optimizer, train_args)


def build_scheduler(optimizer, train_args):
    """Linear warmup, then the `lr_scheduler` schedule to `max_steps`, from each group's `initial_lr`."""
    name = {"constant": "constant_with_warmup"}.get(train_args.lr_scheduler, train_args.lr_scheduler)
    specific = None
    if name == "cosine" and train_args.min_lr_rate > 0:
        name, specific = "cosine_with_min_lr", {"min_lr_rate": train_args.min_lr_rate}
    return get_scheduler(
        name,
        optimizer,
        num_warmup_steps=train_args.warmup_steps,
        num_training_steps=train_args.max_steps,
        scheduler_specific_kwargs=specific,
    )


def configure_tf32(enabled: bool, device: torch.device) -> bool:
    """Let float32 matrix products (and cuDNN convolutions) run in TF32 on a CUDA device.

    TF32 keeps fp32's range with a 10-bit mantissa: on Ampere and later GPUs fp32 matmuls run on
    tensor cores, several times faster (nanoGPT sets the same flags). A process-wide setting of
    torch; nothing changes on a CPU. Returns whether TF32 is on.
    """
    if not (enabled and torch.device(device).type == "cuda"):
        return False
    torch.backends.cuda.matmul.allow_tf32 = True  # = torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True
    return True


@contextlib.contextmanager
def tf32_restored() -> Iterator[None]:
    """Put torch's process-wide TF32 flags back as they were on leaving the block.

    `configure_tf32` changes a setting of the whole process: a run that leaves it on would make the
    caller's later float32 work TF32 too (a notebook, `make gpu-check`'s fp32 comparisons with
    the CPU, measured 1e-3 apart on an H100 after one run had turned it on).
    """
    matmul, cudnn = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(matmul)
        torch.backends.cudnn.allow_tf32 = cudnn


def compile_model(model: torch.nn.Module, train_args) -> torch.nn.Module:
    """`torch.compile(model)` with the run's backend and mode; the compiled module shares `model`'s
    parameters (its state_dict names carry an `_orig_mod.` prefix: save `model`, never it)."""
    kwargs = {"backend": train_args.torch_compile_backend}
    if train_args.torch_compile_mode is not None:
        kwargs["mode"] = train_args.torch_compile_mode
    return torch.compile(model, **kwargs)
