"""The budgeted leaderboards (`benchmarks/leaderboard.py`): data, calibration, scoring, the entries'
commands, the tables, and one smoke run per board on the real data."""

import csv
import json
import math
import os
import string
from pathlib import Path

import pytest
import torch
from conftest import SHARED_DATA, tiny_gpt_config

from benchmarks import leaderboard as lb
from benchmarks.leaderboard import BOARDS, VARIANTS
from hf_lm import HfLmGPTForCausalLM
from training.args import parse_args as parse_train_args
from training.objectives import build_model

TINY_SHAKESPEARE = os.path.join(SHARED_DATA, "tinyshakespeare", "input.txt")
MULTI30K, SST2 = os.path.join(SHARED_DATA, "multi30k"), os.path.join(SHARED_DATA, "sst2")
PNG = b"\x89PNG\r\n\x1a\n"
LM_ENTRIES, SST2_ENTRIES = BOARDS["lm"]["entries"], BOARDS["sst2"]["entries"]
TRANSLATION_ENTRIES = BOARDS["translation"]["entries"]
needs = {
    path: pytest.mark.skipif(not os.path.exists(path), reason=f"{path} not found")
    for path in (TINY_SHAKESPEARE, MULTI30K, SST2)
}


def settings(board: str, preset: str = "full", **overrides) -> dict:
    return {**{k: v[preset == "smoke"] for k, v in BOARDS[board]["settings"].items()}, **overrides}


