"""Sequence-classification fine-tuning (`training.finetune_classification`) and the offline
accuracy `evaluate` module (`hf_lm/metrics/accuracy`)."""

import csv
import json
import logging
import os
import random
import subprocess

import pytest
import torch
from conftest import REPO_ROOT, REPORT_THE_GROUP_AT_EXIT, SHARED_DATA, TORCHRUN_2
from finetune_checks import QUICK_RUN, assert_accumulation_equals_large_batch

from training import finetune_classification
from training.finetune_classification import (
    ClassificationDataArguments,
    ClassificationModelArguments,
    finetune,
    label_mapping,
    load_classification_dataset,
    parse_args,
)
from training.trainer_common import load_tokenizer

METRIC_DIR = os.path.join(REPO_ROOT, "hf_lm", "metrics", "accuracy")
SST2 = os.path.join(SHARED_DATA, "sst2")

# ---------------------------------------------------------------------------------------------
# the accuracy module
# ---------------------------------------------------------------------------------------------


@pytest.fixture(params=["folder", "file"])
def accuracy(request, monkeypatch):
    import evaluate

    monkeypatch.setenv("HF_EVALUATE_OFFLINE", "1")
    location = METRIC_DIR if request.param == "folder" else os.path.join(METRIC_DIR, "accuracy.py")
    return evaluate.load(location, keep_in_memory=True)


def test_accuracy_binary_by_hand(accuracy):
    predictions = [1, 1, 0, 1, 0, 0, 1, 0, 1, 1]
    references = [1, 0, 0, 1, 1, 0, 1, 0, 0, 1]
    # by hand: TP = 4 (0, 3, 6, 9), FP = 2 (1, 8), FN = 1 (4), TN = 3 (2, 5, 7)
    result = accuracy.compute(predictions=predictions, references=references)
    assert result == pytest.approx({"accuracy": 7 / 10, "precision": 4 / 6, "recall": 4 / 5, "f1": 8 / 11})
    # the other class as positive: TP = 3, FP = 1, FN = 2
    flipped = accuracy.compute(predictions=predictions, references=references, pos_label=0)
    assert flipped == pytest.approx({"accuracy": 0.7, "precision": 3 / 4, "recall": 3 / 5, "f1": 6 / 9})
    assert accuracy.compute(predictions=predictions, references=references, normalize=False)["accuracy"] == 7
    weighted = accuracy.compute(
        predictions=[1, 0, 1], references=[1, 1, 0], sample_weight=[2.0, 1.0, 1.0], average=None
    )
    assert weighted == pytest.approx({"accuracy": 2 / 4})


def test_accuracy_multiclass_by_hand(accuracy):
    predictions, references = [0, 2, 1, 2, 0, 1], [0, 1, 1, 2, 2, 1]
    # per class (P, R, F1): 0 -> (1/2, 1, 2/3); 1 -> (1, 2/3, 4/5); 2 -> (1/2, 1/2, 1/2); supports 1, 3, 2
    macro = accuracy.compute(predictions=predictions, references=references)  # "auto" -> macro
    assert macro == pytest.approx(
        {
            "accuracy": 4 / 6,
            "precision": (1 / 2 + 1 + 1 / 2) / 3,
            "recall": (1 + 2 / 3 + 1 / 2) / 3,
            "f1": (2 / 3 + 4 / 5 + 1 / 2) / 3,
        }
    )
    weighted = accuracy.compute(predictions=predictions, references=references, average="weighted")
    assert weighted["recall"] == pytest.approx(4 / 6)  # support-weighted recall is accuracy
    assert weighted["f1"] == pytest.approx((2 / 3 + 3 * 4 / 5 + 2 * 1 / 2) / 6)
    with pytest.raises(ValueError, match="average='binary'"):
        accuracy.compute(predictions=predictions, references=references, average="binary")
    with pytest.raises(ValueError, match="`average`"):
        accuracy.compute(predictions=predictions, references=references, average="micro")


