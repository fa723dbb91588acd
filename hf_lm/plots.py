"""Pictures that beat tables: attention heatmaps and loss curves (matplotlib, headless)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import torch

logger = logging.getLogger(__name__)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    return plt


def plot_attention(
    attentions: Sequence[torch.Tensor],
    tokens: Sequence[str],
    path: str | Path,
    layer: int = -1,
    heads: Sequence[int] | None = None,
    batch_index: int = 0,
) -> Path:
    """Save heatmaps of attention probabilities, one panel per head.

    Args:
        attentions: `outputs.attentions` from a forward with `output_attentions=True`:
            one (B, nh, T, T) tensor per layer.
        tokens: the T token strings labelling rows (queries) and columns (keys).
        path: where to write the PNG.
        layer: which layer to draw (negative counts from the end).
        heads: which heads (default: all).
    """
    if not attentions:
        raise ValueError("`attentions` is empty: run the model with output_attentions=True.")
    if not -len(attentions) <= layer < len(attentions):
        raise ValueError(f"`layer` must be in [-{len(attentions)}, {len(attentions)}), got {layer}.")
    probs = attentions[layer][batch_index].detach().float().cpu()  # (nh, T, T)
    if probs.shape[-1] != len(tokens):
        raise ValueError(f"Got {len(tokens)} tokens for attention over {probs.shape[-1]} positions.")
    heads = list(range(probs.shape[0])) if heads is None else list(heads)
    plt = _pyplot()
    cols = min(4, len(heads))
    rows = (len(heads) + cols - 1) // cols
    size = max(3.0, 0.35 * len(tokens))
    fig, axes = plt.subplots(rows, cols, figsize=(size * cols, size * rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, h in zip(axes.flat, heads):
        ax.axis("on")
        ax.imshow(probs[h].numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
        ax.set_title(f"layer {layer % len(attentions)}, head {h}")
        ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=7)
        ax.set_yticks(range(len(tokens)), tokens, fontsize=7)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    logger.info("Wrote attention heatmap to %s", path)
    return path


def plot_loss_curves(
    curves: dict[str, tuple[Sequence[float], Sequence[float]]], path: str | Path, title: str = ""
) -> Path:
    """Save loss curves: `{"train": (steps, losses), "eval": (steps, losses)}` to a PNG."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, (steps, losses) in curves.items():
        ax.plot(list(steps), list(losses), label=name, marker="o" if len(steps) < 30 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