def table_rows(markdown: str, first: str) -> list[str]:
    """The body rows of the first table whose header starts with `first`."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first}"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            return rows
        rows.append(line)
    return rows


# ----------------------------------------------------------------------------------------------
# The command line
# ----------------------------------------------------------------------------------------------


def data_of(board: str, tmp_path: Path) -> str:
    """A `--data` of the kind the board reads: a text file (the character-level boards) or a folder."""
    if not Path(BOARDS[board]["data"]).suffix:
        return str(tmp_path)
    (tmp_path / "input.txt").write_text("To be, or not to be\n")
    return str(tmp_path / "input.txt")


def test_entries_settings_and_presets(tmp_path):
    text = data_of("lm", tmp_path)  # the character-level boards read a text file
    args = lb.parse_args(
        ["translation", "--smoke", "--data", str(tmp_path), "--budget_seconds", "7", "--num_beams", "3"]
    )
    assert (
        args.preset == "smoke" and args.settings["budget_seconds"] == 7.0 and args.settings["num_beams"] == 3
    )
    assert args.settings["hidden_size"] == 32 and args.names == list(TRANSLATION_ENTRIES)
    args = lb.parse_args(["translation", "--data", str(tmp_path), "--device", "cpu", "--preset", "gpu"])
    assert args.settings["batch_size"] == 128 and args.settings["hidden_size"] == 256
    args = lb.parse_args(
        ["ablations", "--data", text, "--seeds", "0,1", "--rerun", "--match_glu_params", "false"]
    )
    assert (
        args.settings["seeds"] == (0, 1)
        and args.settings["rerun"] is True
        and args.settings["match_glu_params"] is False
    )
    assert lb.parse_args(["sst2", "--data", str(tmp_path)]).names == ["scratch", "mlm"]  # its default
    assert lb.parse_args(["lm", "--data", text, "--max_chars", "none"]).settings["max_chars"] is None
    # a setting whose presets are both None takes an int where it reads as one (threads, widths), and a
    # text setting keeps "none" (its choice) rather than becoming None
    s = lb.parse_args(["ablations", "--data", text, "--num_threads", "2", "--intermediate_size", "96"])
    assert (s.settings["num_threads"], s.settings["intermediate_size"]) == (2, 96)
    assert isinstance(s.settings["num_threads"], int) and isinstance(s.settings["intermediate_size"], int)
    args = lb.parse_args(["translation", "--data", str(tmp_path), "--budget_schedule", "none"])
    assert args.settings["budget_schedule"] == "none"
    for bad in (
        ["translation", "--entries", "t5,gpt"],
        ["translation", "--smoke", "--preset", "gpu"],
        ["translation", "--device", "cuda"]
        if not torch.cuda.is_available()
        else ["translation", "--cell_type", "x"],
        ["lm", "--ngram_orders", "1,6"],
        ["ablations", "--rerun", "maybe"],
        ["ablations", "--entries", "swish"],
        ["mask_predict", "--entries", "mask_predict"],
        ["lm", "--data", str(tmp_path / "missing")],
        ["lm", "--data", str(tmp_path)],  # a folder for a file: it raised IsADirectoryError
    ):
        with pytest.raises(SystemExit):
            lb.parse_args(bad + (["--data", data_of(bad[0], tmp_path)] if "--data" not in bad else []))
    assert "--budget_seconds" in lb._parser("lm").format_help()  # renders: no unescaped % in a help string


@pytest.mark.parametrize(
    "bad",
    ["lm --budget_seconds none", "lm --max_chars -5", "translation --num_threads -1", "ablations --train_chars 0",
     "sst2 --max_test_samples 0", "ablations --seed 3", "lm --evals 0", "lm --ngram_orders ,",
     "mask_predict --iterations 1,none", "mask_predict --trace_iterations 0"],
)  # fmt: skip
def test_a_setting_no_run_can_use_is_refused_by_name(bad, tmp_path, capsys):
    """Before any training: not a traceback, not a silent misreading (a negative cap cut from the end,
    ablations' --seed ignored while results.json recorded it)."""
    with pytest.raises(SystemExit):
        lb.parse_args([*bad.split(), "--data", data_of(bad.split()[0], tmp_path)])
    assert f"error: {bad.split()[1]}" in capsys.readouterr().err
    text = data_of("ablations", tmp_path)
    args = lb.parse_args(["ablations", "--data", text, "--num_threads", "0"])  # 0: torch's default
    assert (args.settings["num_threads"], args.seed) == (0, 0)


def test_setting_choices_and_command_line_templates():
    from training.trainer_common import BUDGET_SCHEDULES

    assert tuple(BOARDS["translation"]["choices"]["budget_schedule"]) == BUDGET_SCHEDULES
    with pytest.raises(ValueError, match="--cell_type"):
        lb.check_settings("translation", settings("translation", cell_type="x"))
    lb.check_settings("translation", settings("translation"))  # the presets pass
    # a template's words are formatted one by one (a value with spaces stays one word), '' is an empty word
    words = lb.command_line("--a {x} --b '' *rest --c {y}", {"x": 1.5, "y": "p q"}, rest=["--d", "e"])
    assert words == ["--a", "1.5", "--b", "", "--d", "e", "--c", "p q"]
    # caps: `--key value` for each key set, None left out
    assert lb.command_line("--a {x}", {"x": 1, "c": None, "d": 0}, ["c", "d"]) == ["--a", "1", "--d", "0"]


def test_select_entries():
    assert lb.select_entries("translation", "t5, rnn,t5") == ["t5", "rnn"]  # order kept, duplicates dropped
    # components expand, the baseline always runs, in the grid's order
    assert lb.select_entries("ablations", "mqa,positions") == [
        "baseline",
        "sinusoidal",
        "rope",
        "alibi",
        "no_positions",
        "mqa",
    ]
    assert len(lb.select_entries("ablations", None)) == 19
    assert lb.select_entries("length_extrapolation", None) == [
        "learned",
        "sinusoidal",
        "rope",
        "alibi",
        "none",
        "xpos",
    ]
    with pytest.raises(ValueError, match=r"unknown \['swish'\]"):
        lb.select_entries("ablations", "swish")
    assert set(lb.select_entries("mask_predict", "mask_predict,autoregressive")) == {
        "autoregressive",
        "mask_predict",
    }


# ----------------------------------------------------------------------------------------------
# Data and tokenizers
# ----------------------------------------------------------------------------------------------


def test_written_split_concatenates_to_the_file(tmp_path):
    text = (
        "First Citizen:\r\nBefore we proceed any further, hear me speak.\n\nAll: Speak, speak.\n" * 7 + "ü$"
    )
    (tmp_path / "input.txt").write_bytes(text.encode("utf-8"))
    data = lb.write_split(tmp_path / "input.txt", tmp_path / "data")
    train, val = (open(data[k], encoding="utf-8", newline="").read() for k in ("train_file", "val_file"))
    assert train + val == text  # CRLF and multi-byte characters survive the round trip
    assert (len(train), len(val), data["characters"]) == (
        data["train_characters"],
        data["val_characters"],
        len(text),
    )
    cut = lb.write_split(
        tmp_path / "input.txt", tmp_path / "cut", max_chars=100, train_chars=50, eval_chars=5
    )
    assert (cut["characters"], cut["train_characters"], cut["val_characters"]) == (
        100,
        50,
        5,
    )  # slice, split, slice


@needs[TINY_SHAKESPEARE]
def test_split_of_tiny_shakespeare_matches_nanogpt(tmp_path):
    data = lb.write_split(Path(TINY_SHAKESPEARE), tmp_path)
    # nanoGPT's data/shakespeare_char/prepare.py prints these counts
    assert (data["train_characters"], data["val_characters"]) == (1_003_854, 111_540)


def test_char_tokenizer_is_one_token_per_character(tmp_path):
    train = "To be, or not to be: that is the question.\n$" * 3
    tok = lb.char_tokenizer(train, tmp_path / "tok", 16, 10_000, check="be not $\n")
    ids = tok("to be$", add_special_tokens=False)["input_ids"]
    assert len(ids) == 6 and tok.unk_token_id not in ids  # "$", seen once per copy, is kept
    assert len(tok) == len(set(train)) + 3  # every character plus <|endoftext|>, <|pad|> and <|unk|>
    assert (tmp_path / "tok" / "tokenizer.json").is_file()
    with pytest.raises(ValueError, match="one known token per validation character"):
        lb.char_tokenizer("abcabc", tmp_path / "tok2", 8, 10_000, check="abz")


def test_shared_tokenizer_is_reused_only_with_the_same_settings(tmp_path):
    calls = []
    b = lb.Board(
        settings={"vocab_size": 40, "max_train_samples": None, "length": 16}, data=tmp_path, out=tmp_path
    )

    def tokenizer():
        return lb.shared_tokenizer(
            b, "char", lambda: calls.append(1) or ["ein hund", "a dog"] * 5, "length", calls.append
        )

    (first, reused), (again, reused_again) = tokenizer(), tokenizer()
    assert (reused, reused_again, len(calls)) == (False, True, 2) and again.get_vocab() == first.get_vocab()
    assert first.model_max_length == 16 and first.padding_side == "right" and calls[1] is first  # finished
    b.settings["vocab_size"] = 41
    assert not tokenizer()[1] and len(calls) == 4  # other settings: trained anew


# ----------------------------------------------------------------------------------------------
# lm: calibration, bookkeeping, scoring, entries
# ----------------------------------------------------------------------------------------------


def test_calibration_fills_the_budget_thins_costly_evaluations_and_caps_warmup():
    plan = lb.calibrate(100.0, step_s=0.1, eval_s=1.0, evals=10)
    assert plan == {"max_steps": 855, "eval_every": 86, "warmup_steps": 85, "evals": 10}
    assert 0.9 * 100 < plan["max_steps"] * 0.1 + plan["evals"] * 1.0 <= 100
    plan = lb.calibrate(100.0, step_s=0.01, eval_s=10.0, evals=10)
    assert plan["evals"] == 2  # at most a quarter of the budget goes to evaluation
    assert (plan["max_steps"], plan["warmup_steps"]) == (int(0.95 * 80 / 0.01), 100)
    with pytest.raises(ValueError, match="positive budget"):
        lb.calibrate(100.0, step_s=0.0, eval_s=1.0, evals=10)


def test_probe_timings_curve_and_train_time_from_metrics_rows():
    # steps 1-2 pay one-off costs; later steps take 0.5 s; the evaluation at step 10 takes 1.5 s
    seconds = {1: 3.0, 2: 4.0, **{s: 4.0 + 0.5 * (s - 2) for s in range(3, 11)}}
    rows = [{"step": float(s), "loss": 3.0, "seconds": t, "eval_loss": None} for s, t in seconds.items()]
    assert lb.probe_timings(rows, final_seconds=seconds[10] + 1.5) == pytest.approx(
        {"step_seconds": 0.5, "eval_seconds": 1.5}
    )
    with pytest.raises(ValueError, match="calibration needs"):
        lb.probe_timings(rows[:3], final_seconds=10.0)
    rows = [{"step": float(s), "loss": 3.0, "seconds": 2.0 + s, "eval_loss": None} for s in range(1, 11)]
    rows[4]["eval_loss"], rows[9]["eval_loss"] = 2.5, 2.2
    # a budget stop re-evaluates after the loop: a second row for step 10, no training loss
    rows.append({"step": 10.0, "loss": None, "seconds": 13.5, "eval_loss": 2.1})
    assert lb.train_seconds(rows) == pytest.approx(10.0)  # 9 s from step 1 to 10, plus one step
    curve = lb.curve(rows)
    assert (curve["steps"], curve["eval_loss"]) == ([5, 10], [2.5, 2.1])
    assert curve["seconds"] == pytest.approx([5.0, 11.5])  # from about when step 1 began


def test_score_validation_is_the_token_mean_of_the_model_loss(tmp_path):
    torch.manual_seed(0)
    model = HfLmGPTForCausalLM(tiny_gpt_config()).eval()
    model.save_pretrained(tmp_path)
    ids = torch.randint(0, 97, (16 * 70 + 5,))  # 70 blocks of 16 (batches of 64 and 6) and a dropped tail
    scored = lb.score_validation(tmp_path, ids, block_size=16)
    blocks = ids[: 70 * 16].view(70, 16)
    with torch.no_grad():
        expected = model(input_ids=blocks, labels=blocks).loss.item()
    assert scored["n_tokens"] == 70 * 15 and scored["parameters"] == model.num_parameters()
    assert scored["loss"] == pytest.approx(expected, rel=1e-5) and scored["ngrams"] is None
    assert scored["bits_per_token"] == pytest.approx(expected / math.log(2), rel=1e-5)
    with pytest.raises(ValueError, match="fewer than one block"):
        lb.score_validation(tmp_path, ids[:10], block_size=16)


def test_a_failing_lm_entry_keeps_the_others(tmp_path, monkeypatch):
    (tmp_path / "input.txt").write_text("To be, or not to be: that is the question.\n" * 200)

    def trained(b, name, ctx):
        if name == "lstm":
            raise RuntimeError("boom")
        curve = {"seconds": [1.0], "eval_loss": [2.0]}
        return {"name": name, "label": name, "kind": "budget", "val_loss": 2.0, "curve": curve}

    monkeypatch.setattr(lb, "lm_trained", trained)
    argv = ["lm", "--smoke", "--data", str(tmp_path / "input.txt"), "--entries", "lstm,gru"]
    b = lb.parse_args(argv)
    b.name, b.out = b.board, tmp_path / "out"
    rows = lb.run_lm(b)["entries"]
    assert (
        rows[0] == {"name": "lstm", "label": "LSTM", "error": "RuntimeError('boom')"}
        and rows[1]["val_loss"] == 2.0
    )


@pytest.mark.parametrize("smoke", [False, True])
def test_every_lm_entry_is_a_valid_training_command(tmp_path, smoke):
    text = (string.ascii_letters + " .,;:!?'-\n")[:65] * 4  # 65 characters, as Tiny Shakespeare
    tokenizer = lb.char_tokenizer(text, tmp_path / "tok", 128, 10_000)
    data, sizes = {"train_file": "train.txt", "val_file": "val.txt"}, {}
    for name, entry in LM_ENTRIES.items():
        argv = lb.train_command(entry, settings("lm"), data, "tok", "out/x", 0, smoke,
                                max_steps=10, eval_every=5, warmup_steps=1, ngram_order=3)  # fmt: skip
        data_args, model_args, train_args = parse_train_args(argv)
        assert data_args.sample_by == "document" and data_args.eval_dataset == "val.txt"
        assert data_args.tokenizer_name_or_path == "tok" and model_args.hidden_dropout == 0
        if entry.kind == "ngram":
            assert (model_args.arch, model_args.ngram_order, model_args.ngram_smoothing) == (
                "ngram",
                3,
                "modified_kn",
            )
            continue
        model = build_model(model_args, data_args, tokenizer)
        sizes[name] = sum(p.numel() for p in model.parameters())
        if entry.kind == "reference":  # nanoGPT's config and recipe whatever the mode
            assert data_args.block_size == 64 and train_args.per_device_batch_size == 12
            assert (
                model.config.hidden_act == "gelu"
                and not model.config.attention_bias
                and not model.config.mlp_bias
            )
            assert train_args.sampling == "random_windows" and train_args.load_best_model_at_end
    budgeted = [sizes[n] for n, e in LM_ENTRIES.items() if e.kind == "budget"]
    if smoke:
        assert max(budgeted) < 50_000
    else:  # roughly comparable: about 0.8M parameters each, like nanoGPT's small model
        assert all(0.75e6 < n < 0.85e6 for n in budgeted), sizes
        assert 0.79e6 < sizes["nanogpt"] < 0.82e6


# ----------------------------------------------------------------------------------------------
# ablations and length_extrapolation: the grid, its flags, its bookkeeping
# ----------------------------------------------------------------------------------------------

SIZE = {"hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4, "intermediate_size": 128}
V, BLOCK = 67, 32
# the config fields each component may change: a variant that changes others is not one component away
COMPONENT_FIELDS = {
    "baseline": set(),
    "activation": {"hidden_act", "intermediate_size"},
    "norm": {"norm_type", "norm_position"},
    "positions": {"position_embedding_type"},
    "embeddings": {"tie_word_embeddings", "embedding_size"},
    # a band's window is also Mistral's `sliding_window`, stored beside it
    "attention": {"num_key_value_heads", "attention_pattern", "attention_window", "sliding_window"},
    "sharing": {"num_hidden_groups"},
    "experts": {
        "num_local_experts",
        "num_experts_per_tok",
        "capacity_factor",
        "norm_topk_prob",
        "router_aux_loss_coef",
    },
}


def build(name, match_glu=True):
    return HfLmGPTForCausalLM(lb.variant_config(VARIANTS[name], SIZE, V, BLOCK, match_glu)).eval()


def params(name, match_glu=True):
    return build(name, match_glu).num_parameters()


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_variant_builds_and_differs_from_the_baseline_in_one_component(name):
    model = build(name)
    x = torch.randint(0, V, (2, BLOCK))
    out = model(x, labels=x)
    assert out.logits.shape == (2, BLOCK, V) and torch.isfinite(out.loss)
    base = build("baseline").config.to_dict()
    changed = {k for k, v in model.config.to_dict().items() if base.get(k) != v}
    assert changed <= COMPONENT_FIELDS[VARIANTS[name].component], changed
    assert (name == "baseline") == (not changed)


def test_parameter_count_relations():
    H, L, P, E = SIZE["hidden_size"], SIZE["num_hidden_layers"], BLOCK, 4
    base = params("baseline")
    assert params("untied") == base + V * H and params("mqa") < params("gqa") < base
    per_block = sum(p.numel() for p in build("baseline").model.layers[0].parameters())
    assert params("shared_blocks") == base - (L - 1) * per_block  # one block instead of L
    assert params("factorized_embeddings") < base and params("relu") == base
    for name in ("sinusoidal", "rope", "alibi", "no_positions"):  # no learned P x H table
        assert params(name) == base - P * H, name
    assert params("rmsnorm") == base - (2 * L + 1) * H  # no norm biases
    assert params("post_norm") == base - 2 * H  # a post-norm stack has no final norm
    for name in ("swiglu", "geglu", "reglu"):  # 2/3 width keeps the parameters; full width grows them
        assert abs(params(name) - base) / base < 0.03 and params(name, match_glu=False) > base * 1.1, name
    # the mixtures: parameters grow with every expert, FLOPs per token only with the k routed to
    F = SIZE["intermediate_size"]
    expert = 2 * H * F + F + H  # up and down projections with biases
    assert params("moe") == params("switch") == base + L * ((E - 1) * expert + H * E)
    flops = {
        name: lb.forward_flops_per_token(build(name).config, BLOCK) for name in ("baseline", "moe", "switch")
    }
    router = 2 * L * H * E
    assert flops["switch"] == flops["baseline"] + router
    assert flops["moe"] == flops["baseline"] + router + L * 2 * (2 * H * F)  # a second expert's matmuls


def test_flags_build_the_same_model_as_the_config(tmp_path):
    """What the runner passes to `training.train` builds exactly the variant's config."""
    from training.data.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(["".join(chr(32 + i) for i in range(V - 2)) * 2], kind="char", vocab_size=V)
    s = settings("ablations", "smoke", hidden_size=32, num_hidden_layers=3, block_size=BLOCK)
    data = {"train_file": "train.txt", "val_file": "val.txt"}
    for name, variant in VARIANTS.items():
        argv = lb.variant_argv(
            s, variant, 0, data, tmp_path / "tok", tmp_path / "run", early_step=2, log_every=1
        )
        data_args, model_args, train_args = parse_train_args(argv)
        assert (train_args.max_steps, train_args.seed, train_args.eval_every) == (8, 0, 2)
        trained, expected = build_model(model_args, data_args, tokenizer), build(name)
        for field in lb.variant_fields(variant, SIZE) | {"hidden_size": 0, "num_hidden_layers": 0}:
            assert getattr(trained.config, field) == getattr(expected.config, field), (name, field)
        assert trained.num_parameters() == expected.num_parameters(), name


def test_read_run_skips_intervals_holding_an_evaluation(tmp_path):
    """Step time: median over log intervals without an evaluation; early loss: first eval >= the early step."""
    from safetensors.torch import save_file

    rows = [
        (1, 4.0, None, 0.10),
        (2, 3.9, 3.95, 0.20),  # evaluated after `seconds` was taken: (2, 3] holds it
        (3, 3.8, None, 5.20),
        (4, 3.7, None, 5.30),
        (5, 3.6, 3.65, 5.40),
        (6, 3.5, None, 9.40),
        (6, None, 3.55, 9.90),  # the final evaluation row
    ]
    with open(tmp_path / "metrics.csv", "w", newline="") as f:
        csv.writer(f).writerows(
            [["step", "loss", "eval_loss", "seconds"], *[["" if v is None else v for v in r] for r in rows]]
        )
    (tmp_path / "final_metrics.json").write_text(json.dumps({"eval_loss": 3.55, "step": 6, "seconds": 9.9}))
    (tmp_path / "final").mkdir()
    save_file({"a": torch.zeros(3, 4), "b": torch.zeros(5)}, str(tmp_path / "final" / "model.safetensors"))
    run = lb.read_run(tmp_path, early_step=2)
    assert run["step_time_ms"] == pytest.approx(100.0)  # (1,2], (3,4], (4,5] all 0.1 s
    assert (run["early_loss"], run["early_loss_step"]) == (3.95, 2)
    assert lb.read_run(tmp_path, early_step=3)["early_loss_step"] == 5
    assert (run["final_loss"], run["steps"], run["parameters"]) == (3.55, 6, 17)
    assert lb.mean_std([1.0, 3.0, None]) == {"mean": 2.0, "std": pytest.approx(2**0.5), "n": 2}
    assert lb.mean_std([None]) == {"mean": None, "std": None, "n": 0}


@pytest.mark.parametrize("scheme", ["learned", "alibi"])
def test_extrapolation_refuses_only_beyond_a_learned_table(scheme, tmp_path):
    """Windows of m x L are scored as `sliding_window_perplexity` with stride = window; learned
    positions refuse windows beyond their table, with the model's own error."""
    from hf_lm.metrics.sliding_window import sliding_window_perplexity

    model = HfLmGPTForCausalLM(tiny_gpt_config(position_embedding_type=scheme, max_position_embeddings=8))
    model.save_pretrained(tmp_path)
    stream = torch.randint(3, 97, (200,))
    result = lb.extrapolation_scores(tmp_path, stream, block_size=8)
    for m, entry in result["lengths"].items():
        if scheme == "learned" and int(m) > 1:
            assert "max_position_embeddings=8" in entry["refuses"]
        else:
            expected = sliding_window_perplexity(model.eval(), stream, 8 * int(m), stride=8 * int(m))[
                "perplexity"
            ]
            assert entry["perplexity"] == pytest.approx(expected, rel=1e-6)
    expected = sliding_window_perplexity(model.eval(), stream, 8, stride=4)["perplexity"]
    assert result["sliding"]["perplexity"] == pytest.approx(expected, rel=1e-6)


# ----------------------------------------------------------------------------------------------
# translation and sst2: the entries' commands and the tables (training faked)
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["full", "gpu"])
def test_translation_entry_arguments_parse(tmp_path, preset):
    from training.finetune_translation import parse_args

    s = settings("translation", cell_type="lstm", device="cpu" if preset == "gpu" else "cuda")
    if preset == "gpu":
        s.update(batch_size=128, mixed_precision="bf16")
    for name, entry in TRANSLATION_ENTRIES.items():
        b = lb.Board(name="translation", settings=s, data=tmp_path, out=tmp_path, seed=0)
        data_args, model_args, training_args = parse_args(lb.translation_argv(b, name))
        assert model_args.family == entry.family and model_args.from_scratch
        assert data_args.source_prefix == "" and data_args.split_stems()["validation"] == []
        assert (
            training_args.max_train_seconds,
            training_args.generation_num_beams,
            training_args.num_train_epochs,
        ) == (600, 5, 10)
        if entry.family == "rnn_seq2seq":
            assert model_args.rnn_attention == entry.attention and model_args.cell_type == "lstm"
            assert training_args.learning_rate == 1e-3 and model_args.hidden_size == 512
        else:
            assert training_args.learning_rate == 5e-4 and model_args.num_hidden_layers == 3
        # "cuda" is Trainer's own default; "cpu" is said, with bf16 autocast allowed there
        assert (training_args.use_cpu, training_args.bf16) == (
            (True, True) if preset == "gpu" else (False, False)
        )
        assert training_args.per_device_train_batch_size == (128 if preset == "gpu" else 64)


def test_sst2_entry_arguments_parse(tmp_path):
    """Pretraining is valid for `training.train` (from the shared initialization), every fine-tuning for
    `training.finetune_classification`, with the same budget but the compute-matched control's."""
    from training.finetune_classification import parse_args

    (tmp_path / "init").mkdir()
    (tmp_path / "train.tsv").write_text("sentence\tlabel\na\t0\n")
    b = lb.Board(name="sst2", settings=settings("sst2"), data=tmp_path, out=tmp_path, seed=0)
    argv = lb.pretrain_argv(b, "mlm", tmp_path / "text.txt", tmp_path / "init")
    data_args, model_args, train_args = parse_train_args(argv)
    assert train_args.objective == "mlm" and model_args.init_from == str(tmp_path / "init")
    assert (train_args.max_train_seconds, data_args.block_size, data_args.sample_by) == (900, 128, "line")
    electra = lb.pretrain_argv(b, "electra", tmp_path / "text.txt", tmp_path / "ie")
    assert parse_train_args(electra)[2].objective == "electra"  # the same command but the objective and start
    ours = ("electra", str(tmp_path / "ie"), str(tmp_path / "runs" / "electra_pretrain"))
    assert [x for x in electra if x not in ours] == [
        x for x in argv if x not in ("mlm", str(tmp_path / "init"), str(tmp_path / "runs" / "mlm_pretrain"))
    ]
    budgets = {}
    for name, entry in SST2_ENTRIES.items():
        start = tmp_path / ("pre" if entry.pretraining else "init")
        _, model_args, training_args = parse_args(lb.sst2_finetune_argv(b, name, start))
        assert model_args.model_name_or_path == str(start)
        assert training_args.learning_rate == (1e-4 if entry.pretraining else 5e-4)
        budgets[name] = training_args.max_train_seconds
    assert budgets == {"scratch": 300, "mlm": 300, "electra": 300, "scratch_long": 1200}


class _FakeTokenizer:
    def __len__(self):
        return 321


def _fake_finetune(values: dict):
    """`finetune_row` without training: the fields and metrics of `values[name]`, or an error."""

    def finetune_row(name, module, argv, fields):
        if values[name] is None:
            return {"name": name, **fields, "error": "RuntimeError('boom')", "command": "python -m x"}
        metrics = {"train_samples": 100, "eval_samples": 20, "test_samples": 10, **values[name]}
        training = {"num_parameters": 1000, "train_steps": 5, "train_epochs": 0.5, "train_seconds": 2.5,
                    "train_budget_reached": True, "train_loss": 4.0}  # fmt: skip
        return {
            "name": name,
            **fields,
            **training,
            "metrics": metrics,
            "command": f"python -m {module} {argv[1]}",
        }

    return finetune_row


def test_translation_rows_show_failures_the_published_figure_and_the_target(tmp_path, monkeypatch):
    """A failed entry is reported and the rest kept (the run exits non-zero after writing); each measured
    row carries its published BLEU and the Transformer the target of 37, met or not, greedy / beam."""
    bleu = {"rnn": (10.0, 11.0), "t5": None, "transformer": (36.9, 37.5)}
    values = {k: v and {"test_greedy_bleu": v[0], "test_bleu": v[1]} for k, v in bleu.items()}
    monkeypatch.setattr(lb, "finetune_row", _fake_finetune(values))
    monkeypatch.setattr(lb, "translation_tokenizer", lambda *a: (_FakeTokenizer(), False))
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match=r"\['t5'\]"):
        lb.main(
            [
                "translation",
                "--data",
                str(tmp_path),
                "--output_dir",
                str(out),
                "--entries",
                "rnn,t5,transformer",
                "--device",
                "cpu",
            ]
        )
    saved = json.loads((out / "results.json").read_text())
    assert [row["name"] for row in saved["entries"]] == ["rnn", "t5", "transformer"]
    assert [row.get("published_bleu") for row in saved["entries"]] == [13.76, None, 36.52]
    assert (
        saved["entries"][2]["target_met_greedy"] is False and saved["entries"][2]["target_met_beam"] is True
    )
    assert saved["kind"] == "leaderboard" and saved["tokenizer"]["vocab_size"] == 321
    rows = table_rows((out / "README.md").read_text(), "model")
    assert rows[0].startswith(
        "| GRU seq2seq, no attention | measured | 0.00M | 5 | 0.50 | 2 | 4.000 | 10.00 | 11.00 |"
    )
    assert rows[0].endswith("| 13.76 | — |") and rows[2].endswith("| 36.52 | ≥ 37: no / yes |")
    assert "failed: RuntimeError('boom')" in rows[1] and len(rows) == 3 + 5  # and bentrevett's five
    assert (out / "bleu.png").read_bytes()[:8] == PNG


