"""The length-extrapolation benchmark (`benchmarks/length_extrapolation.py`): its scoring and a smoke run."""

import json
import os

import pytest
import torch
from conftest import SHARED_DATA, tiny_gpt_config

from benchmarks import length_extrapolation as bench
from hf_lm import HfLmGPTForCausalLM
from hf_lm.metrics.sliding_window import sliding_window_perplexity

TINY_SHAKESPEARE = os.path.join(SHARED_DATA, "tinyshakespeare", "input.txt")


def test_schemes_are_the_ablation_variants_plus_xpos():
    args = bench.parse_args(["--smoke", "--xpos_scale_base", "32"])
    fields = {name: bench.scheme_variant(name, args).overrides(None, True) for name in bench.SCHEMES}
    assert fields["learned"] == {}  # the ablation runner's baseline: learned positions
    assert fields["none"] == {"position_embedding_type": "none"}
    assert fields["xpos"] == {"position_embedding_type": "xpos", "xpos_scale_base": 32}
    with pytest.raises(SystemExit):
        bench.parse_args(["--schemes", "alibi,bogus"])


@pytest.mark.parametrize("scheme", ["learned", "alibi"])
def test_score_refuses_only_beyond_a_learned_table(scheme, tmp_path):
    """Non-overlapping windows of m x L are scored as `sliding_window_perplexity` with stride =
    window; learned positions refuse windows beyond their table, with the model's own error."""
    model = HfLmGPTForCausalLM(tiny_gpt_config(position_embedding_type=scheme, max_position_embeddings=8))
    model.save_pretrained(tmp_path)
    stream = torch.randint(3, 97, (200,))
    result = bench.score(tmp_path, stream, block_size=8)
    for m in bench.MULTIPLIERS:
        entry = result["lengths"][str(m)]
        if scheme == "learned" and m > 1:
            assert "max_position_embeddings=8" in entry["refuses"]
        else:
            expected = sliding_window_perplexity(model.eval(), stream, 8 * m, stride=8 * m)["perplexity"]
            assert entry["perplexity"] == pytest.approx(expected, rel=1e-6)
    expected = sliding_window_perplexity(model.eval(), stream, 8, stride=4)["perplexity"]
    assert result["sliding"]["perplexity"] == pytest.approx(expected, rel=1e-6)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isfile(TINY_SHAKESPEARE), reason="Tiny Shakespeare not available")
def test_smoke_run(tmp_path):
    """Two schemes trained through `training.train` subprocesses, scored, tabulated and plotted."""
    out = tmp_path / "bench"
    report = bench.main(
        ["--smoke", "--schemes", "learned,alibi", "--data", TINY_SHAKESPEARE, "--output_dir", str(out)]
    )
    rows = {r["scheme"]: r for r in report["schemes"]}
    assert "refuses" in rows["learned"]["lengths"]["8"] and "refuses" not in rows["learned"]["lengths"]["1"]
    assert all("perplexity" in e for e in rows["alibi"]["lengths"].values())
    table = (out / "length_extrapolation.md").read_text()
    assert "| learned | " in table and "refuses" in table and "| alibi | " in table
    assert json.loads((out / "length_extrapolation.json").read_text())["block_size"] == 16
    assert (out / "length_extrapolation.png").stat().st_size > 0
