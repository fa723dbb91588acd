"""The Tiny Shakespeare LM leaderboard (`benchmarks/leaderboard_lm.py`): split, calibration, scoring, smoke runs."""

import json
import math
import os
import string

import pytest
import torch
from conftest import SHARED_DATA, tiny_gpt_config

from benchmarks import leaderboard_lm as leaderboard
from hf_lm import HfLmGPTForCausalLM
from training.args import parse_args as parse_train_args
from training.objectives import build_model

TINY_SHAKESPEARE = os.path.join(SHARED_DATA, "tinyshakespeare", "input.txt")
needs_data = pytest.mark.skipif(
    not os.path.isfile(TINY_SHAKESPEARE), reason=f"Tiny Shakespeare not found at {TINY_SHAKESPEARE}"
)
OUTPUT_FILES = ("results.md", "results.json", "val_loss.png", "loss_curves.png")


# ----------------------------------------------------------------------------------------------
# The split
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [10, 1001, 4567])
def test_split_is_exactly_90_10_by_characters(length):
    text = "".join("aé\nZ\r\t$ü"[(i * 7) % 8] for i in range(length))  # multi-byte, CR and newlines
    train, val = leaderboard.split_text(text)
    n = int(length * 0.9)
    assert len(train) == n and len(val) == length - n
    assert train == text[:n] and val == text[n:]  # disjoint: the first n characters, then the rest
    assert train + val == text


def test_split_rejects_degenerate_inputs():
    for text in ("", "a"):  # int(1 * 0.9) = 0: nothing to train on
        with pytest.raises(ValueError, match="empty split"):
            leaderboard.split_text(text)
    with pytest.raises(ValueError, match="train_fraction"):
        leaderboard.split_text("abcdef", train_fraction=1.0)


def test_written_split_concatenates_to_the_file(tmp_path):
    source = tmp_path / "input.txt"
    text = (
        "First Citizen:\r\nBefore we proceed any further, hear me speak.\n\nAll: Speak, speak.\n" * 7 + "ü$"
    )
    source.write_bytes(text.encode("utf-8"))
    data = leaderboard.write_split(source, tmp_path / "data")
    with open(data["train_file"], encoding="utf-8", newline="") as f:
        train = f.read()
    with open(data["val_file"], encoding="utf-8", newline="") as f:
        val = f.read()
    assert train + val == text  # CRLF and multi-byte characters survive the round trip
    assert len(train) == int(len(text) * 0.9) == data["train_characters"]
    assert len(val) == data["val_characters"] and data["characters"] == len(text)


@needs_data
def test_split_of_tiny_shakespeare_matches_nanogpt(tmp_path):
    data = leaderboard.write_split(leaderboard.Path(TINY_SHAKESPEARE), tmp_path)
    # nanoGPT's data/shakespeare_char/prepare.py prints these counts
    assert (data["train_characters"], data["val_characters"]) == (1_003_854, 111_540)
    with open(TINY_SHAKESPEARE, encoding="utf-8", newline="") as f:
        original = f.read()
    parts = [open(data[k], encoding="utf-8", newline="").read() for k in ("train_file", "val_file")]
    assert "".join(parts) == original


# ----------------------------------------------------------------------------------------------
# The shared character tokenizer
# ----------------------------------------------------------------------------------------------


def test_char_tokenizer_is_one_token_per_character(tmp_path):
    train = "To be, or not to be: that is the question.\n$" * 3
    tok = leaderboard.build_char_tokenizer(train, "be not $\n", tmp_path / "tok", block_size=16)
    ids = tok("to be$", add_special_tokens=False)["input_ids"]
    assert len(ids) == 6 and tok.unk_token_id not in ids
    assert len(tok) == len(set(train)) + 3  # every character plus <|endoftext|>, <|pad|> and <|unk|>
    assert (tmp_path / "tok" / "tokenizer.json").is_file()


def test_char_tokenizer_keeps_a_character_seen_once(tmp_path):
    tok = leaderboard.build_char_tokenizer("abcabc$", "$a", tmp_path / "tok", block_size=8)
    assert tok.unk_token_id not in tok("$", add_special_tokens=False)["input_ids"]


def test_char_tokenizer_refuses_an_uncovered_validation_character(tmp_path):
    with pytest.raises(ValueError, match="lacks validation characters"):
        leaderboard.build_char_tokenizer("abcabc", "abz", tmp_path / "tok", block_size=8)


# ----------------------------------------------------------------------------------------------
# Calibration and bookkeeping
# ----------------------------------------------------------------------------------------------