def test_sst2_tables_without_training(tmp_path, monkeypatch):
    """One row per entry, the pretraining column only where there is one, the control's longer
    budget, the published rows; the pretraining text one sentence per line."""
    calls = {}
    values = {name: {"eval_accuracy": 0.75, "test_accuracy": 0.8123, "test_f1": 0.8} for name in SST2_ENTRIES}
    fake = _fake_finetune(values)
    monkeypatch.setattr(
        lb,
        "finetune_row",
        lambda name, module, argv, fields: calls.setdefault(name, argv) and fake(name, module, argv, fields),
    )
    monkeypatch.setattr(
        "training.finetune_classification.load_classification_dataset",
        lambda *a: {"train": {"sentence": ["good ", "bad", "good"]}},
    )
    monkeypatch.setattr(lb, "shared_tokenizer", lambda *a, **k: (_FakeTokenizer(), False))
    monkeypatch.setattr(lb, "save_initialization", lambda *a: 1234)
    pretrained = {
        "status": "ok",
        "command": "python -m training.train",
        "final_metrics": {"step": 7, "seconds": 9.0},
    }
    monkeypatch.setattr(lb, "train_run", lambda *a: pretrained)
    (tmp_path / "tokenizer").mkdir()
    (tmp_path / "tokenizer" / "leaderboard_settings.json").write_text("{}")
    result = lb.main(
        [
            "sst2",
            "--data",
            str(tmp_path),
            "--output_dir",
            str(tmp_path),
            "--entries",
            "scratch,mlm,scratch_long",
        ]
    )
    assert result["pretraining"]["steps"] == 7 and result["pretraining_sentences"] == 2
    assert calls["scratch_long"][calls["scratch_long"].index("--max_train_seconds") + 1] == "1200.0"
    rows = table_rows((tmp_path / "README.md").read_text(), "model")
    assert (
        len(rows) == 3 + 2
        and "| none |" in rows[0]
        and "| 7 steps, 9 s |" in rows[1]
        and "| none |" in rows[2]
    )
    assert rows[1].endswith("| 75.0 | 81.2 | 80.0 |") and "≈93.0" in rows[3]
    assert (tmp_path / "pretraining_text.txt").read_text() == "good\nbad\n"


