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


def _alignment_matrix(attention, batch_index: int) -> torch.Tensor:
    """A (T_tgt, T_src) matrix from the forms alignment weights come in (see `plot_alignment`)."""
    if isinstance(attention, (tuple, list)):
        if not attention:
            raise ValueError("`attention` is empty: run the model with output_attentions=True.")
        if all(isinstance(step, (tuple, list)) for step in attention):
            # generate(..., output_attentions=True, return_dict_in_generate=True): one tuple per
            # step, each holding the (B, 1, T_src) weights of that step's new token
            attention = torch.cat([step[-1] for step in attention], dim=-2)  # (B, T_tgt, T_src)
        else:
            attention = attention[-1]  # a forward's `cross_attentions`: one tensor per attention layer
    if not torch.is_tensor(attention) or attention.dim() not in (2, 3):
        raise ValueError(
            "`attention` must be a (T_tgt, T_src) or (batch, T_tgt, T_src) tensor, a model output's "
            "`cross_attentions`, or generate()'s `cross_attentions`."
        )
    if attention.dim() == 3:
        if not -attention.shape[0] <= batch_index < attention.shape[0]:
            raise ValueError(
                f"`batch_index` {batch_index} is out of range for a batch of {attention.shape[0]}."
            )
        attention = attention[batch_index]
    return attention.detach().float().cpu()


def plot_alignment(
    attention,
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    path: str | Path,
    batch_index: int = 0,
    title: str = "",
) -> Path:
    """Save an encoder-decoder alignment heatmap: source tokens across, target tokens down.

    The picture of Bahdanau et al. (2015, fig. 3): row t shows where the decoder looked in the
    source while it produced target token t, so a monotone translation is a diagonal and a
    reordering a crossed pattern.

    Args:
        attention: the attention weights, as
            a (T_tgt, T_src) or (B, T_tgt, T_src) tensor;
            a forward's `cross_attentions` (a tuple with one (B, T_tgt, T_src) tensor per attention
            layer; the last is drawn), from `model(..., output_attentions=True)`;
            or generate()'s `cross_attentions` (one tuple per generated token, each holding
            (B, 1, T_src) weights), from greedy or sampled `generate(..., output_attentions=True,
            return_dict_in_generate=True)`. (Beam search's per-step weights follow the running
            beams, not the returned sequences.)
        source_tokens: labels of the columns; fewer than T_src keeps only the first columns (drop
            right padding this way).
        target_tokens: labels of the rows; fewer than T_tgt keeps only the first rows.
        path: where to write the PNG.
        batch_index: which example of a batch to draw.
        title: the figure title.

    Returns:
        The path of the PNG.
    """
    weights = _alignment_matrix(attention, batch_index)  # (T_tgt, T_src)
    n_tgt, n_src = len(target_tokens), len(source_tokens)
    if n_src == 0 or n_tgt == 0:
        raise ValueError("`source_tokens` and `target_tokens` must not be empty.")
    if n_src > weights.shape[1] or n_tgt > weights.shape[0]:
        raise ValueError(
            f"Got {n_tgt} target and {n_src} source tokens for weights over {weights.shape[0]} target "
            f"and {weights.shape[1]} source positions."
        )
    weights = weights[:n_tgt, :n_src]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(3.0, 0.4 * n_src + 1.5), max(3.0, 0.4 * n_tgt + 1.0)))
    image = ax.imshow(weights.numpy(), cmap="Greys", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(n_src), list(source_tokens), rotation=90, fontsize=8)
    ax.set_yticks(range(n_tgt), list(target_tokens), fontsize=8)
    ax.xaxis.tick_top()  # reads like the source sentence above the alignment
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    if title:
        ax.set_title(title)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    logger.info("Wrote alignment heatmap to %s", path)
    return path


def plot_mask_predict(
    trace, tokens: Sequence[Sequence[str]], path: str | Path, batch_index: int = 0, title: str = ""
) -> Path:
    """Save Mask-Predict's refinement of one translation: iterations down, target positions across.

    Each cell is the probability of the token at that position after that iteration (the confidence
    that picks the next iteration's masks), labelled with the token; the tokens re-predicted at an
    iteration (masked at its input) are framed. The picture of Ghazvininejad et al. (2019, fig. 1).

    Args:
        trace: `generate(..., return_dict_in_generate=True)` of a Mask-Predict head: its
            `iteration_log_probs` and `iteration_masked` ((I, B, L) each) and `lengths` are read.
        tokens: the token strings, one list per iteration (the row's real positions).
        path: where to write the PNG.
        batch_index: which example of the batch.
        title: the figure title.
    """
    length = int(trace.lengths[batch_index])
    probs = trace.iteration_log_probs[:, batch_index, :length].detach().float().exp().cpu()  # (I, L)
    masked = trace.iteration_masked[:, batch_index, :length].cpu()
    if len(tokens) != probs.shape[0] or any(len(row) != length for row in tokens):
        raise ValueError(f"`tokens` must hold {probs.shape[0]} rows of {length} tokens (one per iteration).")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * length + 1.5), max(2.0, 0.6 * probs.shape[0] + 1.2)))
    image = ax.imshow(probs.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    for t, row in enumerate(tokens):
        for i, token in enumerate(row):
            ax.text(
                i,
                t,
                token,
                ha="center",
                va="center",
                fontsize=7,
                color="white" if probs[t, i] < 0.6 else "black",
            )
            if masked[t, i]:
                ax.add_patch(
                    plt.Rectangle((i - 0.5, t - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.5)
                )
    ax.set_yticks(range(probs.shape[0]), [f"t = {t}" for t in range(probs.shape[0])])
    ax.set_xticks(range(length), [str(i) for i in range(length)], fontsize=7)
    ax.set_xlabel("target position (red frame: masked and re-predicted at this iteration)")
    if title:
        ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="p(token)")
    return _save_figure(plt, fig, path, "the Mask-Predict trace")


def _save_figure(plt, fig, path: str | Path, what: str) -> Path:
    """Lay out `fig`, write it as a PNG at `path` (its folder made), close it; returns the path."""
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    logger.info("Wrote %s to %s", what, path)
    return path
