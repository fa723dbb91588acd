"""The plots draw the data they are given: the test reads the saved figure's lines and images back
(`drawn_figures` in conftest.py), since a PNG of empty axes has the same magic bytes."""

import numpy as np
import pytest
import torch
from conftest import tiny_gpt_config

from hf_lm import HfLmGPTForCausalLM
from hf_lm.plots import plot_attention, plot_loss_curves


def test_attention_heatmap_draws_each_heads_probabilities(tmp_path, drawn_figures):
    model = HfLmGPTForCausalLM(tiny_gpt_config()).eval()
    x = torch.randint(3, 97, (1, 6))
    out = model(x, output_attentions=True)
    tokens = [f"t{i}" for i in range(6)]
    path = plot_attention(out.attentions, tokens, tmp_path / "attn.png", layer=-1, heads=[2, 0])
    assert path.stat().st_size > 1000 and path.read_bytes()[:4] == b"\x89PNG"
    (figure,) = drawn_figures
    drawn = [ax for ax in figure.axes if ax.images]
    assert len(drawn) == 2  # one panel per requested head, the spare panels empty
    for ax, head in zip(drawn, [2, 0]):
        expected = out.attentions[-1][0, head].detach().numpy()  # (T, T)
        np.testing.assert_allclose(ax.images[0].get_array(), expected, rtol=1e-6)
        assert ax.get_title() == f"layer 1, head {head}"
        assert [label.get_text() for label in ax.get_xticklabels()] == tokens
    with pytest.raises(ValueError, match="tokens"):
        plot_attention(out.attentions, ["a"], tmp_path / "bad.png")
    with pytest.raises(ValueError, match="output_attentions"):
        plot_attention((), [], tmp_path / "bad.png")


def test_loss_curves_draw_every_series(tmp_path, drawn_figures):
    curves = {"train": ([1, 2, 3], [3.0, 2.0, 1.5]), "eval": ([3], [1.7])}
    path = plot_loss_curves(curves, tmp_path / "loss.png", title="run")
    assert path.stat().st_size > 1000 and path.read_bytes()[:4] == b"\x89PNG"
    (figure,) = drawn_figures
    (ax,) = figure.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert lines.keys() == curves.keys()
    for name, (steps, losses) in curves.items():
        assert list(lines[name].get_xdata()) == steps and list(lines[name].get_ydata()) == losses, name
    assert [text.get_text() for text in ax.get_legend().get_texts()] == list(curves)
    assert ax.get_title() == "run" and ax.get_xlabel() == "step"
