"""benchmarks.gpu, checked on the CPU: its measurements at smoke size (every row really taken, the
compiled and static-cache paths included), the pieces they are built from, the entries under a
budget (timeouts, skips, what each entry's reader reads back), and real entries end to end."""

from __future__ import annotations

import json
import logging
import math
import subprocess
import time
from types import SimpleNamespace

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from benchmarks import gpu, gpu_entries, measure, render
from benchmarks.gpu_entries import DECODE_ROWS, ENTRIES, GPT_IMPLS, SECTIONS, TARGETS
from benchmarks.measure import analytic_decoder_train_flops, measure_peak_flops
from training.args import parse_args

SMOKE = ["--smoke", "--device", "cpu", "--threads", "1"]


def _rows(folder) -> tuple[dict, dict]:
    result = json.loads((folder / "results.json").read_text())
    (m,) = result["measurements"]
    return m, {row["id"]: row for row in m["rows"]}


@pytest.mark.slow
def test_the_measurements_at_smoke_size(tmp_path):
    """GPT-2 training (eager and compiled), the head + loss, greedy and sampled decoding at B=1: every
    row measured, Dynamo really traced, the tokens identical; the README is the rendering of the JSON."""
    argv = [
        "--measure",
        "head_loss,decode",
        *SMOKE,
        "--set",
        "decode_batches=1",
        "--output_dir",
        str(tmp_path),
    ]
    assert gpu.main(argv) == 0
    m, rows = _rows(tmp_path)
    assert m["sections"] == ["gpt_train", "head_loss", "decode"] and m["finished"] and m["checks_ok"]
    assert [r for r in rows if r.startswith("gpt2_decode_b")] == [f"gpt2_decode_b1/{k}" for k in DECODE_ROWS]
    assert len(rows) == 7 + 4 + 8 and m["compile_backend"] == "eager"
    for row in rows.values():
        assert row["status"] == "ok" and math.isfinite(row["value"]) and row["value"] > 0, row
        assert len(row["samples_s"]) == 2
    for impl in GPT_IMPLS:
        compiled = rows[f"gpt2_train/{impl}/compiled"]
        assert compiled["dynamo_first_call"]["graphs"] >= 1 and compiled["optimizer"].startswith("AdamW(")
    for key in ("hf_lm/eager", "hf_lm_unpadded/eager", "hf_lm/compiled", "transformers/eager"):
        head = rows[f"gpt2_head_loss/{key}"]
        assert head["share_of_step"] > 0 and head["step_median_s"] == rows[f"gpt2_train/{key}"]["median_s"]
    for key in DECODE_ROWS:
        row, static, compiled = rows[f"gpt2_decode_b1/{key}"], "/static" in key, "compiled" in key
        assert row.get("tokens_identical_to_dynamic", static) is static, key
        assert row.get("compiled", compiled) is compiled, key
    # the FLOP count of the reference is the fused-attention closed form; MFU uses PaLM's (12 L d T^2)
    s, flops = m["settings"], m["gpt_flops"]
    ref = GPT2LMHeadModel(GPT2Config(n_embd=s["gpt_hidden"], n_layer=s["gpt_layers"], n_head=s["gpt_heads"],
                                     vocab_size=s["gpt_vocab"], n_positions=s["gpt_context"]))  # fmt: skip
    assert flops["model_flops_per_step"] == gpu.gpt_model_flops(ref, s["gpt_batch"], s["gpt_seq"])
    B, T, L, d = s["gpt_batch"], s["gpt_seq"], s["gpt_layers"], s["gpt_hidden"]
    n = (flops["model_flops_per_step"] - 12 * L * d * B * T**2) // (6 * B * T)
    assert flops["counted_flops_per_step"] == analytic_decoder_train_flops(
        n, L, d, B, T, fused_attention=True
    )
    assert set(m["checks"]) == {"gpt2_logits", "decode_b1_tokens"}
    assert [t["key"] for t in m["targets"]] == [t["key"] for t in TARGETS]
    assert all(t["measured"] is not None for t in m["targets"])
    assert m["peak"]["peak_flops"] > 0 and m["peak"]["dtype"] == "bfloat16"
    readme = (tmp_path / "README.md").read_text()
    assert readme == render.rendered(tmp_path)
    assert all(t["text"] in readme for t in TARGETS) and readme.count("| GPT-2 decoding B=1 |") == 8
    # the compiled decoding rows' profile: the host's time found in generate()'s parts
    assert sorted(m["decode_profile"]["rows"]) == [
        "gpt2_decode_b1/hf_lm/static_compiled",
        "gpt2_decode_b1/hf_lm/static_compiled_loop",
        "gpt2_decode_b1/transformers/static_compiled",
    ]
    for row_id, p in m["decode_profile"]["rows"].items():
        assert 0 < p["host_share"]["compiled forward"] < 1
        prepare = p["host_share"]["prepare_inputs_for_generation"]
        assert prepare is None if row_id.endswith("_loop") else 0 < prepare < 1  # static_decode prepares once
    assert (tmp_path / "profile_gpt2_hf_lm_train.txt").is_file() and (
        tmp_path / "profile_gpt2_decode_b1.txt"
    ).is_file()