# ----------------------------------------------------------------------------------------------
# Smoke runs on the real data (real training runs)
# ----------------------------------------------------------------------------------------------


def _smoke(board: str, tmp_path, *argv) -> tuple[dict, str]:
    result = lb.main([board, "--smoke", "--output_dir", str(tmp_path), *argv])
    saved = json.loads((tmp_path / "results.json").read_text())
    readme = (tmp_path / "README.md").read_text()
    assert saved["kind"] == "leaderboard" and saved["board"] == board and saved["smoke"] is True
    assert saved["hardware"]["cpu_model"] and saved["hardware"]["torch"] == torch.__version__
    assert readme == "\n".join(lb.markdown(saved, tmp_path)).rstrip("\n") + "\n"  # the rendering of the JSON
    assert result["seed"] == 0
    return saved, readme


@pytest.mark.slow
@needs[TINY_SHAKESPEARE]
def test_lm_smoke_run(tmp_path):
    """The n-gram fits and a budgeted run with the cosine schedule calibrated by a probe (every entry's
    command is checked by `test_every_lm_entry_is_a_valid_training_command`)."""
    saved, readme = _smoke(
        "lm",
        tmp_path,
        "--entries",
        "ngram,gpt_rope",
        "--ngram_orders",
        "1,3",
        "--schedule",
        "cosine",
        "--num_threads",
        "1",
    )
    ngram, rope = saved["entries"]
    for row in (ngram, rope):
        assert 0 < row["val_loss"] < math.log(saved["data"]["vocab_size"]) + 1 and row["label"] in readme
        assert row["perplexity"] == pytest.approx(math.exp(row["val_loss"]))
    assert [o["order"] for o in ngram["orders"]] == [1, 3] and ngram["best_order"] == 3  # context helps
    assert ngram["orders"][0]["val_loss"] > ngram["orders"][1]["val_loss"] == ngram["val_loss"]
    plan = rope["calibration"]
    assert (
        plan["schedule"] == "cosine" and plan["step_seconds"] > 0 and 1 <= rope["steps"] <= plan["max_steps"]
    )
    assert (
        "--lr_scheduler cosine" in rope["command"] and f"--max_steps {plan['max_steps']}" in rope["command"]
    )
    assert "| 1.88 |" in readme and (tmp_path / "val_loss.png").read_bytes()[:8] == PNG
    assert (tmp_path / "loss_curves.png").read_bytes()[:8] == PNG


