"""The speed suite (benchmarks/suite.py) and its FLOP accounting (benchmarks/peak_flops.py).

The FLOP counter is checked against a count derived by hand (exact, not within a tolerance): for a
decoder-only Transformer, one forward + backward is 6 N B T + 14 L d B T^2 with fused attention
(whose backward recomputes the scores: 5 matmuls against 4 in the forward's 2 x 2) and
6 N B T + 12 L d B T^2 with eager attention, N the weights inside matmuls (lm head included).
"""

import ast
import importlib
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import REPO_ROOT, VARIANTS, tiny_gpt_config
from transformers import LlamaForCausalLM

from benchmarks import bench_gpt, suite
from benchmarks.pairs import random_ids
from benchmarks.peak_flops import (
    analytic_decoder_train_flops,
    count_flops,
    count_train_step_flops,
    measure_peak_flops,
)
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


def test_bench_gpt_builds_an_identical_llama_pair():
    args = bench_gpt.parse_args(
        "--family llama --layers 2 --hidden 64 --heads 4 --context 32 --vocab 300 --seq 16 --new-tokens 8".split()
    )
    assert (args.intermediate, args.kv_heads, args.output) == (192, 2, "out/bench_llama.json")
    models = bench_gpt.build_pair(args)
    assert isinstance(models["transformers"], LlamaForCausalLM)
    config = models["hf_lm"].config
    assert (config.position_embedding_type, config.norm_type, config.hidden_act) == (
        "rope",
        "rmsnorm",
        "swiglu",
    )
    assert (config.num_key_value_heads, config.tie_word_embeddings) == (2, False)
    check = bench_gpt.sanity(models, args)
    assert check["max_abs_logit_diff"] < 1e-5
    assert check["greedy_32_token_agreement"] == 1.0
    flops = bench_gpt.count_flops(models, random_ids(2, 16, 300, 0))
    assert flops["hf_lm"]["total"] == flops["transformers"]["total"] > 0
    gpt2 = bench_gpt.parse_args(["--hidden", "64", "--heads", "4"])
    assert (gpt2.family, gpt2.intermediate, gpt2.output) == ("gpt2", 256, "out/bench_gpt.json")


def _record(family: str, ratio_gen: float = 1.1) -> dict:
    rec = {
        "family": family,
        "params": 1_000_000,
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
        ],
        "step_s": {"hf_lm": 0.5, "transformers": 0.55},
        "flops_per_step": {"hf_lm": 1e9, "transformers": 2e9},
        "max_cpu_pressure_share": 0.0,
    }
    suite.add_utilization(rec, peak_flops=8e9)
    return rec


def test_tables_show_every_family_and_failures_without_crashing():
    families = {f: _record(f) for f in ("gpt2", "llama", "bert")}
    families["t5"] = {"family": "t5", "error": "exit status 1: t5: losses disagree by more than 0.0001"}
    families["bart"] = {"family": "bart", "error": "timed out after 300s"}
    # MFU credits every side with the reference's FLOPs: 2e9 / 0.5 s / 8e9 = 50%; HFU its own: 25%
    assert families["gpt2"]["mfu"]["hf_lm"] == pytest.approx(0.5)
    assert families["gpt2"]["hfu"]["hf_lm"] == pytest.approx(0.25)
    env = {k: "x" for k in ("cpu_model", "cpu_capability", "torch", "transformers", "python")}
    env.update(threads=1, cores_available=2)
    run = {
        "mode": "smoke",
        "date": "today",
        "git": "abc",
        "environment": env,
        "peak": {"error": "exit status 1"},
        "families": families,
        "compile": {"error": "BackendCompilerFailed: no C++ compiler"},
    }
    md = suite.render_markdown(run)
    summary = md.split("## Details")[0]
    for family in suite.FAMILIES:
        assert f"| {family} | {suite.REFERENCES[family]} |" in summary
    assert "| 1.100 | B=1 1.100 | 50.0% |" in summary
    assert "failed: timed out after 300s" in summary and "losses disagree" in summary
    assert "failed: BackendCompilerFailed: no C++ compiler" in md
    assert "peak probe failed" in md


