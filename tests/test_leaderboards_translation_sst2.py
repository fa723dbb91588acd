"""The translation (Multi30k) and SST-2 leaderboards: `benchmarks/leaderboard_translation.py` and
`benchmarks/leaderboard_sst2.py`. The smoke runs need the shared data and skip without it."""

import json
import math
import os

import pytest
import torch
from conftest import SHARED_DATA

from benchmarks import leaderboard_sst2 as sst2
from benchmarks import leaderboard_translation as translation
from benchmarks.bench_common import parse_entries, reuse_or_train_tokenizer

MULTI30K = os.path.join(SHARED_DATA, "multi30k")
SST2 = os.path.join(SHARED_DATA, "sst2")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------------------------
# arguments and the shared helpers
# ---------------------------------------------------------------------------------------------


def test_parse_entries():
    known = translation.ENTRIES
    assert parse_entries(None, known) == list(known)
    assert parse_entries("t5, rnn,t5", known) == ["t5", "rnn"]  # order kept, duplicates dropped
    with pytest.raises(ValueError, match=r"unknown \['gpt'\]"):
        parse_entries("t5,gpt", known)
    with pytest.raises(SystemExit):
        translation.main(["--entries", "lstm_only", "--data_dir", MULTI30K])
    with pytest.raises(SystemExit):
        sst2.main(["--entries", "scratch,bow", "--data_dir", SST2])


def test_flags_override_the_preset():
    args = translation.build_parser().parse_args(["--smoke", "--budget_seconds", "7", "--num_beams", "3"])
    settings = translation.resolve(args, translation.PRESETS["smoke"])
    assert settings["budget_seconds"] == 7.0 and settings["num_beams"] == 3
    assert settings["hidden_size"] == translation.PRESETS["smoke"]["hidden_size"]
    assert (
        translation.PRESETS["full"].keys()
        == translation.PRESETS["smoke"].keys()
        == translation.PRESETS["gpu"].keys()
    )
    assert sst2.PRESETS["full"].keys() == sst2.PRESETS["smoke"].keys() == sst2.HELP.keys()
    for parser in (translation.build_parser(), sst2.build_parser()):
        assert "--budget_seconds" in parser.format_help()  # renders: no unescaped % in a help string


def test_translation_entry_arguments_parse(tmp_path):
    """Every entry's command line is valid for `training.finetune_translation` and says what it should."""
    from training.finetune_translation import parse_args

    args = translation.build_parser().parse_args(["--data_dir", str(tmp_path), "--cell_type", "lstm"])
    settings = translation.resolve(args, translation.PRESETS["full"])
    for name, entry in translation.ENTRIES.items():
        argv = translation.entry_argv(name, settings, args, tmp_path / "tok", tmp_path / name)
        data_args, model_args, training_args = parse_args(argv)
        assert model_args.family == entry.family and model_args.from_scratch
        assert model_args.tokenizer_name_or_path == str(tmp_path / "tok")
        assert data_args.source_prefix == "" and data_args.split_stems()["validation"] == []
        assert training_args.max_train_seconds == 600 and training_args.generation_num_beams == 5
        assert training_args.num_train_epochs == 10 and training_args.seed == 0
        if entry.is_rnn:
            assert model_args.rnn_attention == entry.attention and model_args.cell_type == "lstm"
            assert training_args.learning_rate == 1e-3 and model_args.hidden_size == 512
        else:
            assert training_args.learning_rate == 5e-4 and model_args.num_hidden_layers == 3
        assert translation.command_line("training.finetune_translation", argv).startswith(
            "python -m training.finetune_translation --data_dir"
        )
    assert {e.attention for e in translation.ENTRIES.values() if e.is_rnn} == {
        "none",
        "bahdanau",
        "luong_general",
    }
    assert not training_args.use_cpu and not training_args.bf16  # auto: Trainer's own device choice