@pytest.mark.slow
@needs[TINY_SHAKESPEARE]
def test_ablations_smoke_run_and_reuse(tmp_path):
    argv = ["--entries", "mqa", "--seeds", "0,1"]
    saved, readme = _smoke("ablations", tmp_path, *argv)
    assert [v["name"] for v in saved["variants"]] == ["baseline", "mqa"] and saved["seeds"] == [0, 1]
    assert saved["data"]["vocab_size"] == 68  # 65 characters and three special tokens, shared by all runs
    for row in saved["variants"]:
        assert [r["status"] for r in row["runs"]] == ["ok", "ok"], row["runs"]
        assert (
            row["final_loss"]["n"] == 2
            and row["final_loss"]["std"] is not None
            and row["step_time_ms"]["mean"] > 0
        )
        assert row["final_loss"]["mean"] < math.log(68)  # it learned: below the uniform 68-way loss
    assert saved["variants"][1]["parameters"]["mean"] < saved["variants"][0]["parameters"]["mean"]
    assert [r.split("|")[1].strip() for r in table_rows(readme, "variant")] == ["baseline", "mqa"]
    assert (tmp_path / "ablations.png").read_bytes()[:8] == PNG
    again = lb.main(
        ["ablations", "--smoke", "--output_dir", str(tmp_path), *argv]
    )  # the same command reuses every run
    assert {r["status"] for row in again["variants"] for r in row["runs"]} == {"reused"}


