"""The speed runner (benchmarks/speed.py, its entries) and its FLOP accounting (benchmarks/measure.py).

The FLOP counter is checked against a count derived by hand (exact, not within a tolerance): for a
decoder-only Transformer, one forward + backward is 6 N B T + 14 L d B T^2 with fused attention
(whose backward recomputes the scores: 5 matmuls against 4 in the forward's 2 x 2) and
6 N B T + 12 L d B T^2 with eager attention, N the weights inside matmuls (lm head included).
"""

import gc
import json
import math
import sys
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from conftest import VARIANTS, tiny_gpt_config
from transformers import LlamaForCausalLM

from benchmarks import measure, speed, speed_entries, speed_workloads
from benchmarks.measure import (
    analytic_decoder_train_flops,
    count_flops,
    count_train_step_flops,
    measure_peak_flops,
    run_process,
)
from benchmarks.render import rendered
from hf_lm import HfLmGPTForCausalLM


def matmul_params(model) -> int:
    """Weights that enter a matmul: every 2-D parameter but the lookup tables, the lm head once
    more when it is tied (it is then not a parameter of its own)."""
    n = sum(
        p.numel()
        for name, p in model.named_parameters()
        if p.dim() == 2 and "embed_tokens" not in name and "positions" not in name
    )
    if model.config.tie_word_embeddings:
        n += model.lm_head.weight.numel()
    return n


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("variant", ["gpt2", "llama", "rope_headdim"])
def test_train_step_flops_equal_the_analytic_count(attn, variant):
    config = tiny_gpt_config(**VARIANTS[variant])
    model = HfLmGPTForCausalLM._from_config(config, attn_implementation=attn)
    B, T = 3, 20
    ids = torch.randint(3, config.vocab_size, (B, T))
    counted = count_train_step_flops(model, {"input_ids": ids, "labels": ids})
    attention_width = config.num_attention_heads * config.head_dim  # d in 14 L d T^2
    expected = analytic_decoder_train_flops(
        matmul_params(model), config.num_hidden_layers, attention_width, B, T, fused_attention=attn == "sdpa"
    )
    assert counted["total"] == expected, counted["by_op"]
    assert counted["total"] > 6 * matmul_params(model) * B * T  # attention is counted, not zero
    assert all(p.grad is None for p in model.parameters())  # the count leaves no trace