def test_encoders_at_smoke_size(tmp_path):
    """BERT (dense and sparse prediction) and T5 against their references, eager."""
    assert (
        gpu.main(["--measure", "encoders", *SMOKE, "--set", "rounds=1", "--output_dir", str(tmp_path)]) == 0
    )
    m, rows = _rows(tmp_path)
    assert set(m["checks"]) == {"bert_logits", "t5_logits"} and m["checks_ok"]
    for row_id, row in rows.items():
        assert row["status"] == "ok" and row["value"] > 0 and row["mfu"] > 0, row_id
    assert len(rows) == 5


def test_decode_writes_each_batch_size_before_the_next(tmp_path, monkeypatch):
    """A decode entry stopped while it compiles batch 8 must leave batch 1's rows and token check."""
    on_disk = {}
    real_time_group = gpu.time_group

    class TimeLimit(BaseException):  # as the kill: not an `Exception` a failing row is caught as
        pass

    def spy(rows, fns, *args, **kwargs):
        if any(row_id.startswith("gpt2_decode_b8/") for row_id in fns):  # batch 8 is about to start
            on_disk.update(json.loads((tmp_path / "results.json").read_text())["measurements"][0])
            raise TimeLimit
        return real_time_group(rows, fns, *args, **kwargs)

    monkeypatch.setattr(gpu, "time_group", spy)
    keep = ("hf_lm/dynamic", "hf_lm/static", "transformers/dynamic")
    monkeypatch.setattr(gpu_entries, "DECODE_ROWS", list(keep))
    with pytest.raises(TimeLimit):
        gpu.main(["--measure", "decode", *SMOKE, "--set", "decode_rounds=1", "--output_dir", str(tmp_path)])
    rows = {row["id"]: row for row in on_disk["rows"]}
    assert on_disk["finished"] is False and on_disk["checks"]["decode_b1_tokens"]["ok"] is True
    for key in keep:
        assert rows[f"gpt2_decode_b1/{key}"]["status"] == "ok" and rows[f"gpt2_decode_b1/{key}"]["value"] > 0
        assert rows[f"gpt2_decode_b8/{key}"]["status"] == "not run"


def test_nanogpt_computes_gpt2s_function():
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=97, n_positions=24, n_embd=32, n_layer=2, n_head=4, activation_function="gelu_new"
    )
    ref = GPT2LMHeadModel._from_config(config, attn_implementation="sdpa").eval()
    nano = gpu.NanoGPT.from_gpt2(ref).eval()
    assert nano.lm_head.weight is nano.wte.weight  # tied
    assert sum(p.numel() for p in nano.parameters()) == sum(p.numel() for p in ref.parameters())
    ids = torch.randint(0, 97, (3, 24))
    with torch.no_grad():
        a, b = nano(ids, labels=ids), ref(input_ids=ids, labels=ids)
    assert (a.logits - b.logits).abs().max() < 1e-5
    assert abs(a.loss.item() - b.loss.item()) < 1e-5


def test_device_helpers():
    assert measure.resolve_device("cpu") == "cpu"
    assert measure.resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="device"):
        measure.resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            measure.resolve_device("cuda")
    assert measure.accelerator_info("cpu") == {"device": "cpu"}
    calls, syncs = [], []
    samples = measure.alternating_rounds(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
        rounds=3,
        reps=2,
        warmup=1,
        synchronize=lambda: syncs.append(1),
    )
    assert calls == ["a", "b"] + ["a", "a", "b", "b"] + ["b", "b", "a", "a"] + ["a", "a", "b", "b"]
    assert {k: len(v) for k, v in samples.items()} == {"a": 3, "b": 3}
    assert len(syncs) == 1 + 3 * 2 * 2  # after warm-up, then before both clock reads of every sample


