import pytest
import torch
from conftest import tiny_gpt_config

from hf_lm import HfLmGPTForCausalLM
from hf_lm.plots import plot_attention, plot_loss_curves


def test_attention_heatmap_from_output_attentions(tmp_path):
    model = HfLmGPTForCausalLM(tiny_gpt_config()).eval()
    x = torch.randint(3, 97, (1, 6))
    out = model(x, output_attentions=True)
    path = plot_attention(out.attentions, [f"t{i}" for i in range(6)], tmp_path / "attn.png", layer=-1)
    assert path.stat().st_size > 1000 and path.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="tokens"):
        plot_attention(out.attentions, ["a"], tmp_path / "bad.png")
    with pytest.raises(ValueError, match="output_attentions"):
        plot_attention((), [], tmp_path / "bad.png")


def test_loss_curve_png(tmp_path):
    path = plot_loss_curves(
        {"train": ([1, 2, 3], [3.0, 2.0, 1.5]), "eval": ([3], [1.7])}, tmp_path / "loss.png"
    )
    assert path.read_bytes()[:4] == b"\x89PNG"