def test_accuracy_zero_division_counts_as_zero(accuracy):
    # no positive prediction and no positive reference: precision, recall and F1 are 0/0 -> 0
    result = accuracy.compute(predictions=[0, 0, 0], references=[0, 0, 0])
    assert result == {"accuracy": 1.0, "precision": 0.0, "recall": 0.0, "f1": 0.0}


# ---------------------------------------------------------------------------------------------
# data, labels and arguments
# ---------------------------------------------------------------------------------------------


def _write_tsv(path, rows, header=("sentence", "label")):
    path.write_text("\n".join("\t".join(map(str, row)) for row in [header, *rows]) + "\n", encoding="utf-8")


def test_tsv_keeps_quotes_and_finds_dev_split(tmp_path):
    _write_tsv(tmp_path / "train.tsv", [('he said "wow', 1), ("it 's bad '", 0)])
    _write_tsv(tmp_path / "dev.tsv", [('"quoted" text', 0)])
    raw = load_classification_dataset(ClassificationDataArguments(data_dir=str(tmp_path)))
    assert sorted(raw) == ["train", "validation"]
    assert raw["train"]["sentence"] == ['he said "wow', "it 's bad '"]
    assert raw["validation"]["sentence"] == ['"quoted" text']


def test_json_lines_and_sample_limits(tmp_path):
    rows = [{"text": f"text {i}", "label": "pos" if i % 2 else "neg"} for i in range(10)]
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(row) for row in rows))
    args = ClassificationDataArguments(
        train_file=str(tmp_path / "train.jsonl"), text_column="text", max_train_samples=4
    )
    raw = load_classification_dataset(args)
    assert raw["train"]["text"] == ["text 0", "text 1", "text 2", "text 3"]
    assert label_mapping(raw, "label") == ({"neg": 0, "pos": 1}, {0: "neg", 1: "pos"})


@pytest.mark.parametrize(
    "labels, class_names, expected",
    [
        ([0, 1, 1], None, ({0: 0, 1: 1}, {0: "LABEL_0", 1: "LABEL_1"})),
        ([1, 0], ["negative", "positive"], ({0: 0, 1: 1}, {0: "negative", 1: "positive"})),
        ([5, 1, 3], None, ({1: 0, 3: 1, 5: 2}, {0: "1", 1: "3", 2: "5"})),  # gaps: renumbered
    ],
)
def test_label_mapping(labels, class_names, expected):
    import datasets

    raw = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"label": labels})})
    assert label_mapping(raw, "label", class_names) == expected


def test_label_mapping_errors():
    import datasets

    def raw(labels):
        return datasets.DatasetDict({"train": datasets.Dataset.from_dict({"label": labels})})

    with pytest.raises(ValueError, match="class labels"):
        label_mapping(raw([0.5, 1.0]), "label")
    with pytest.raises(ValueError, match="at least two classes"):
        label_mapping(raw([1, 1]), "label")
    with pytest.raises(ValueError, match="`class_names` names 3"):
        label_mapping(raw([0, 1]), "label", ["a", "b", "c"])