def test_cpu_fused_attention_is_counted():
    """F.scaled_dot_product_attention runs a CPU-only kernel torch's counter has no formula for."""
    B, H, T, D = 2, 4, 16, 8
    q, k, v = (torch.randn(B, H, T, D) for _ in range(3))
    counted = count_flops(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert counted["total"] == 2 * (2 * B * H * T * T * D)  # Q K^T and (scores) V, full T x T


def test_peak_probe_returns_a_positive_rate():
    result = measure_peak_flops(sizes=(64, 128), repeats=2, min_time=0.01)
    assert math.isfinite(result["peak_flops"]) and result["peak_flops"] > 0
    assert result["best_size"] in (64, 128)
    assert result["peak_flops"] == max(v["flops"] for v in result["by_size"].values())
    with pytest.raises(ValueError, match="sizes"):
        measure_peak_flops(sizes=())


def options(name: str, **changes) -> SimpleNamespace:
    """An entry's smoke options, with `changes`."""
    return SimpleNamespace(**{**speed.entry_options(name, True, {"threads": 1}, {}), **changes})


def test_the_llama_pair_computes_one_function_and_counts_the_same_flops():
    o = options("llama", context=32, vocab=300, seq=16, new_tokens=8)
    assert (o.intermediate, o.kv_heads) == (192, 2)
    models = {side: speed_entries.build_side("llama", side, o) for side in ("hf_lm", "transformers")}
    assert isinstance(models["transformers"], LlamaForCausalLM)
    config = models["hf_lm"].config
    assert (config.position_embedding_type, config.norm_type, config.hidden_act) == (
        "rope",
        "rmsnorm",
        "swiglu",
    )
    assert (config.num_key_value_heads, config.tie_word_embeddings) == (2, False)
    check = speed_entries.sanity("llama", o)
    assert check["ok"] and check["max_abs_logit_diff"] < 1e-5 and check["greedy_token_agreement"] == 1.0
    batch = speed_entries.train_batch("llama", o)[0]
    flops = {side: count_train_step_flops(m, batch)["total"] for side, m in models.items()}
    assert flops["hf_lm"] == flops["transformers"] > 0


@pytest.fixture
def no_gc(monkeypatch):
    """The timing loops collect garbage before every sample, which costs a second in a test process."""
    monkeypatch.setattr(gc, "collect", lambda *args: 0)


def test_a_seq2seq_pair_is_timed_with_greedy_and_beam_generation(no_gc):
    sizes = dict(
        layers=1, hidden=32, heads=2, intermediate=64, vocab=100, source_len=8, target_len=4, new_tokens=2
    )
    o = options("t5", rounds=1, warmup=0, train_reps=1, no_memory=True, **sizes)
    data = speed_entries.run_pair(o)
    assert data["sanity"]["ok"] and data["sanity"]["beam_token_agreement"] == 1.0
    assert [g["short"] for g in data["generate"]] == ["greedy B=1", "greedy B=2", "beam 2 B=1", "beam 2 B=2"]
    assert all(math.isfinite(row["ratio"]) and row["ratio"] > 0 for row in [data["train"], *data["generate"]])
    assert (
        data["step_s"]["hf_lm"] > 0
        and data["flops_per_step"]["hf_lm"] == data["flops_per_step"]["transformers"]
    )


def _record(ratio_gen: float = 1.1) -> dict:
    return {
        "reference": "transformers.X",
        "params": 1_000_000,
        "sanity": {"ok": True},
        "train": {"name": "train", "unit": "tok/s", "hf_lm": 110.0, "transformers": 100.0, "ratio": 1.1},
        "generate": [
            {
                "name": "gen B=1",
                "short": "B=1",
                "unit": "new tok/s",
                "hf_lm": 11.0,
                "transformers": 10.0,
                "ratio": ratio_gen,
            }
        ],  # fmt: skip
        "step_s": {"hf_lm": 0.5, "transformers": 0.55},
        "flops_per_step": {"hf_lm": 1e9, "transformers": 2e9},
        "max_cpu_pressure_share": 0.0,
    }


def test_the_suite_tables_show_every_family_mfu_and_failures():
    entries = {"peak": {"peak_flops": 8e9, "dtype": "float32", "device": "cpu", "device_name": None, "best_size": 64, "threads": 1, "by_size": {}}}  # fmt: skip
    entries |= {f: _record() for f in ("gpt2", "llama", "bert")}
    entries["t5"] = {"error": "exit status 1: t5: the sides disagree by more than 0.0001"}
    entries["bart"] = {"error": "timed out after 300s"}
    entries["compile"] = {"error": "BackendCompilerFailed: no C++ compiler"}
    # MFU credits every side with the reference's FLOPs: 2e9 / 0.5 s / 8e9 = 50%; HFU its own: 25%
    use = speed_entries.utilization(entries["gpt2"], 8e9)
    assert use["mfu"]["hf_lm"] == pytest.approx(0.5) and use["hfu"]["hf_lm"] == pytest.approx(0.25)
    result = {"kind": "speed", "command": "python -m benchmarks.speed", "entries": entries, "mode": "smoke"}
    md = "\n".join(speed.markdown(result, None))
    summary = md.split("## Details")[0]
    for family, reference in speed_entries.REFERENCES.items():
        assert f"| {family} | {reference} |" in summary
    assert "| 1.100 | B=1 1.100 | 50.0% |" in summary
    assert "failed: timed out after 300s" in summary and "sides disagree" in summary
    assert "Failed: BackendCompilerFailed: no C++ compiler" in md and "8.0 GFLOP/s" in md


def test_run_process_reports_failures_and_timeouts(tmp_path):
    ok = run_process([sys.executable, "-c", "print('fine')"], tmp_path / "ok.log", timeout=60)
    assert ok["error"] is None and "fine" in (tmp_path / "ok.log").read_text()
    bad = run_process(
        [sys.executable, "-c", "raise ValueError('broken config')"], tmp_path / "bad.log", timeout=60
    )
    assert bad["error"].startswith("exit status 1") and "ValueError: broken config" in bad["error"]
    slow = run_process(
        [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "slow.log", timeout=1
    )
    assert slow["error"] == "timed out after 1s" and slow["wall_s"] < 30


def test_options_come_from_the_entry_then_smoke_then_flags_then_set(capsys):
    o = speed.entry_options("sparse", True, {"threads": 3}, {"contexts": "64,96", "window": "8"})
    assert (o["contexts"], o["window"], o["threads"], o["rounds"]) == ([64, 96], 8, 3, 1)
    assert measure.typed("false", True) is False and measure.typed("0.5", 1.0) == 0.5
    assert measure.typed("8,16", [1]) == [8, 16] and measure.typed("none", "x") == "none"
    assert measure.typed("2", None) == 2 and isinstance(measure.typed("2", None), int)
    with pytest.raises(ValueError, match="true or false"):  # a switch never becomes None
        measure.typed("none", False)
    for name, entry in speed_entries.ENTRIES.items():  # a smoke option the entry does not have is a typo
        assert set(entry.smoke) <= set(entry.options) | set(speed.COMMON), name
    with pytest.raises(SystemExit):
        speed.parse_args(["--entries", "sparse", "--set", "no_such_option=1"])
    with pytest.raises(SystemExit):
        speed.parse_args(["--entries", "gpt3"])
    speed.main(["--list", "--smoke", "--entries", "sparse", "--set", "window=8"])  # what would run
    assert str(speed.entry_options("sparse", True, {}, {"window": "8"})) in capsys.readouterr().out
    # a smoke run's default folder is its own: it must not overwrite a full run's results
    assert (speed.parse_args([]).output_dir, speed.parse_args(["--smoke"]).output_dir) == (
        "out/speed",
        "out/speed_smoke",
    )


@pytest.mark.parametrize(
    "bad, says",
    [("--set rounds=abc", "--set rounds=abc"), ("--set no_memory=maybe", "--set no_memory=maybe"),
     ("--set rounds", "--set rounds="), ("--threads 0", "--threads"), ("--set threads=-1", "--threads"),
     ("--set threads=none", "--threads")],
)  # fmt: skip
def test_a_bad_value_is_refused_by_name_before_any_entry_runs(bad, says, capsys):
    with pytest.raises(SystemExit):
        speed.parse_args(["--entries", "peak,gpt2", *bad.split()])
    assert says in capsys.readouterr().err
    args = speed.parse_args(["--entries", "gpt2", "--set", "threads=1"])  # as --threads 1: the README's too
    assert args.common["threads"] == 1


def test_the_readme_reports_the_threads_the_entries_ran_with(tmp_path, monkeypatch):
    """serve runs with 1 thread of its own; the README said the default count (2 here, or more)."""
    monkeypatch.setattr(
        speed, "run_in_process", lambda name, o, out, timeout: {"options": o, "error": "stub"}
    )
    for entries, threads in (("serve", 1), ("cleaning,serve", f"1/{speed.COMMON['threads']}")):
        speed.main(["--entries", entries, "--output_dir", str(tmp_path)])
        result = json.loads((tmp_path / "results.json").read_text())
        assert result["environment"]["threads"] == (1 if speed.COMMON["threads"] == 1 else threads)
        assert f", {result['environment']['threads']} threads," in (tmp_path / "README.md").read_text()


def test_sparse_decoding_keeps_a_window_of_keys_and_the_same_tokens(no_gc):
    o = options("sparse", contexts=[40, 80], window=8, new_tokens=3, layers=1, hidden=32, heads=2, vocab=64)
    data = speed_workloads.run_sparse(o)
    assert data["sanity_sliding_equals_full_cache"]
    for row in data["rows"]:
        assert (row["band_cache_tokens"], row["dense_cache_tokens"]) == (8, row["context"] + 3)
        assert row["cache_ratio"] == pytest.approx(8 / (row["context"] + 3))


@pytest.mark.slow
def test_the_runner_writes_results_and_their_readme(tmp_path):
    """End to end: an entry in its own process, results.json, README.md its rendering."""
    out = tmp_path / "speed"
    argv = ["--entries", "gpt2", "--smoke", "--threads", "1", "--no_memory", "--output_dir", str(out)]
    assert speed.main([*argv, "--set", "rounds=1"]) == 0
    result = json.loads((out / "results.json").read_text())
    assert result["kind"] == "speed" and result["environment"]["threads"] == 1
    rec = result["entries"]["gpt2"]
    assert "error" not in rec and rec["options"]["rounds"] == 1, rec
    assert all(math.isfinite(r["ratio"]) and r["ratio"] > 0 for r in [rec["train"], *rec["generate"]])
    assert rec["flops_per_step"]["hf_lm"] == rec["flops_per_step"]["transformers"] > 0
    md = (out / "README.md").read_text()
    assert md == rendered(out) and "| gpt2 | GPT2LMHeadModel |" in md and "## gpt2: hf_lm against" in md