def test_run_process_reports_failures_and_timeouts(tmp_path):
    ok = suite.run_process([sys.executable, "-c", "print('fine')"], tmp_path / "ok.log", timeout=60)
    assert ok["error"] is None and "fine" in (tmp_path / "ok.log").read_text()
    bad = suite.run_process(
        [sys.executable, "-c", "raise ValueError('broken config')"], tmp_path / "bad.log", timeout=60
    )
    assert bad["error"].startswith("exit status 1") and "ValueError: broken config" in bad["error"]
    slow = suite.run_process(
        [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "slow.log", timeout=1
    )
    assert slow["error"] == "timed out after 1s" and slow["wall_s"] < 30


@pytest.mark.slow
def test_smoke_suite_writes_every_family_with_finite_ratios(tmp_path):
    out = tmp_path / "suite"
    cmd = [sys.executable, "-m", "benchmarks.suite", "--smoke", "--threads", "1", "--output_dir", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    md = (out / "suite.md").read_text()
    report = json.loads((out / "suite.json").read_text())
    assert report["peak"]["peak_flops"] > 0
    env = report["environment"]
    assert env["threads"] == 1 and env["torch"] and env["transformers"] and env["cpu_model"]
    summary = md.split("## Details")[0]
    for family in suite.FAMILIES:
        assert f"| {family} | {suite.REFERENCES[family]} |" in summary
        rec = report["families"][family]
        assert "error" not in rec, rec
        ratios = [rec["train"]["ratio"]] + [g["ratio"] for g in rec["generate"]]
        assert all(math.isfinite(r) and r > 0 for r in ratios), ratios
        assert all(0 < rec["mfu"][side] < 2 for side in suite.SIDES), rec["mfu"]
        assert (out / f"bench_{family}.json").exists()
    assert len(report["families"]["t5"]["generate"]) == 4  # greedy and beam, batch 1 and 2
    # torch.compile: a finite speed-up where it works, a reason where it does not
    phases = report["compile"].get("phases", {})
    assert set(phases) == {"train", "forward"} or report["compile"].get("error")
    for phase in phases.values():
        assert phase.get("error") or (math.isfinite(phase["speedup"]) and phase["speedup"] > 0)
    assert "## torch.compile (CPU, aot_eager)" in md  # the smoke run skips inductor's code generation


# --------------------------------------------------------------------------------------------
# The package: every script runs as `python -m benchmarks.<script>`, sharing only the shared modules
# --------------------------------------------------------------------------------------------

SHARED_MODULES = {"benchmarks.bench_common", "benchmarks.pairs", "benchmarks.peak_flops"}
# a runner that writes its READMEs through the renderer
BUILT_ON = {"leaderboard": {"benchmarks.render"}}
SCRIPTS = sorted(
    p.stem
    for p in (Path(REPO_ROOT) / "benchmarks").glob("*.py")
    if p.stem not in ("__init__", "bench_common", "pairs")
)


def package_imports(path: Path) -> set[str]:
    """The `benchmarks...` modules a file imports (`from benchmarks import x` counts as benchmarks.x)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("benchmarks"):
            if node.module == "benchmarks":
                found |= {f"benchmarks.{alias.name}" for alias in node.names}
            else:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("benchmarks")}
    return found


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_import_only_the_shared_modules_and_leave_sys_path_alone(script):
    path = Path(REPO_ROOT) / "benchmarks" / f"{script}.py"
    allowed = SHARED_MODULES | BUILT_ON.get(script, set())
    assert package_imports(path) <= allowed - {f"benchmarks.{script}"}, package_imports(path)
    assert "sys.path" not in path.read_text()
    before = list(sys.path)
    module = importlib.import_module(f"benchmarks.{script}")
    assert sys.path == before and callable(module.main)


def test_a_script_runs_as_a_module_from_the_repository_root():
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.peak_flops", "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "--sizes" in proc.stdout, proc.stderr[-2000:]