def test_translation_device_and_gpu_preset(tmp_path, monkeypatch):
    """`--device cpu` reaches Trainer as `use_cpu`; the gpu preset's batch and mixed precision reach
    the run; asking for CUDA without a GPU is refused."""
    from training.finetune_translation import parse_args

    args = translation.build_parser().parse_args(
        ["--device", "cpu", "--preset", "gpu", "--mixed_precision", "bf16", "--data_dir", str(tmp_path)]
    )  # any existing folder: the run's arguments are parsed, no data read
    settings = translation.resolve(args, translation.PRESETS[args.preset])
    argv = translation.entry_argv("transformer", settings, args, tmp_path / "tok", tmp_path / "run")
    _, _, training_args = parse_args(argv)
    assert training_args.use_cpu and training_args.bf16 and training_args.per_device_train_batch_size == 128
    assert training_args.max_train_seconds == 600
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        translation.main(["--device", "cuda", "--data_dir", str(tmp_path)])
    with pytest.raises(SystemExit):
        translation.main(["--smoke", "--preset", "gpu", "--data_dir", str(tmp_path)])


def test_sst2_entry_arguments_parse(tmp_path):
    """The pretraining command is valid for `training.train` (MLM from the shared initialization) and
    every fine-tuning command for `training.finetune_classification`, with the same budget except the
    compute-matched control."""
    from training.args import parse_args as parse_train_args
    from training.finetune_classification import parse_args

    (tmp_path / "init").mkdir()
    (tmp_path / "train.tsv").write_text("sentence\tlabel\na\t0\n")
    args = sst2.build_parser().parse_args(["--data_dir", str(tmp_path)])
    settings = sst2.resolve(args, sst2.PRESETS["full"])
    argv = sst2.pretrain_argv(
        settings, args, tmp_path / "text.txt", tmp_path / "init", tmp_path / "tok", tmp_path / "pre"
    )
    data_args, model_args, train_args = parse_train_args(argv)
    assert train_args.objective == "mlm" and model_args.init_from == str(tmp_path / "init")
    assert train_args.max_train_seconds == 900 and data_args.block_size == 128
    assert data_args.tokenizer_name_or_path == str(tmp_path / "tok") and data_args.sample_by == "line"

    budgets = {}
    for name, entry in sst2.ENTRIES.items():
        start = tmp_path / ("pre" if entry.pretrained else "init")
        _, model_args, training_args = parse_args(
            sst2.finetune_argv(name, settings, args, start, tmp_path / "tok", tmp_path / name)
        )
        assert model_args.model_name_or_path == str(start)
        assert training_args.learning_rate == (1e-4 if entry.pretrained else 5e-4)
        budgets[name] = training_args.max_train_seconds
    assert budgets == {"scratch": 300, "mlm": 300, "electra": 300, "scratch_long": 1200}
    # ELECTRA's pretraining: the same command but the objective, so the same wall-clock budget
    electra = sst2.pretrain_argv(
        settings,
        args,
        tmp_path / "text.txt",
        tmp_path / "init_electra",
        tmp_path / "tok",
        tmp_path / "pre",
        "electra",
    )
    _, _, train_args = parse_train_args(electra)
    assert train_args.objective == "electra" and train_args.max_train_seconds == 900
    assert [x for x in electra if x not in ("electra", str(tmp_path / "init_electra"))] == [
        x for x in argv if x not in ("mlm", str(tmp_path / "init"))
    ]


def test_reuse_or_train_tokenizer(tmp_path):
    from training.data.tokenizer import train_tokenizer

    calls = []

    def train():
        calls.append(1)
        return train_tokenizer(["ein hund", "a dog"] * 5, kind="char", vocab_size=40)

    first, reused = reuse_or_train_tokenizer(tmp_path / "tok", {"vocab": 40}, train)
    assert not reused and len(calls) == 1
    again, reused = reuse_or_train_tokenizer(tmp_path / "tok", {"vocab": 40}, train)
    assert reused and len(calls) == 1 and again.get_vocab() == first.get_vocab()
    _, reused = reuse_or_train_tokenizer(tmp_path / "tok", {"vocab": 41}, train)
    assert not reused and len(calls) == 2  # other settings: trained anew