@pytest.mark.slow
@needs[TINY_SHAKESPEARE]
def test_length_extrapolation_smoke_run(tmp_path):
    saved, readme = _smoke("length_extrapolation", tmp_path, "--entries", "learned,alibi")
    rows = {r["scheme"]: r for r in saved["schemes"]}
    assert "refuses" in rows["learned"]["lengths"]["8"] and "refuses" not in rows["learned"]["lengths"]["1"]
    assert all("perplexity" in e for e in rows["alibi"]["lengths"].values()) and saved["block_size"] == 16
    assert "| learned | " in readme and "refuses" in readme
    assert (tmp_path / "length_extrapolation.png").read_bytes()[:8] == PNG


def _check_budget(row: dict, budget: float, max_epochs: float) -> None:
    assert "error" not in row and row["train_steps"] >= 1 and row["num_parameters"] > 0
    if row["train_budget_reached"]:  # Trainer's clock starts before the callback's: the budget, plus one step
        assert budget <= row["train_seconds"] < budget + 30
    else:
        assert row["train_epochs"] == pytest.approx(max_epochs)


@pytest.mark.slow
@needs[MULTI30K]
def test_translation_smoke_run_reuses_its_tokenizer(tmp_path):
    saved, readme = _smoke("translation", tmp_path, "--entries", "rnn_bahdanau,bart")
    assert (saved["train_pairs"], saved["test_pairs"], saved["tokenizer"]["reused"]) == (1000, 32, False)
    for row in saved["entries"]:
        _check_budget(row, 2.0, 10.0)
        assert (
            all(0 <= row[f"test_bleu_{d}"] <= 100 for d in ("greedy", "beam")) and row["test_samples"] == 32
        )
        assert (
            f"--family {row['family']}" in row["command"]
            and (tmp_path / "runs" / row["name"] / "test_predictions.txt").is_file()
        )
    assert "GRU seq2seq + Bahdanau attention" in readme and (tmp_path / "bleu.png").read_bytes()[:8] == PNG
    again = lb.main(["translation", "--smoke", "--output_dir", str(tmp_path), "--entries", "t5"])
    assert (
        again["tokenizer"]["reused"] is True
        and again["tokenizer"]["vocab_size"] == saved["tokenizer"]["vocab_size"]
    )