def test_kernel_time_counts_each_kernel_once():
    """A profile lists a GPU kernel twice: as its own (device) event and inside the self device time
    of the operator that launched it. The busy time is the kernels' events alone."""
    from torch.autograd import DeviceType

    events = [
        SimpleNamespace(key="aten::mm", device_type=DeviceType.CPU, self_device_time_total=30.0),
        SimpleNamespace(key="gemm_kernel", device_type=DeviceType.CUDA, self_device_time_total=30.0),
        SimpleNamespace(key="aten::add", device_type=DeviceType.CPU, self_device_time_total=5.0),
        SimpleNamespace(key="add_kernel", device_type=DeviceType.CUDA, self_device_time_total=5.0),
    ]
    assert gpu.kernel_time_us(events) == 35.0


def test_a_failing_row_is_recorded_and_the_others_timed():
    rows = {k: r for k, r in gpu.plan_rows({"decode_batches": [1]}).items() if k.startswith("gpt2_train/")}

    def bad():
        raise RuntimeError("CUDA out of memory")

    ok, broken = "gpt2_train/hf_lm/eager", "gpt2_train/transformers/eager"
    samples = gpu.time_group(rows, {ok: lambda: None, broken: bad}, {"warmup": 0}, torch.device("cpu"), 1, 2)
    assert list(samples) == [ok] and rows[ok]["status"] == "ok"
    assert rows[broken]["status"] == "error" and "out of memory" in rows[broken]["error"]


def test_peak_probe_takes_a_dtype_and_a_device():
    result = measure_peak_flops(sizes=(32, 64), repeats=2, min_time=0.005, dtype=torch.bfloat16, device="cpu")
    assert result["peak_flops"] > 0 and result["dtype"] == "bfloat16" and result["device"] == "cpu"
    assert result["device_name"] is None