def test_calibration_fills_the_budget_with_steps_and_evaluations():
    plan = leaderboard.calibrate(100.0, step_s=0.1, eval_s=1.0, evals=10)
    assert plan == {"max_steps": 855, "eval_every": 86, "warmup_steps": 85, "evals": 10}
    predicted = plan["max_steps"] * 0.1 + plan["evals"] * 1.0
    assert 0.9 * 100 < predicted <= 100


def test_calibration_thins_costly_evaluations_and_caps_warmup():
    plan = leaderboard.calibrate(100.0, step_s=0.01, eval_s=10.0, evals=10)
    assert plan["evals"] == 2  # at most a quarter of the budget goes to evaluation
    assert plan["max_steps"] == int(0.95 * 80 / 0.01)
    assert plan["warmup_steps"] == 100
    with pytest.raises(ValueError, match="positive budget"):
        leaderboard.calibrate(100.0, step_s=0.0, eval_s=1.0, evals=10)


def test_probe_timings_skip_the_first_steps():
    # steps 1-2 pay one-off costs; later steps take 0.5 s; the evaluation at step 10 takes 1.5 s
    seconds = {1: 3.0, 2: 4.0, **{s: 4.0 + 0.5 * (s - 2) for s in range(3, 11)}}
    rows = [{"step": float(s), "loss": 3.0, "seconds": t, "eval_loss": None} for s, t in seconds.items()]
    rows[-1]["eval_loss"] = 2.9
    timings = leaderboard.probe_timings(rows, final_seconds=seconds[10] + 1.5)
    assert timings == pytest.approx({"step_seconds": 0.5, "eval_seconds": 1.5})
    with pytest.raises(ValueError, match="calibration needs"):
        leaderboard.probe_timings(rows[:3], final_seconds=10.0)


def test_curve_and_train_time_from_metrics_rows():
    rows = [{"step": float(s), "loss": 3.0, "seconds": 2.0 + s, "eval_loss": None} for s in range(1, 11)]
    rows[4]["eval_loss"] = 2.5
    rows[9]["eval_loss"] = 2.2
    # a budget stop re-evaluates after the loop: a second row for step 10, no training loss
    rows.append({"step": 10.0, "loss": None, "seconds": 13.5, "eval_loss": 2.1})
    assert leaderboard.train_seconds(rows) == pytest.approx(10.0)  # 9 s from step 1 to 10, plus one step
    c = leaderboard.curve(rows)
    assert c["steps"] == [5, 10] and c["eval_loss"] == [2.5, 2.1]
    assert c["seconds"] == pytest.approx([5.0, 11.5])  # from about when step 1 began


# ----------------------------------------------------------------------------------------------
# Scoring
# ----------------------------------------------------------------------------------------------


def test_score_ids_is_the_token_mean_of_the_model_loss():
    torch.manual_seed(0)
    model = HfLmGPTForCausalLM(tiny_gpt_config()).eval()
    ids = torch.randint(0, 97, (16 * 6 + 5,))  # 6 blocks of 16 and a 5-token tail that is dropped
    scored = leaderboard.score_ids(model, ids, block_size=16, batch_size=4)  # batches of 4 and 2 blocks
    blocks = ids[: 6 * 16].view(6, 16)
    with torch.no_grad():
        expected = model(input_ids=blocks, labels=blocks).loss.item()
    assert scored["blocks"] == 6 and scored["scored_tokens"] == 6 * 15
    assert scored["loss"] == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match="fewer than one block"):
        leaderboard.score_ids(model, ids[:10], block_size=16)


# ----------------------------------------------------------------------------------------------
# Entries
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def char_tokenizer(tmp_path_factory):
    text = (string.ascii_letters + " .,;:!?'-\n")[:65] * 4  # 65 characters, as Tiny Shakespeare
    return leaderboard.build_char_tokenizer(text, text, tmp_path_factory.mktemp("tok"), block_size=128)


@pytest.mark.parametrize("smoke", [False, True])
def test_every_entry_is_a_valid_training_command(char_tokenizer, smoke):
    settings = leaderboard.Settings(budget_seconds=10.0, smoke=smoke)
    data = {"train_file": "train.txt", "val_file": "val.txt"}
    sizes = {}
    for name, entry in leaderboard.ENTRIES.items():
        argv = leaderboard.train_command(
            entry,
            settings,
            data,
            "tok",
            "out/x",
            0,
            max_steps=10,
            eval_every=5,
            warmup_steps=1,
            ngram_order=3,
        )
        assert argv[:2] == ["-m", "training.train"]
        data_args, model_args, train_args = parse_train_args(argv[2:])
        assert data_args.sample_by == "document" and data_args.eval_dataset == "val.txt"
        assert data_args.tokenizer_kind == "char" and data_args.tokenizer_name_or_path == "tok"
        assert model_args.hidden_dropout == 0 and model_args.attention_dropout == 0
        if entry.kind == "ngram":
            assert (model_args.arch, model_args.ngram_order, model_args.ngram_smoothing) == (
                "ngram",
                3,
                "modified_kn",
            )
            continue
        model = build_model(model_args, data_args, char_tokenizer)
        sizes[name] = sum(p.numel() for p in model.parameters())
        if entry.kind == "reference":  # nanoGPT's config whatever the mode
            assert data_args.block_size == 64 and train_args.per_device_batch_size == 12
            assert model.config.hidden_act == "gelu" and not model.config.attention_bias
            assert not model.config.mlp_bias and model.config.tie_word_embeddings
    budgeted = [sizes[n] for n, e in leaderboard.ENTRIES.items() if e.kind == "budget"]
    if smoke:
        assert max(budgeted) < 50_000
    else:  # roughly comparable: about 0.8M parameters each, like nanoGPT's small model
        assert all(0.75e6 < n < 0.85e6 for n in budgeted), sizes
        assert 0.79e6 < sizes["nanogpt"] < 0.82e6


# ----------------------------------------------------------------------------------------------
# Smoke runs (real subprocess training runs)
# ----------------------------------------------------------------------------------------------


def _check_outputs(out, entries):
    for name in OUTPUT_FILES:
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    report = json.loads((out / "results.json").read_text())
    rows = report["entries"]
    assert [r["name"] for r in rows] == entries  # one row per entry, in order
    for row in rows:
        assert "error" not in row, row
        assert (
            math.isfinite(row["val_loss"])
            and 0 < row["val_loss"] < math.log(report["data"]["vocab_size"]) + 1
        )
        assert row["perplexity"] == pytest.approx(math.exp(row["val_loss"]))
        assert row["command"].startswith("python -m training.train")
    for key in ("hardware", "seed", "budget_seconds", "settings", "data", "reference"):
        assert key in report
    assert report["hardware"]["cpu_model"] and report["hardware"]["torch"]
    table = (out / "results.md").read_text()
    for row in rows:
        assert row["label"] in table
    assert "nanoGPT small CPU config (published)" in table and "| 1.88 |" in table
    return report, rows


@pytest.mark.slow
@needs_data
def test_smoke_run_writes_the_leaderboard(tmp_path):
    """One entry of each kind: the n-gram fit, a budgeted run and the nanoGPT recipe's fixed steps
    (every entry's command is checked by `test_every_entry_is_a_valid_training_command`)."""
    entries = ["ngram", "gpt_alibi", "nanogpt"]
    argv = ["--smoke", "--data_file", TINY_SHAKESPEARE, "--output_dir", str(tmp_path), "--num_threads", "1"]
    argv += ["--entries", *entries, "--ngram_orders", "1", "3"]
    assert leaderboard.main(argv) == 0
    report, rows = _check_outputs(tmp_path, entries)
    assert report["schedule"] == "constant"
    ngram = rows[0]
    assert [o["order"] for o in ngram["orders"]] == [1, 3]
    best = min(ngram["orders"], key=lambda o: o["val_loss"])
    assert ngram["best_order"] == best["order"] == 3 and ngram["val_loss"] == best["val_loss"]
    assert f"order {ngram['best_order']}" in ngram["label"]
    assert ngram["orders"][0]["val_loss"] > ngram["orders"][1]["val_loss"]  # context helps
    alibi, nanogpt = rows[1:]
    # stopped by the budget, which covers the loop (a step may run past it)
    assert alibi["steps"] > 0 and alibi["train_seconds"] < report["budget_seconds"] + 1.5
    assert alibi["curve"]["eval_loss"] and alibi["eval_block_size"] == 32
    assert nanogpt["steps"] == 20 and nanogpt["eval_block_size"] == 64
    for flag in ("--sampling random_windows", "--min_lr_rate 0.1", "--load_best_model_at_end true"):
        assert flag in nanogpt["command"], flag  # nanoGPT's recipe, as shakespeare_char_cpu.yaml


@pytest.mark.slow
@needs_data
def test_smoke_run_calibrates_a_cosine_schedule(tmp_path):
    argv = ["--smoke", "--schedule", "cosine", "--data_file", TINY_SHAKESPEARE, "--output_dir", str(tmp_path)]
    argv += ["--num_threads", "1", "--entries", "gpt_rope"]
    assert leaderboard.main(argv) == 0
    _, (row,) = _check_outputs(tmp_path, ["gpt_rope"])
    plan = row["calibration"]
    assert plan["schedule"] == "cosine" and plan["step_seconds"] > 0 and plan["probe_command"]
    assert 1 <= row["steps"] <= plan["max_steps"]
    assert "--lr_scheduler cosine" in row["command"] and f"--max_steps {plan['max_steps']}" in row["command"]