def test_cells_and_bar_chart(tmp_path):
    assert [translation.fmt(v) for v in (None, True, 1234, 3.14159, "x")] == [
        "—",
        "yes",
        "1,234",
        "3.14",
        "x",
    ]
    assert translation.millions(2_500_000) == "2.50M" and sst2.percent(0.8766) == "87.7"
    table = translation.markdown_table(["a", "b"], [["1", "2"]])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1 | 2 |"]
    path = translation.bar_chart(
        tmp_path / "chart.png",
        ["m1", "m2"],
        {"greedy": [1.0, None], "beam": [2.0, 3.0]},
        "t",
        "y",
        [("ref", 5.0)],
    )
    assert path.read_bytes()[:8] == PNG_MAGIC


def _fake_row(name, **values):
    row = dict(
        num_parameters=1000, train_steps=5, train_epochs=0.5, train_seconds=2.5, train_budget_reached=True,
        train_loss=4.0, total_seconds=3.0,
    )  # fmt: skip
    row.update(values, name=name, metrics={"train_samples": 100, "eval_samples": 20, "test_samples": 10})
    return row


class _FakeTokenizer:
    def __len__(self):
        return 321


def test_translation_failed_entry_is_reported_and_the_rest_kept(tmp_path, monkeypatch):
    """An entry that raises becomes a "failed" row; the others are still written, and the run exits non-zero."""

    def run_entry(name, argv):
        if name == "t5":
            raise RuntimeError("boom")
        entry = translation.ENTRIES[name]
        return _fake_row(
            name, label=entry.label, family=entry.family, attention=entry.attention, test_bleu_greedy=12.5,
            test_bleu_beam=13.25, test_bleu_greedy_lowercase=13.0, test_samples=10,
        )  # fmt: skip

    monkeypatch.setattr(translation, "shared_tokenizer", lambda *a: (_FakeTokenizer(), False))
    monkeypatch.setattr(translation, "run_entry", run_entry)
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match=r"\['t5'\]"):
        translation.main(
            ["--data_dir", str(tmp_path), "--output_dir", str(out), "--entries", "rnn_luong,t5,bart"]
        )
    saved = json.loads((out / "results.json").read_text())
    assert [row["name"] for row in saved["entries"]] == ["rnn_luong", "t5", "bart"]
    assert saved["entries"][1]["error"] == "RuntimeError('boom')" and saved["tokenizer"]["vocab_size"] == 321
    rows = _table_rows((out / "results.md").read_text())
    assert rows[0].startswith(
        "| GRU seq2seq + Luong (general) attention | measured | 0.00M | 5 | 0.50 | 2 | 4.000 | 12.50 | 13.25 |"
    )
    assert "failed: RuntimeError('boom')" in rows[1] and len(rows) == 3 + len(translation.REFERENCES)
    assert (out / "bleu.png").read_bytes()[:8] == PNG_MAGIC
    device = translation.resolve_device("auto")  # the default: the GPU when there is one
    assert saved["device"] == device and saved["preset"] == ("gpu" if device == "cuda" else "full")


def test_translation_rows_show_the_published_figure_and_the_target(tmp_path, monkeypatch):
    """Each measured row carries the published BLEU it is held against (LSTM 13.76, Bahdanau 28.30,
    Transformer 36.52) and the Transformer the issue's target of 37, met or not, greedy / beam."""
    bleu = {"rnn": (10.0, 11.0), "rnn_bahdanau": (20.0, 21.0), "transformer": (36.9, 37.5)}

    def run_entry(name, argv):
        entry = translation.ENTRIES[name]
        greedy, beam = bleu[name]
        return _fake_row(
            name, label=entry.label, family=entry.family, attention=entry.attention, test_bleu_greedy=greedy,
            test_bleu_beam=beam, test_bleu_greedy_lowercase=greedy, test_samples=10,
        )  # fmt: skip

    monkeypatch.setattr(translation, "shared_tokenizer", lambda *a: (_FakeTokenizer(), False))
    monkeypatch.setattr(translation, "run_entry", run_entry)
    result = translation.main(
        [
            "--data_dir",
            str(tmp_path),
            "--output_dir",
            str(tmp_path),
            "--entries",
            "rnn,rnn_bahdanau,transformer",
        ]
    )
    assert [row["published_bleu"] for row in result["entries"]] == [13.76, 28.30, 36.52]
    assert (
        result["entries"][2]["target_met_greedy"] is False and result["entries"][2]["target_met_beam"] is True
    )
    rows = _table_rows((tmp_path / "results.md").read_text())
    assert rows[0].endswith("| 13.76 | — |") and rows[1].endswith("| 28.30 | — |")
    assert rows[2].endswith("| 36.52 | ≥ 37: no / yes |")


def test_sst2_tables_without_training(tmp_path, monkeypatch):
    """results.md/json from faked runs: one row per entry, the pretraining column only for `mlm`,
    the compute-matched control's budget, and the published rows."""
    calls = {}

    def run_entry(name, argv):
        calls[name] = argv
        return _fake_row(
            name, label=sst2.ENTRIES[name].label, pretrained=sst2.ENTRIES[name].pretrained,
            dev_accuracy=0.75, test_accuracy=0.8123, test_f1=0.8, dev_samples=20, test_samples=10,
        )  # fmt: skip

    monkeypatch.setattr(sst2, "training_sentences", lambda *a: ["good", "bad"])
    monkeypatch.setattr(sst2, "shared_tokenizer", lambda *a: (_FakeTokenizer(), False))
    monkeypatch.setattr(sst2, "save_initialization", lambda *a: 1234)
    monkeypatch.setattr(sst2, "pretrain", lambda *a: ({"step": 7, "seconds": 9.0, "eval_loss": 5.0}, False))
    monkeypatch.setattr(sst2, "run_entry", run_entry)
    (tmp_path / "tokenizer").mkdir()
    (tmp_path / "tokenizer" / "leaderboard_settings.json").write_text("{}")
    result = sst2.main(
        ["--data_dir", str(tmp_path), "--output_dir", str(tmp_path), "--entries", "scratch,mlm,scratch_long"]
    )
    assert result["pretraining"]["steps"] == 7 and result["pretraining_sentences"] == 2
    assert calls["scratch_long"][calls["scratch_long"].index("--max_train_seconds") + 1] == "1200.0"
    rows = _table_rows((tmp_path / "results.md").read_text())
    assert len(rows) == 3 + len(sst2.REFERENCES)
    assert "| none |" in rows[0] and "| 7 steps, 9 s |" in rows[1] and "| none |" in rows[2]
    assert rows[1].endswith("| 75.0 | 81.2 | 80.0 |") and "≈93.0" in rows[3]
    assert (tmp_path / "pretraining_text.txt").read_text() == "good\nbad\n"  # one sentence per line


# ---------------------------------------------------------------------------------------------
# smoke runs on the real data
# ---------------------------------------------------------------------------------------------


def _table_rows(markdown: str) -> list[str]:
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| model"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def _check_budget(row: dict, budget: float, max_epochs: float) -> None:
    assert row["train_steps"] >= 1 and row["num_parameters"] > 0
    if row["train_budget_reached"]:
        # Trainer's clock starts before the callback's: it has run at least the budget, plus one step
        assert budget <= row["train_seconds"] < budget + 30
    else:
        assert row["train_epochs"] == pytest.approx(max_epochs)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(MULTI30K), reason=f"Multi30k data not found at {MULTI30K}")
def test_translation_smoke_run(tmp_path):
    """All six entries in the smoke configuration (~20 s): files written, one row per entry, BLEU in
    range; a second run of one entry reuses the shared tokenizer."""
    output_dir = tmp_path / "lb"
    result = translation.main(["--smoke", "--data_dir", MULTI30K, "--output_dir", str(output_dir)])

    saved = json.loads((output_dir / "results.json").read_text())
    assert saved["smoke"] is True and saved["seed"] == 0 and saved["budget_seconds"] == 2.0
    assert saved["preset"] == "smoke" and saved["device"] in ("cpu", "cuda")
    assert saved["hardware"]["cores_available"] >= 1 and saved["hardware"]["torch"]
    assert saved["cell_type"] == "gru" and saved["tokenizer"]["reused"] is False
    assert [row["name"] for row in saved["entries"]] == list(translation.ENTRIES)
    assert saved["train_pairs"] == 1000 and saved["test_pairs"] == 32
    for row in saved["entries"]:
        assert "error" not in row, row
        for key in ("test_bleu_greedy", "test_bleu_beam", "test_bleu_greedy_lowercase"):
            assert 0 <= row[key] <= 100, (row["name"], key)
        assert math.isfinite(row["train_loss"]) and row["test_samples"] == 32
        assert row["command"].startswith("python -m training.finetune_translation ")
        assert f"--family {row['family']}" in row["command"] and "--max_train_seconds 2.0" in row["command"]
        _check_budget(row, 2.0, 10.0)
        assert (output_dir / "runs" / row["name"] / "test_predictions.txt").is_file()
    assert [ref["bleu"] for ref in saved["references"]] == [13.76, 20.61, 28.30, 34.14, 36.52]
    assert result["entries"][0]["test_bleu_beam"] == saved["entries"][0]["test_bleu_beam"]

    markdown = (output_dir / "results.md").read_text()
    rows = _table_rows(markdown)
    assert len(rows) == len(translation.ENTRIES) + len(translation.REFERENCES)
    assert sum("published, not measured here" in row for row in rows) == len(translation.REFERENCES)
    assert (
        "GRU seq2seq + Bahdanau attention" in markdown
        and "python -m training.finetune_translation" in markdown
    )
    assert (output_dir / "bleu.png").read_bytes()[:8] == PNG_MAGIC

    again = translation.main(
        ["--smoke", "--data_dir", MULTI30K, "--output_dir", str(output_dir), "--entries", "t5"]
    )
    assert again["tokenizer"]["reused"] is True and [row["name"] for row in again["entries"]] == ["t5"]
    assert again["tokenizer"]["vocab_size"] == saved["tokenizer"]["vocab_size"]


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(SST2), reason=f"SST-2 data not found at {SST2}")
def test_sst2_smoke_run(tmp_path):
    """Pretraining and both default entries in the smoke configuration (~20 s): files written, one
    row per entry, accuracies in range, the pretrained entry fine-tuned from the pretraining's folder."""
    output_dir = tmp_path / "lb"
    sst2.main(["--smoke", "--data_dir", SST2, "--output_dir", str(output_dir)])

    saved = json.loads((output_dir / "results.json").read_text())
    assert saved["smoke"] is True and saved["seed"] == 0
    assert saved["budget_seconds"] == 2.0 and saved["pretrain_seconds"] == 3.0
    assert saved["hardware"]["cpu_model"] and saved["hardware"]["transformers"]
    assert [row["name"] for row in saved["entries"]] == ["scratch", "mlm"]
    pre = saved["pretraining"]
    assert pre["steps"] >= 1 and math.isfinite(pre["eval_loss"]) and 0 <= pre["eval_mlm_accuracy"] <= 1
    assert pre["command"].startswith("python -m training.train --objective mlm")
    assert (output_dir / "runs" / "mlm_pretrain" / "final" / "config.json").is_file()
    for row in saved["entries"]:
        assert "error" not in row, row
        for key in ("dev_accuracy", "test_accuracy", "test_f1"):
            assert 0 <= row[key] <= 1, (row["name"], key)
        assert row["dev_samples"] == 200 and row["test_samples"] == 200
        _check_budget(row, 2.0, 10.0)
    scratch, mlm = saved["entries"]
    assert f"--model_name_or_path {output_dir / 'init'} " in scratch["command"]
    assert f"--model_name_or_path {output_dir / 'runs' / 'mlm_pretrain' / 'final'} " in mlm["command"]
    assert scratch["num_parameters"] == mlm["num_parameters"]  # the same architecture
    assert [ref["accuracy"] for ref in saved["references"]] == [0.93, 0.80]

    markdown = (output_dir / "results.md").read_text()
    rows = _table_rows(markdown)
    assert len(rows) == 2 + len(sst2.REFERENCES)
    assert sum("published, not measured here" in row for row in rows) == len(sst2.REFERENCES)
    assert "python -m training.train --objective mlm" in markdown
    assert (output_dir / "accuracy.png").read_bytes()[:8] == PNG_MAGIC