def test_without_cuda_it_says_so_and_exits_0(monkeypatch, caplog, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(gpu, "run_entries", lambda *args, **kwargs: [])  # a --smoke run of entries runs none
    caplog.set_level(logging.INFO, logger="benchmarks.gpu")
    assert gpu.main(["--output_dir", str(tmp_path)]) == 0
    assert gpu.main(["--measure", "decode", "--output_dir", str(tmp_path)]) == 0
    assert "needs CUDA" in caplog.text and not (tmp_path / "results.json").exists()
    for bad in (["--device", "cuda"], ["--sections", "train,bogus"], ["--entries", "bogus"], ["--set", "bogus=1"],
                [*SMOKE, "--measure", "gpt_train,bogus"], [*SMOKE, "--measure", "decode", "--set", "new_tokens=999"],
                # --measure's flags on a run of entries (which ignored them), a size of none, no threads
                ["--smoke", "--entries", "decode", "--set", "decode_batches=8"], ["--smoke", "--threads", "1"],
                [*SMOKE, "--measure", "decode", "--set", "gpt_seq=none"], [*SMOKE[:-1], "0", "--measure", "decode"],
                [*SMOKE, "--measure", "decode", "--budget_s", "60"]):  # a budget --measure ignored  # fmt: skip
        with pytest.raises(SystemExit):
            gpu.main([*bad, "--output_dir", str(tmp_path)])


def test_each_kind_of_run_has_its_own_default_folder(monkeypatch, tmp_path):
    """A smoke or a --measure run must not overwrite a full run's results.json in out/gpu."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(gpu, "main_measure", lambda args, parser, device: args.output_dir)
    assert gpu.main(["--measure", "decode", "--smoke", "--device", "cpu"]) == "out/gpu_measure_smoke"
    assert gpu.main(["--measure", "decode", "--device", "cpu"]) == "out/gpu_measure"
    folders = []
    monkeypatch.setattr(
        gpu, "run_entries", lambda names, ctx, budget, on_row: folders.append(ctx["out"]) or []
    )
    assert gpu.main(["--smoke", "--entries", "decode"]) == 0
    assert folders == [(tmp_path / "out" / "gpu_smoke").resolve()]


# --------------------------------------------------------------------------------------------
# The entries under a budget
# --------------------------------------------------------------------------------------------


def _entry(monkeypatch, tmp_path, name: str, code: str, limit: float, **extra) -> None:
    script = tmp_path / f"{name}.py"
    script.write_text(code)
    entry = {
        "section": "test",
        "argv": [str(script)],
        "limit": limit,
        "reads": "train_run",
        "smoke": [],
        **extra,
    }
    monkeypatch.setitem(ENTRIES, name, entry)


def test_an_entry_past_its_limit_is_stopped_and_the_others_go_on(tmp_path, monkeypatch):
    _entry(monkeypatch, tmp_path, "broken", "raise SystemExit(3)\n", 60)
    _entry(monkeypatch, tmp_path, "hang", "import time\ntime.sleep(60)\n", 1.5)
    _entry(monkeypatch, tmp_path, "fine", "print('hello')\n", 30)
    _entry(monkeypatch, tmp_path, "big", "", 30, smoke=None)  # not run at smoke size
    ctx = {"out": tmp_path, "smoke": True, "nanogpt_dir": None, "measurements": []}
    start = time.perf_counter()
    rows = gpu.run_entries(["broken", "hang", "fine", "big", "recipe_nanogpt"], ctx, budget=40)
    assert time.perf_counter() - start < 30  # the hang was killed at its 1.5 s limit, not waited for
    assert [r["status"] for r in rows] == ["failed", "timeout", "ok", "skipped", "skipped"]
    assert (
        rows[1]["summary"].startswith("stopped at its 2 s limit")
        and rows[2]["summary"] == "no final_metrics.json"
    )
    assert "hello" in (tmp_path / "fine.log").read_text() and rows[4]["summary"] == "no --nanogpt_dir given"
    _entry(monkeypatch, tmp_path, "slow", "import time\ntime.sleep(60)\n", 60)
    rows = gpu.run_entries(["slow", "fine"], ctx, budget=gpu.MIN_ENTRY_S + 1)
    assert [r["status"] for r in rows] == ["timeout", "not run"] and rows[1][
        "summary"
    ] == "the budget was spent"


def test_entries_are_selected_by_section_or_by_name():
    assert {e["section"] for e in ENTRIES.values()} == set(SECTIONS)
    for name, e in ENTRIES.items():
        assert 0 < e["limit"] < math.inf and e["reads"] in gpu.READERS, name
    default = gpu.selected_entries("all", None)
    assert default == [n for n, e in ENTRIES.items() if not e.get("on_demand")] and "decode_b8" not in default
    assert gpu.selected_entries("decode,train", None) == ["train_eager", "train", "decode"]
    assert gpu.selected_entries("all", "decode_b8, recipe_nanogpt") == ["recipe_nanogpt", "decode_b8"]
    bad = (("bogus", None), (",", None), ("all", "bench_gpu_decode"), ("all", " , "), ("train", "decode"))
    for sections, names in bad:
        with pytest.raises(ValueError):
            gpu.selected_entries(sections, names)


def test_the_check_entries_select_the_cuda_tests(tmp_path):
    """`check` runs every cuda test but the leaderboards (as pytest collects them from the entry's own
    command line), `leaderboards` those four."""
    from gpu_cases import LEADERBOARDS, sweep_ids

    expected = sweep_ids()
    leaderboards = {i for i in expected if i.startswith("leaderboards/")}
    assert len(leaderboards) == len(LEADERBOARDS) == 4
    cmd = gpu.entry_command("check", {"out": tmp_path, "smoke": False})
    done = subprocess.run([*cmd, "--collect-only"], cwd=gpu.REPO_ROOT, capture_output=True, text=True)
    collected = {line.split("[", 1)[1].rstrip("]") for line in done.stdout.splitlines() if "::" in line}
    assert collected == expected - leaderboards
    cmd = gpu.entry_command("leaderboards", {"out": tmp_path, "smoke": False})
    assert cmd[cmd.index("-k") + 1] == "leaderboards/"  # a substring of those four ids alone


def test_the_recipe_variants_and_the_translation_entries_parse(tmp_path):
    ctx = {"out": tmp_path, "smoke": False}
    variants = ["recipe_hf_lm_5000_steps", "recipe_hf_lm_rope_1500_steps"]
    parsed = [parse_args(gpu.entry_command(name, ctx)[3:]) for name in variants]  # python -m training.train
    assert [p[2].max_steps for p in parsed] == [5000, 1500]
    assert [p[1].position_embedding_type for p in parsed] == ["learned", "rope"]
    full, smoke = (
        gpu.entry_command("translation_budget_linear", {"out": tmp_path, "smoke": s}) for s in (0, 1)
    )
    assert str(gpu.MULTI30K) in full and full[-4:-2] == ["--budget_seconds", "420"] and "--smoke" not in full
    assert "--smoke" in smoke and "--budget_seconds" not in smoke and "linear" in smoke


def test_the_readers_read_what_the_tools_write(tmp_path):
    ctx = {"out": tmp_path, "smoke": False, "measurements": []}
    (tmp_path / "chk").mkdir()
    rows = [
        {"group": "loop", "check": "gpt", "precision": "bf16", "result": "pass"},
        {"group": "families", "check": "t5", "precision": "fp16", "result": "FAIL"},
        {"group": "loop", "check": "ddp_2_processes", "precision": "bf16", "result": "skipped"},
    ]
    (tmp_path / "chk" / "summary.json").write_text(json.dumps({"device": "cpu", "rows": rows}))
    assert (
        gpu.read_entry(ctx, "chk", "check") == "1 of 2 checks passed, 1 skipped; failed: families/t5 (fp16)"
    )
    (tmp_path / "b").mkdir()
    targets = [
        {"key": "eager_vs_nanogpt", "unit": "x", "measured": 1.04, "met": True},
        {"key": "compiled_mfu", "unit": "%", "measured": 0.383, "met": False},
        {"key": "static_decode_b1", "unit": "x", "measured": None, "met": None},
    ]
    m = {"targets": targets, "rows": [{"id": "a", "status": "ok"}, {"id": "b", "status": "error"}]}
    (tmp_path / "b" / "results.json").write_text(json.dumps({"kind": "gpu", "measurements": [m]}))
    assert (
        gpu.read_entry(ctx, "b", "measured")
        == "eager_vs_nanogpt 1.04x (met); compiled_mfu 38.3% (NOT met); 1 rows ok, failed: b"
    )
    assert ctx["measurements"] == [{**m, "entry": "b"}]
    (tmp_path / "n.log").write_text(
        "step 0: train loss 4.2, val loss 4.3\nstep 250: train loss 1.9, val loss 2.01\n"
        "step 500: train loss 1.5, val loss 1.71\nstep 750: train loss 1.2, val loss 1.75\n"
    )
    assert (
        gpu.read_entry(ctx, "n", "nanogpt")
        == "best val loss 1.7100 at step 500 (nanoGPT's 200-batch estimate)"
    )
    (tmp_path / "t").mkdir()
    entry = {"name": "transformer", "test_bleu_greedy": 37.5, "test_bleu_beam": 38.25}
    entry.update(train_epochs=20.0, train_seconds=301.0)
    (tmp_path / "t" / "results.json").write_text(json.dumps({"entries": [entry]}))
    assert (
        gpu.read_entry(ctx, "t", "translation")
        == "transformer: BLEU 37.50 greedy / 38.25 beam, 20.0 epochs in 301 s"
    )
    readings = [gpu.read_entry(ctx, "absent", reads) for reads in ("nanogpt", "measured", "check")]
    assert readings == ["no log", "no results.json", "0 of 0 checks passed"]


@pytest.mark.slow
@pytest.mark.skipif(not gpu.SHAKESPEARE.is_file(), reason="../shared/data/tinyshakespeare is absent")
def test_the_check_and_the_recipe_end_to_end_at_smoke_size(tmp_path):
    """One cuda test on the CPU, the recipe's config at tiny size; nanoGPT skipped without a checkout,
    the variants at smoke size (the same run again); one results folder, rendered."""
    argv = ["--entries", "check,recipe_hf_lm,recipe_nanogpt,recipe_hf_lm_5000_steps", "--smoke"]
    assert gpu.main([*argv, "--output_dir", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    (run,) = result["runs"]
    rows = {r["name"]: r for r in run["entries"]}
    assert (rows["check"]["status"], rows["check"]["summary"]) == ("ok", "1 of 1 checks passed")
    assert rows["recipe_hf_lm"]["status"] == "ok" and "at step 4" in rows["recipe_hf_lm"]["summary"]
    assert [rows[n]["status"] for n in ("recipe_nanogpt", "recipe_hf_lm_5000_steps")] == [
        "skipped",
        "skipped",
    ]
    assert (tmp_path / "recipe_hf_lm" / "final_metrics.json").is_file()
    assert (tmp_path / "README.md").read_text() == render.rendered(tmp_path)
    assert "| check | ok |" in (tmp_path / "README.md").read_text()