def test_argument_errors(tmp_path):
    _write_tsv(tmp_path / "train.tsv", [("a", 0), ("b", 1)])
    with pytest.raises(ValueError, match="exactly one of `model_name_or_path` or `from_scratch`"):
        ClassificationModelArguments()
    with pytest.raises(ValueError, match="`preset`"):
        ClassificationModelArguments(from_scratch=True, preset="gpt")
    # a run's folder, not its final/: transformers advised installing sentencepiece, after the data
    (tmp_path / "run" / "final").mkdir(parents=True)
    (tmp_path / "run" / "final" / "config.json").write_text("{}")
    run = ClassificationModelArguments(model_name_or_path=str(tmp_path / "run"))
    with pytest.raises(ValueError, match=r"--model_name_or_path .* without a config.json.*model is .*final"):
        load_tokenizer(run, run.model_name_or_path)
    with pytest.raises(ValueError, match="`data_dir`"):
        ClassificationDataArguments()
    with pytest.raises(ValueError, match="`max_train_samples`"):
        ClassificationDataArguments(data_dir=str(tmp_path), max_train_samples=0)
    # two classes of one name (a typo) were one label in label2id, and the pipeline said it for both
    for names in ("negative,negative", "negative,,positive", "negative, "):
        with pytest.raises(ValueError, match="`class_names` must be distinct non-empty names"):
            ClassificationDataArguments(data_dir=str(tmp_path), class_names=names)
    names = ClassificationDataArguments(data_dir=str(tmp_path), class_names="negative, positive")
    assert names.class_name_list() == ["negative", "positive"]
    # TrainingArguments flags ride along, with this script's defaults
    data_args, model_args, training_args = parse_args(
        ["--data_dir", str(tmp_path), "--from_scratch", "--output_dir", str(tmp_path / "out")]
    )
    assert model_args.from_scratch and data_args.class_name_list() is None
    assert training_args.eval_strategy == "epoch" and training_args.report_to == []
    with pytest.raises(ValueError, match="needs a validation split"):
        finetune(data_args, model_args, training_args)  # train.tsv only, evaluating every epoch


# ---------------------------------------------------------------------------------------------
# gradient accumulation equals one large batch
# ---------------------------------------------------------------------------------------------


def _toy_sentiment(path, n, seed):
    """Sentences of 2-9 filler words with one sentiment word; label = the sentiment word's."""
    rng = random.Random(seed)
    filler = "the a film movie plot actor story scene was is very quite really".split()
    cue = {"good": 1, "great": 1, "fine": 1, "bad": 0, "awful": 0, "dull": 0}
    rows = []
    for _ in range(n):
        words = rng.choices(filler, k=rng.randint(2, 9))
        word = rng.choice(sorted(cue))
        words.insert(rng.randint(0, len(words)), word)
        rows.append((" ".join(words), cue[word]))
    _write_tsv(path, rows)


def _masked_lm_folder(path, texts):
    """A fresh tiny `HfLmBertForMaskedLM` and its tokenizer saved as a pretraining run would.

    Both runs of a comparison load it, so they share the tokenizer: WordPiece training is not
    deterministic from one call to the next (huggingface/tokenizers#1794, hash-map order).
    """
    import torch

    from hf_lm import HfLmBertConfig, HfLmBertForMaskedLM
    from training.data.tokenizer import train_tokenizer
    from training.finetune_classification import SPECIAL_TOKENS

    tokenizer = train_tokenizer(
        texts, kind="wordpiece", vocab_size=64, special_tokens=SPECIAL_TOKENS, padding_side="right"
    )
    config = HfLmBertConfig.from_preset(
        "bert",
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=16,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    HfLmBertForMaskedLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_gradient_accumulation_equals_large_batch(tmp_path):
    """2 micro-batches of b accumulate to exactly the update of one batch of 2b.

    Plain SGD without clipping makes the update proportional to the gradient, so a gradient scaled
    by the accumulation steps (Trainer passing `num_items_in_batch` to a mean loss) would show as a
    doubled grad norm and a different trajectory. The huge `max_grad_norm` never clips but makes
    Trainer log the norm. Starting from a saved masked-LM folder also covers `model_name_or_path`
    (new pooler and classifier, initialized from the seed).
    """
    _toy_sentiment(tmp_path / "train.tsv", 64, seed=0)
    texts = [line.split("\t")[0] for line in (tmp_path / "train.tsv").read_text().splitlines()[1:]]
    pretrained = _masked_lm_folder(tmp_path / "mlm", texts)
    flags = ["--data_dir", str(tmp_path), "--model_name_or_path", str(pretrained), "--max_seq_length", "16"]
    assert_accumulation_equals_large_batch(finetune_classification, tmp_path, flags)


# ---------------------------------------------------------------------------------------------
# wall-clock budget
# ---------------------------------------------------------------------------------------------


def test_wall_clock_budget_callback_stops_at_step_boundary():
    """The callback reads a clock after each optimizer step and stops at the first one past the budget."""
    from transformers import TrainerControl, TrainerState

    import training.trainer_common as module

    now = [100.0]
    callback = module.WallClockBudgetCallback(10, clock=lambda: now[0])
    state, control = TrainerState(), TrainerControl()
    callback.on_train_begin(None, state, control)
    for step, elapsed in ((1, 3.0), (2, 9.99)):
        now[0], state.global_step = 100.0 + elapsed, step
        assert not callback.on_step_end(None, state, control).should_training_stop
    assert not callback.reached and callback.stopped_at_step is None
    now[0], state.global_step = 110.0, 3
    assert callback.on_step_end(None, state, control).should_training_stop
    assert callback.reached and callback.stopped_at_step == 3
    # a new run restarts the clock and forgets the last stop
    callback.on_train_begin(None, state, TrainerControl())
    assert not callback.reached and callback.stopped_at_step is None
    assert not callback.on_step_end(None, state, TrainerControl()).should_training_stop


class _Quadratic(torch.nn.Module):
    """The smallest model `Trainer` trains: a loss from one parameter, whatever the batch."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2))

    def forward(self, x, **kwargs):
        return {"loss": ((self.w - x.mean()) ** 2).sum()}


def _logged_rates(tmp_path, budget_schedule: bool) -> tuple[list[float], object]:
    """The learning rate logged at every step of a `Trainer` run whose clock advances 1 s a step,
    stopped by a 10 s budget; with `budget_schedule`, the trainer of `--budget_schedule linear`."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from training.trainer_common import WallClockBudgetCallback, with_budget_schedule

    now = [0.0]

    class Tick(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            now[0] += 1.0  # each step takes 1 s of the fake clock

    budget = WallClockBudgetCallback(10, clock=lambda: now[0])
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=100, per_device_train_batch_size=2, learning_rate=0.1,
        warmup_steps=2, lr_scheduler_type="constant_with_warmup", logging_steps=1, save_strategy="no",
        report_to="none", disable_tqdm=True,
        use_cpu=True,
    )  # fmt: skip
    trainer_class = with_budget_schedule(Trainer, budget) if budget_schedule else Trainer
    data = [{"x": torch.tensor(float(i))} for i in range(8)]
    trainer = trainer_class(model=_Quadratic(), args=args, train_dataset=data, callbacks=[Tick(), budget])
    trainer.train()
    rates = [row["learning_rate"] for row in trainer.state.log_history if "learning_rate" in row]
    return rates, budget


def test_budget_schedule_decays_the_rate_to_zero_over_the_budget(tmp_path):
    """`--budget_schedule linear`: after the warmup the rate falls with the share of the budget
    spent, to 0 where the budget stops training; the step-based constant schedule stays flat."""
    rates, budget = _logged_rates(tmp_path / "linear", budget_schedule=True)
    assert budget.reached and budget.stopped_at_step == 10 and len(rates) == 10
    # step j runs at the rate set by step j - 1's scheduler step (warmup j - 1 of 2), from the time
    # agreed at step j - 2's end (j - 2 s into the budget)
    expected = [0.1 * min(1.0, (j - 1) / 2) * (1 - max(0, j - 2) / 10) for j in range(1, 11)]
    assert rates == pytest.approx(expected, abs=1e-9)
    constant, budget = _logged_rates(tmp_path / "constant", budget_schedule=False)
    assert budget.reached and constant[2:] == pytest.approx([0.1] * 8)


# two processes whose clocks disagree (rank 1's runs twice as fast): each must stop at the same
# step and follow the same rates, or the other is left waiting in the gradients' all-reduce. The
# run goes through the scripts' entry point (`script_main`), which must end the process group.
TWO_CLOCKS = (
    REPORT_THE_GROUP_AT_EXIT
    + """
import json
import torch
from transformers import Trainer, TrainerCallback, TrainingArguments
sys.path.insert(0, sys.argv[2])
from test_finetune_classification import _Quadratic
from training.trainer_common import WallClockBudgetCallback, script_main, with_budget_schedule

now = [0.0]
class Tick(TrainerCallback):
    def on_step_begin(self, args, state, control, **kwargs):
        now[0] += 1.0 + args.process_index  # rank 0: 1 s a step, rank 1: 2 s
args = TrainingArguments(output_dir=sys.argv[1], max_steps=100, per_device_train_batch_size=2,
    learning_rate=0.1, lr_scheduler_type="constant", logging_steps=1, save_strategy="no",
    report_to="none", disable_tqdm=True, use_cpu=True)

def finetune(data_args, model_args, args):
    budget = WallClockBudgetCallback(10, clock=lambda: now[0])
    data = [{"x": torch.tensor(float(i))} for i in range(64)]
    trainer = with_budget_schedule(Trainer, budget)(model=_Quadratic(), args=args, train_dataset=data,
        callbacks=[Tick(), budget])
    trainer.train()
    rates = [row["learning_rate"] for row in trainer.state.log_history if "learning_rate" in row]
    with open(f"{sys.argv[1]}/rank{args.process_index}.json", "w") as f:
        json.dump({"step": budget.stopped_at_step, "rates": rates, "w": trainer.model.w.tolist()}, f)
    return {}

script_main(lambda argv: (None, None, args), finetune, [])
"""
)


@pytest.mark.slow
def test_budget_stops_every_process_at_one_step_with_one_rate(tmp_path):
    """Under DDP (torchrun, two CPU processes) the budget's stop and the budget schedule's rate
    follow the largest elapsed time of the processes: the same step, rates and weights everywhere."""
    script = tmp_path / "two_clocks.py"
    script.write_text(TWO_CLOCKS)
    cmd = list(TORCHRUN_2)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    tests = os.path.join(REPO_ROOT, "tests")
    result = subprocess.run(
        [*cmd, str(script), str(tmp_path), tests], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("process group at exit: ended") == 2, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0] == ranks[1]
    assert ranks[0]["step"] == 5  # rank 1's clock: 2 s a step, so 10 s after 5 steps
    assert ranks[0]["rates"][-1] == pytest.approx(0.1 * (1 - 6 / 10))  # step 5: the time at step 3's end


def test_budget_schedule_needs_a_budget_and_a_known_name(tmp_path):
    _write_tsv(tmp_path / "train.tsv", [("a", 0), ("b", 1)])
    argv = ["--data_dir", str(tmp_path), "--from_scratch", "--output_dir", str(tmp_path / "out")]
    with pytest.raises(ValueError, match="`budget_schedule`='linear' decays over the wall-clock budget"):
        parse_args([*argv, "--budget_schedule", "linear"])
    with pytest.raises(ValueError, match="`budget_schedule` must be one of"):
        parse_args([*argv, "--budget_schedule", "cosine", "--max_train_seconds", "10"])
    with pytest.raises(ValueError, match="`warmup_steps`=0.1 below 1 is a share of the planned steps"):
        parse_args(
            [*argv, "--budget_schedule", "linear", "--max_train_seconds", "10", "--warmup_steps", "0.1"]
        )
    parse_args([*argv, "--budget_schedule", "linear", "--max_train_seconds", "10", "--warmup_steps", "3"])


@pytest.mark.parametrize("seconds", [0, -1.0, True, "10"])
def test_wall_clock_budget_rejects_bad_values(tmp_path, seconds):
    from training.trainer_common import WallClockBudgetCallback

    with pytest.raises(ValueError, match="`max_train_seconds`"):
        WallClockBudgetCallback(seconds)
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
        _write_tsv(tmp_path / "train.tsv", [("a", 0), ("b", 1)])
        with pytest.raises(ValueError, match="`max_train_seconds`"):
            parse_args(
                ["--data_dir", str(tmp_path), "--from_scratch", "--max_train_seconds", str(seconds),
                 "--output_dir", str(tmp_path / "out")]
            )  # fmt: skip


def test_wall_clock_budget_ends_training_then_evaluates_and_tests(tmp_path, caplog):
    """A budget spent by the first step stops a 1,000-step run after that step; validation, test,
    metrics.json and the model card follow as usual. Without a budget the step count rules."""
    _toy_sentiment(tmp_path / "train.tsv", 48, seed=0)
    _toy_sentiment(tmp_path / "dev.tsv", 16, seed=1)
    _toy_sentiment(tmp_path / "test.tsv", 16, seed=2)
    common = [
        "--data_dir", str(tmp_path), "--from_scratch", "--vocab_size", "80", "--hidden_size", "16",
        "--num_hidden_layers", "1", "--num_attention_heads", "2", "--max_seq_length", "16",
        "--per_device_train_batch_size", "8", "--eval_strategy", "no", "--save_strategy", "no",
        "--disable_tqdm", "true", "--seed", "0",
    ]  # fmt: skip
    budgeted = finetune(
        *parse_args(
            common
            + ["--max_steps", "1000", "--max_train_seconds", "1e-9", "--output_dir", str(tmp_path / "b")]
        )
    )
    assert budgeted["train_steps"] == 1 and budgeted["train_budget_reached"] is True
    assert budgeted["train_epochs"] == pytest.approx(1 / 6)  # 48 examples in batches of 8
    assert budgeted["test_samples"] == 16 and 0 <= budgeted["test_accuracy"] <= 1
    assert budgeted["eval_samples"] == 16 and budgeted["num_parameters"] > 0
    assert json.loads((tmp_path / "b" / "metrics.json").read_text()) == pytest.approx(budgeted)
    assert "wall-clock budget" in (tmp_path / "b" / "final" / "README.md").read_text()

    # the budget schedule reaches the script: the rate falls once time is spent, and a run that the
    # steps end before its budget says the rate never reached 0
    decayed = common + ["--max_steps", "3", "--max_train_seconds", "1000", "--budget_schedule", "linear"]
    with caplog.at_level(logging.WARNING, logger="training.trainer_common"):
        finetune(
            *parse_args(
                decayed + ["--warmup_steps", "0", "--logging_steps", "1", "--output_dir", str(tmp_path / "d")]
            )
        )
    assert "the budget schedule's rate had not reached 0" in caplog.text
    state = json.loads((tmp_path / "d" / "trainer_state.json").read_text())
    rates = [row["learning_rate"] for row in state["log_history"] if "learning_rate" in row]
    assert len(rates) == 3 and rates[0] == rates[1] > rates[2] > 0.99 * rates[0]  # step 3: 2 steps' time
    assert "linear decay over the wall-clock budget" in (tmp_path / "d" / "final" / "README.md").read_text()

    unbudgeted = finetune(*parse_args(common + ["--max_steps", "3", "--output_dir", str(tmp_path / "u")]))
    assert unbudgeted["train_steps"] == 3 and unbudgeted["train_budget_reached"] is False
    assert unbudgeted["num_parameters"] == budgeted["num_parameters"]


# ---------------------------------------------------------------------------------------------
# SST-2 end to end
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(SST2), reason=f"SST-2 data not found at {SST2} (../shared/data/sst2)")
def test_sst2_from_scratch_beats_chance_and_reloads(tmp_path):
    """A 2-layer, 64-wide BERT trained from scratch on 8,000 SST-2 phrases (2 epochs, ~25 s).

    Measured test accuracy (872 GLUE dev sentences, 51% positive) over seeds 0-7 with these
    settings: 0.759-0.791. The threshold 0.68 is far above chance and leaves a wide margin.
    """
    from transformers import pipeline

    output_dir = tmp_path / "sst2"
    args = parse_args(
        [
            "--data_dir", SST2, "--from_scratch", "--output_dir", str(output_dir),
            "--vocab_size", "4000", "--hidden_size", "64", "--num_hidden_layers", "2",
            "--num_attention_heads", "2", "--max_train_samples", "8000", "--max_eval_samples", "500",
            "--num_train_epochs", "2", "--per_device_train_batch_size", "32",
            "--learning_rate", "1e-3", "--warmup_steps", "0.1", "--logging_steps", "100",
            "--save_strategy", "no", "--disable_tqdm", "true", "--seed", "0",
        ]
    )  # fmt: skip
    metrics = finetune(*args)

    assert metrics["test_samples"] == 872 and metrics["train_samples"] == 8000
    assert metrics["test_accuracy"] > 0.68, metrics
    assert metrics["eval_accuracy"] > 0.68, metrics
    assert json.loads((output_dir / "metrics.json").read_text()) == pytest.approx(metrics)

    final = output_dir / "final"
    card = (final / "README.md").read_text()
    assert "model-index" in card and "accuracy" in card and "0 = negative, 1 = positive" in card

    classifier = pipeline("text-classification", model=str(final), trust_remote_code=True)
    assert classifier.model.config.id2label == {0: "negative", 1: "positive"}
    assert classifier.tokenizer("fine")["input_ids"][0] == classifier.tokenizer.cls_token_id
    # the reloaded folder (weights, tokenizer with its [CLS] template, labels) reproduces the
    # Trainer's test accuracy through the pipeline
    import datasets

    test = datasets.load_dataset(
        "csv",
        data_files=os.path.join(SST2, "test.tsv"),
        delimiter="\t",
        quoting=csv.QUOTE_NONE,
        split="train",
    )
    predictions = classifier(list(test["sentence"]), batch_size=64)
    assert {p["label"] for p in predictions} == {"negative", "positive"}
    correct = sum(p["label"] == ("positive" if y else "negative") for p, y in zip(predictions, test["label"]))
    assert correct / len(test) == pytest.approx(metrics["test_accuracy"], abs=1.5 / len(test))


# ---------------------------------------------------------------------------------------------
# input length vs the model's positions
# ---------------------------------------------------------------------------------------------


def test_inputs_are_truncated_to_the_models_positions(tmp_path):
    """A pretrained model with 16 learned positions and 40-word sentences: the default length is
    capped at 16 (not 128, which failed at the first batch), and asking for more is an error
    before training."""
    _toy_sentiment(tmp_path / "train.tsv", 16, seed=0)
    rows = [line.split("\t") for line in (tmp_path / "train.tsv").read_text().splitlines()[1:]]
    long_rows = [(" ".join([text] * 6), label) for text, label in rows]  # 18-60 words each
    _write_tsv(tmp_path / "train.tsv", long_rows)
    pretrained = _masked_lm_folder(tmp_path / "mlm", [text for text, _ in long_rows])

    def run(*flags):
        flags = ["--data_dir", str(tmp_path), "--model_name_or_path", str(pretrained), *QUICK_RUN, *flags]
        return finetune(*parse_args(["--output_dir", str(tmp_path / "out"), *flags]))

    with pytest.raises(ValueError, match=r"`max_seq_length`=17 is longer than .*max_position_embeddings=16"):
        run("--max_seq_length", "17")
    assert not (tmp_path / "out" / "final").exists()  # failed before training
    metrics = run()
    assert metrics["train_steps"] == 2
    card = (tmp_path / "out" / "final" / "README.md").read_text()
    assert "| max sequence length | 16 |" in card