@pytest.mark.slow
@needs[SST2]
def test_sst2_smoke_run(tmp_path):
    """MLM pretraining, then both default entries: the pretrained one from the pretraining's folder."""
    saved, readme = _smoke("sst2", tmp_path)
    pre = saved["pretraining"]
    assert pre["steps"] >= 1 and math.isfinite(pre["eval_loss"]) and 0 <= pre["eval_mlm_accuracy"] <= 1
    scratch, mlm = saved["entries"]
    for row in (scratch, mlm):
        _check_budget(row, 2.0, 10.0)
        assert (
            all(0 <= row[k] <= 1 for k in ("dev_accuracy", "test_accuracy", "test_f1"))
            and row["test_samples"] == 200
        )
    assert f"--model_name_or_path {tmp_path / 'init'} " in scratch["command"]
    assert f"--model_name_or_path {tmp_path / 'runs' / 'mlm_pretrain' / 'final'} " in mlm["command"]
    assert scratch["num_parameters"] == mlm["num_parameters"]  # the same architecture
    assert (
        "python -m training.train --objective mlm" in readme
        and (tmp_path / "accuracy.png").read_bytes()[:8] == PNG
    )


@pytest.mark.slow
@needs[MULTI30K]
def test_mask_predict_smoke_run_writes_bleu_per_iteration_and_the_trace(tmp_path):
    saved, readme = _smoke("mask_predict", tmp_path, "--iterations", "1,3")
    decoded = saved["mask_predict"]
    assert [r["iterations"] for r in decoded["by_iterations"]] == [1, 3]
    assert all(0 <= r["test_bleu"] <= 100 for r in decoded["by_iterations"])
    assert {"test_bleu", "test_greedy_bleu"} <= saved["entries"][0]["metrics"].keys()
    trace = decoded["trace"]
    length = trace[0]["masked"]  # iteration 0 masks every token
    assert [r["masked"] for r in trace] == [length, length * 2 // 3, length * 1 // 3] and length == decoded[
        "trace_length"
    ]
    assert "Mask-Predict T = 3" in readme and "## Mask-Predict trace" in readme
    for name in ("trace.png", "bleu_vs_iterations.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG
