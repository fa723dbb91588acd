"""benchmarks.gpu_session: the parts of a GPU session, checked on the CPU (`--smoke`): the budget, the
timeouts, the summaries each step reads back, and real parts end to end at tiny size."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from benchmarks import gpu_session
from benchmarks.gpu_session import PARTS, Step, run_steps
from training.args import parse_args

SHAKESPEARE = gpu_session.SHAKESPEARE


def _script(folder, name: str, text: str):
    path = folder / name
    path.write_text(text)
    return path


def test_a_step_past_its_limit_is_stopped_and_the_others_go_on(tmp_path):
    hang = _script(tmp_path, "hang.py", "import time\ntime.sleep(60)\n")
    fine = _script(tmp_path, "fine.py", "print('hello')\n")
    steps = [
        Step("broken", lambda ctx: ["benchmarks.no_such_module"], limit=60),  # python -m: exit 1
        Step("hang", lambda ctx: [str(hang)], limit=1.5),  # a .py path runs as a script
        Step("fine", lambda ctx: [str(fine)], limit=30),
        Step("skipped", lambda ctx: None, limit=30, skip_reason="nothing to run"),
    ]
    start = time.perf_counter()
    results = run_steps(steps, {"out": tmp_path, "smoke": True}, budget=40)
    assert time.perf_counter() - start < 30  # the hang was killed at its 1.5 s limit, not waited for
    assert [r.status for r in results] == ["failed", "timeout", "ok", "skipped"]
    assert results[1].summary.startswith("stopped at its 2 s limit")
    assert "hello" in (tmp_path / "fine.log").read_text()
    assert results[3].summary == "nothing to run"


def test_steps_that_no_longer_fit_the_budget_are_not_run(tmp_path):
    slow = _script(tmp_path, "slow.py", "import time\ntime.sleep(60)\n")
    steps = [Step("slow", lambda ctx: [str(slow)], limit=60), Step("next", lambda ctx: [str(slow)], limit=60)]
    results = run_steps(steps, {"out": tmp_path, "smoke": True}, budget=gpu_session.MIN_STEP_SECONDS + 1)
    assert [r.status for r in results] == ["timeout", "not run"]
    assert results[1].summary == "the part's budget was spent"


def test_every_step_has_a_limit_and_the_budget_is_optional():
    """A hang is stopped at its step's own limit; `--budget_s` bounds the whole run only when given."""
    assert gpu_session.build_parser().parse_args(["--part", "check"]).budget_s is None
    assert gpu_session.build_parser().parse_args(["--part", "check", "--budget_s", "300"]).budget_s == 300
    for name, steps in PARTS.items():
        assert steps and all(0 < s.limit < math.inf for s in steps), name


def test_the_check_parts_select_the_cuda_tests(tmp_path):
    """`check` runs every cuda test but the leaderboards, `leaderboards` those four (fp32: they set
    their own precision), each from pytest's command line as the step runs it."""
    from gpu_cases import LEADERBOARDS, sweep_ids

    expected = sweep_ids()
    leaderboards = {i for i in expected if i.startswith("leaderboards/")}
    assert len(leaderboards) == len(LEADERBOARDS) == 4
    for (step,), ids in ((PARTS["check"], expected - leaderboards), (PARTS["leaderboards"], leaderboards)):
        argv = step.argv({"out": tmp_path, "smoke": False, "device": "cuda"})
        done = subprocess.run(
            [sys.executable, "-m", *argv, "--collect-only"],
            cwd=gpu_session.REPO_ROOT,
            capture_output=True,
            text=True,
        )
        collected = {line.split("[", 1)[1].rstrip("]") for line in done.stdout.splitlines() if "::" in line}
        assert collected == ids, step.name


def test_the_summaries_read_what_the_tools_write(tmp_path):
    ctx = {"out": tmp_path, "nanogpt_eval_iters": 200}
    (tmp_path / "chk").mkdir()
    rows = [
        {"group": "loop", "check": "gpt", "precision": "bf16", "result": "pass"},
        {"group": "families", "check": "t5", "precision": "fp16", "result": "FAIL"},
        {"group": "loop", "check": "ddp_2_processes", "precision": "bf16", "result": "skipped"},
    ]
    (tmp_path / "chk" / "summary.json").write_text(json.dumps({"device": "cpu", "rows": rows}))
    assert gpu_session.summarize_gpu_check(ctx, "chk") == (
        "1 of 2 checks passed, 1 skipped; failed: families/t5 (fp16)"
    )
    (tmp_path / "b").mkdir()
    bench = {
        "targets": [
            {"key": "eager_vs_nanogpt", "unit": "x", "measured": 1.04, "met": True},
            {"key": "compiled_mfu", "unit": "%", "measured": 0.383, "met": False},
            {"key": "static_decode_b1", "unit": "x", "measured": None, "met": None},
        ],
        "rows": [{"id": "a", "status": "ok"}, {"id": "b", "status": "error"}],
    }
    (tmp_path / "b" / "bench_gpu.json").write_text(json.dumps(bench))
    assert gpu_session.summarize_bench_gpu(ctx, "b") == (
        "eager_vs_nanogpt 1.04x (met); compiled_mfu 38.3% (NOT met); 1 rows ok, failed: b"
    )
    (tmp_path / "n.log").write_text(
        "step 0: train loss 4.2, val loss 4.3\nstep 250: train loss 1.9, val loss 2.01\n"
        "step 500: train loss 1.5, val loss 1.71\nstep 750: train loss 1.2, val loss 1.75\n"
    )
    assert gpu_session.summarize_nanogpt(ctx, "n") == (
        "best val loss 1.7100 at step 500 (nanoGPT's 200-batch estimate)"
    )
    (tmp_path / "t").mkdir()
    entry = {"name": "transformer", "test_bleu_greedy": 37.5, "test_bleu_beam": 38.25}
    entry.update(train_epochs=20.0, train_seconds=301.0)
    (tmp_path / "t" / "results.json").write_text(json.dumps({"entries": [entry]}))
    assert gpu_session.summarize_translation(ctx, "t") == (
        "transformer: BLEU 37.50 greedy / 38.25 beam, 20.0 epochs in 301 s"
    )


def test_the_translation_runs_parse_down_to_the_training_run(tmp_path):
    """Both Transformer runs of the `translation` part: valid for the leaderboard and, through its
    GPU preset, for `training.finetune_translation` (a typo must not cost GPU time)."""
    from benchmarks import leaderboard_translation as translation
    from training.finetune_translation import parse_args as parse_finetune

    runs = {}
    for step in PARTS["translation"]:  # on-demand steps included
        argv = step.argv({"out": tmp_path, "smoke": False, "device": "cuda"})
        assert argv[0] == "benchmarks.leaderboard_translation" and "--preset" in argv
        # an existing folder for the data (parsed, never read), so that the check runs without the data
        args = translation.build_parser().parse_args([*argv[1:], "--data_dir", str(tmp_path)])
        settings = translation.resolve(args, translation.PRESETS[args.preset])
        run = translation.entry_argv("transformer", settings, args, tmp_path / "tok", tmp_path / step.name)
        runs[step.name] = parse_finetune(run)[2]
    plain, decayed = runs["multi30k_transformer"], runs["multi30k_transformer_budget_linear"]
    assert (plain.budget_schedule, plain.max_train_seconds, plain.num_train_epochs) == ("none", 420, 10)
    assert (decayed.budget_schedule, decayed.max_train_seconds, decayed.label_smoothing_factor) == (
        "linear",
        420,
        0.1,
    )
    assert decayed.num_train_epochs == 1000  # the budget, not the epochs, ends it
    smoke = PARTS["translation"][1].argv({"out": tmp_path, "smoke": True})  # the flags run in CI too
    assert "--smoke" in smoke and smoke[-6:] == list(gpu_session.BUDGET_LINEAR)
    # the preset runs alone by default, the decaying rate only when named
    assert [s.name for s in gpu_session.select_steps(["translation"], None)] == ["multi30k_transformer"]


def test_without_cuda_it_says_so_and_exits_0(capsys, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert gpu_session.main(["--part", "check"]) == 0
    assert "no CUDA device here" in capsys.readouterr().out


def test_the_check_part_end_to_end_at_smoke_size(tmp_path):
    assert gpu_session.main(["--part", "check", "--smoke", "--output_dir", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    (step,) = summary["steps"]
    assert (step["name"], step["status"], step["summary"]) == ("gpu_check", "ok", "1 of 1 checks passed")
    assert "| gpu_check | ok |" in (tmp_path / "summary.md").read_text()


@pytest.mark.skipif(not SHAKESPEARE.is_file(), reason="../shared/data/tinyshakespeare is absent")
def test_the_recipe_part_runs_the_config_file_and_skips_nanogpt_without_a_checkout(tmp_path):
    """With `--work_dir`, the output folder holds the summaries and the archive of the small files."""
    out, work = tmp_path / "out", tmp_path / "work"
    argv = ["--part", "recipe", "--smoke", "--output_dir", str(out), "--work_dir", str(work)]
    assert gpu_session.main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == ["results.tar.gz", "summary.json", "summary.md"]
    with tarfile.open(out / "results.tar.gz") as tar:
        names = tar.getnames()
    assert "recipe_hf_lm.log" in names and "recipe_hf_lm/final_metrics.json" in names
    assert not [n for n in names if n.endswith(".safetensors") or "checkpoint" in n]
    steps = {s["name"]: s for s in json.loads((out / "summary.json").read_text())["steps"]}
    assert steps["recipe_hf_lm"]["status"] == "ok"
    assert steps["recipe_hf_lm"]["summary"].startswith("best eval_loss ")
    assert "at step 4" in steps["recipe_hf_lm"]["summary"]
    assert steps["recipe_nanogpt"]["status"] == "skipped"
    variants = [s for s in PARTS["recipe"] if s.name.startswith("recipe_hf_lm_")]
    assert len(variants) == 2
    for variant in variants:
        assert steps[variant.name]["status"] == "skipped"  # at smoke size the same run again
        argv = variant.argv({"out": tmp_path, "smoke": False})
        assert argv[:2] == ["training.train", "training/configs/shakespeare_char.yaml"]
    parsed = [parse_args(v.argv({"out": tmp_path, "smoke": False})[1:]) for v in variants]  # valid flags
    assert [p[2].max_steps for p in parsed] == [5000, 1500]
    assert [p[1].position_embedding_type for p in parsed] == ["learned", "rope"]


def test_results_are_packed_without_weights(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    for name, size in {
        "gpu_check.log": 10, "run/final_metrics.json": 10, "run/bench.md": 10, "run/curve.png": 10,
        "run/final/model.safetensors": 10, "run/checkpoints/checkpoint-00000002/trainer_state.json": 10,
        "run/best/checkpoint-00000002/config.json": 10, "huge.log": gpu_session.PACKED_MAX_BYTES + 1,
    }.items():  # fmt: skip
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_bytes(b"x" * size)
    out.mkdir()
    packed = gpu_session.pack_results(work, out / "results.tar.gz")
    assert packed == ["gpu_check.log", "run/bench.md", "run/curve.png", "run/final_metrics.json"]
    with tarfile.open(out / "results.tar.gz") as tar:
        assert sorted(tar.getnames()) == packed
    assert [p.name for p in out.iterdir()] == ["results.tar.gz"]  # no partial archive left


def test_parts_join_with_commas_and_unknown_ones_are_refused(capsys):
    assert gpu_session.parse_parts("recipe, decode") == ["recipe", "decode"]
    assert gpu_session.parse_parts("all") == list(PARTS)
    for bad in ("recipe,bogus", ",", ""):
        with pytest.raises(SystemExit):
            gpu_session.build_parser().parse_args(["--part", bad])
        assert "unknown part(s)" in capsys.readouterr().err


def test_a_nanogpt_dir_without_nanogpt_is_refused(tmp_path):
    with pytest.raises(ValueError, match="holds no nanoGPT checkout"):
        gpu_session.main(["--part", "recipe", "--smoke", "--nanogpt_dir", str(tmp_path)])


def test_steps_picks_named_steps_in_part_order_and_refuses_others():
    picked = gpu_session.select_steps(["recipe"], "recipe_hf_lm_rope_1500_steps, recipe_nanogpt")
    assert [s.name for s in picked] == ["recipe_nanogpt", "recipe_hf_lm_rope_1500_steps"]
    assert [s.name for s in gpu_session.select_steps(["train"], None)] == [s.name for s in PARTS["train"]]
    for bad in ("bench_gpu_decode", " , "):
        with pytest.raises(ValueError, match="not in part"):
            gpu_session.select_steps(["recipe"], bad)
    # an on-demand step runs only when named
    assert [s.name for s in gpu_session.select_steps(["decode"], None)] == ["bench_gpu_decode"]
    (b8,) = gpu_session.select_steps(["decode"], "bench_gpu_decode_b8")
    assert b8.argv({"out": Path("/o"), "smoke": False, "device": "cuda"})[-2:] == ["--decode_batches", "8"]


@pytest.mark.slow
@pytest.mark.skipif(not gpu_session.MULTI30K.is_dir(), reason="../shared/data/multi30k is absent")
def test_the_translation_part_end_to_end_at_smoke_size(tmp_path):
    """The on-demand Transformer run at smoke size on the CPU, with its budget schedule and label
    smoothing, writes results the summary reads back. (The default run differs only in flags, which
    `test_the_translation_runs_parse_down_to_the_training_run` checks.)"""
    out, work = tmp_path / "out", tmp_path / "work"
    argv = ["--part", "translation", "--smoke", "--output_dir", str(out), "--work_dir", str(work)]
    argv += ["--steps", "multi30k_transformer_budget_linear"]
    assert gpu_session.main(argv) == 0
    (step,) = json.loads((out / "summary.json").read_text())["steps"]
    assert (step["name"], step["status"]) == ("multi30k_transformer_budget_linear", "ok")
    assert step["summary"].startswith("transformer: BLEU ") and "--budget_schedule linear" in step["command"]
    run = work / "multi30k_transformer_budget_linear" / "runs" / "transformer" / "final" / "README.md"
    assert "linear decay over the wall-clock budget" in run.read_text()
