"""Code hf_lm writes itself next to the library that does the same job (docs/training.md, "Why hf_lm
writes these itself"): where the job is the same the results agree with the library's; where hf_lm
keeps its own code, the library's gap that the docs name is shown here.

- `hf_lm/metrics/accuracy` equals scikit-learn's accuracy/precision/recall/F1;
- `training.data.collators_mlm.DataCollatorForMaskedLM` ("token") has the statistics and label rules of
  transformers' `DataCollatorForLanguageModeling(mlm=True)`; transformers draws random tokens from
  the whole vocabulary (special tokens included) and its whole-word mode drops the 80/10/10 rule;
- `training.state` rejects a flipped byte, skips a half-written checkpoint and names an
  unreadable RNG file, where accelerate's `save_state`/`load_state` load the damaged weights
  silently, fail on the half-written folder and skip the RNG states with an info-level log;
  accelerate's `total_limit` deletes another run's checkpoint where hf_lm prunes per run, and its
  registered objects are unpickled (`weights_only=False`) where hf_lm keeps such state in JSON.
"""

from __future__ import annotations

import os
import shutil
import warnings

import numpy as np
import pytest
import test_collators_mlm
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import ProjectConfiguration
from transformers import DataCollatorForLanguageModeling

from training.data.collators_mlm import DataCollatorForMaskedLM
from training.state.checkpoint import load_checkpoint, save_checkpoint
from training.state.folders import CorruptCheckpointError, latest_checkpoint
from training.state.stateful import CheckpointState, Values

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METRIC_DIR = os.path.join(REPO_ROOT, "hf_lm", "metrics", "accuracy")
CORPUS, random_examples = test_collators_mlm.CORPUS, test_collators_mlm.random_examples
tok = test_collators_mlm.tok  # the small wordpiece tokenizer fixture (many words split into `##` pieces)

# ---------------------------------------------------------------------------------------------
# accuracy / F1 == scikit-learn
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def accuracy(monkeypatch):
    import evaluate

    monkeypatch.setenv("HF_EVALUATE_OFFLINE", "1")
    return evaluate.load(METRIC_DIR, keep_in_memory=True)


def _random_case(rng: np.random.Generator, n_classes: int):
    n = int(rng.integers(1, 40))
    predictions = rng.integers(0, n_classes, n)
    references = rng.integers(0, n_classes, n)
    weight = rng.uniform(0.1, 3.0, n) if rng.random() < 0.5 else None
    return predictions, references, weight


@pytest.mark.parametrize("average", ["binary", "macro", "weighted"])
def test_accuracy_f1_equal_sklearn(accuracy, average):
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    for _ in range(60):
        n_classes = 2 if average == "binary" else int(rng.integers(2, 6))
        predictions, references, weight = _random_case(rng, n_classes)
        labels = np.union1d(predictions, references)
        if average == "binary" and 1 not in labels and len(labels) == 2:
            continue  # not a binary case with pos_label=1 (hf_lm raises, as sklearn does)
        ours = accuracy.compute(
            predictions=predictions, references=references, sample_weight=weight, average=average
        )
        precision, recall, f1, _ = metrics.precision_recall_fscore_support(
            references, predictions, average=average, sample_weight=weight, zero_division=0
        )
        expected = {
            "accuracy": metrics.accuracy_score(references, predictions, sample_weight=weight),
            "precision": precision,
            "recall": recall,
            "f1": f1,
        }
        assert ours == pytest.approx(expected, abs=1e-12), (predictions, references, weight)


def test_accuracy_unnormalized_equals_sklearn(accuracy):
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(1)
    for _ in range(20):
        predictions, references, weight = _random_case(rng, 4)
        ours = accuracy.compute(
            predictions=predictions,
            references=references,
            sample_weight=weight,
            normalize=False,
            average=None,
        )
        theirs = metrics.accuracy_score(references, predictions, sample_weight=weight, normalize=False)
        assert ours == pytest.approx({"accuracy": theirs})


# ---------------------------------------------------------------------------------------------
# masked-LM collator == transformers' DataCollatorForLanguageModeling (token mode)
# ---------------------------------------------------------------------------------------------


def _corruption_stats(tok, examples, batch) -> dict:
    """The rates a masked-LM batch shows, and its rule violations (which must be 0)."""
    T = batch["input_ids"].shape[1]
    original = torch.full((len(examples), T), tok.pad_token_id)
    for b, e in enumerate(examples):
        original[b, : len(e["input_ids"])] = torch.tensor(e["input_ids"])
    special = torch.isin(original, torch.tensor(tok.all_special_ids))
    labels, corrupted = batch["labels"], batch["input_ids"]
    selected = labels != -100
    n = int(selected.sum())
    return {
        "selected": n / int((~special).sum()),
        "mask": int((selected & (corrupted == tok.mask_token_id)).sum()) / n,
        "kept": int((selected & (corrupted == original)).sum()) / n,
        "special_selected": int((selected & special).sum()),
        "wrong_label": int((selected & (labels != original)).sum()),
        "changed_unselected": int((~selected & (corrupted != original)).sum()),
    }


def test_token_masking_matches_transformers(tok):
    examples = random_examples(tok, n=512, seed=3)
    ours = _corruption_stats(tok, examples, DataCollatorForMaskedLM(tok, masking="token", seed=0)(examples))
    reference = DataCollatorForLanguageModeling(tok, mlm=True, mlm_probability=0.15, seed=0)
    theirs = _corruption_stats(tok, examples, reference([dict(e) for e in examples]))
    for stats in (ours, theirs):
        # -100 on unselected tokens, the original id on selected ones, special tokens never selected
        assert stats["special_selected"] == stats["wrong_label"] == stats["changed_unselected"] == 0
        assert stats["selected"] == pytest.approx(0.15, abs=0.01)
        assert stats["mask"] == pytest.approx(0.8, abs=0.02)
        # kept = the 10% left alone, plus random draws that hit the original id (1/V of the 10%)
        assert stats["kept"] == pytest.approx(0.1, abs=0.02)
    assert ours["selected"] == pytest.approx(theirs["selected"], abs=0.01)
    assert ours["mask"] == pytest.approx(theirs["mask"], abs=0.03)


def test_transformers_random_tokens_include_special_ids_hf_lm_never(tok):
    examples = random_examples(tok, n=256, seed=4)
    special = torch.tensor(tok.all_special_ids)

    def random_specials(batch):
        selected = batch["labels"] != -100
        return int((selected & torch.isin(batch["input_ids"], special)).sum())

    reference = DataCollatorForLanguageModeling(
        tok, mlm=True, mlm_probability=0.5, mask_replace_prob=0.0, random_replace_prob=1.0, seed=0
    )
    assert random_specials(reference([dict(e) for e in examples])) > 0  # [PAD], [SEP], [MASK], ... drawn
    ours = DataCollatorForMaskedLM(
        tok, mlm_probability=0.5, mask_replace_prob=0.0, random_replace_prob=1.0, seed=0
    )
    assert random_specials(ours(examples)) == 0


def test_transformers_whole_word_mode_drops_80_10_10_hf_lm_keeps_it(tok):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = DataCollatorForLanguageModeling(tok, mlm=True, whole_word_mask=True)
    assert (reference.mask_replace_prob, reference.random_replace_prob) == (1.0, 0.0)

    examples = [{"input_ids": tok(text)["input_ids"]} for text in CORPUS[:5] * 60]
    stats = _corruption_stats(
        tok, examples, DataCollatorForMaskedLM(tok, masking="whole_word", seed=0)(examples)
    )
    assert stats["special_selected"] == stats["wrong_label"] == stats["changed_unselected"] == 0
    assert stats["mask"] == pytest.approx(0.8, abs=0.05)
    assert stats["kept"] == pytest.approx(0.1, abs=0.05)


# ---------------------------------------------------------------------------------------------
# checkpoints: the gaps of accelerate's save_state / load_state
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def accelerate_state():
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    yield
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def _model_and_optimizer(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 8)).sum().backward()
    optimizer.step()
    return model, optimizer


def _flip_last_byte(path) -> None:
    """Flip the low bit of the file's last byte: a weight's mantissa in a safetensors file."""
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def test_flipped_byte_accelerate_loads_silently_hf_lm_rejects(tmp_path, accelerate_state):
    model, optimizer = _model_and_optimizer()
    saved = model.weight.detach().clone()
    accelerator = Accelerator(cpu=True)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.save_state(str(tmp_path / "accelerate"))
    _flip_last_byte(tmp_path / "accelerate" / "model.safetensors")
    accelerator.load_state(str(tmp_path / "accelerate"))  # no checksum: loads the damaged weight
    assert not torch.equal(model.weight.detach(), saved)

    ours = save_checkpoint(tmp_path / "hf_lm", CheckpointState(model, optimizer=optimizer), step=1)
    _flip_last_byte(ours / "model.safetensors")
    with pytest.raises(CorruptCheckpointError, match="model.safetensors"):
        load_checkpoint(ours, CheckpointState(model, optimizer=optimizer))


def test_half_written_checkpoint_accelerate_picks_it_hf_lm_skips_it(tmp_path, accelerate_state):
    model, optimizer = _model_and_optimizer()
    config = ProjectConfiguration(project_dir=str(tmp_path / "accelerate"), automatic_checkpoint_naming=True)
    accelerator = Accelerator(cpu=True, project_config=config)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.save_state()  # checkpoints/checkpoint_0
    # a save killed after its folder was made: accelerate writes straight into the final folder
    root = tmp_path / "accelerate" / "checkpoints"
    (root / "checkpoint_1").mkdir()
    shutil.copy(root / "checkpoint_0" / "optimizer.bin", root / "checkpoint_1" / "optimizer.bin")
    with pytest.raises(FileNotFoundError):
        accelerator.load_state()  # the newest folder, complete or not

    save_checkpoint(tmp_path / "hf_lm", CheckpointState(model, optimizer=optimizer), step=1)
    half = tmp_path / "hf_lm" / "checkpoint-00000002"  # no COMPLETE marker
    half.mkdir()
    shutil.copy(tmp_path / "hf_lm" / "checkpoint-00000001" / "optimizer.pt", half / "optimizer.pt")
    assert latest_checkpoint(tmp_path / "hf_lm").name == "checkpoint-00000001"
    assert (
        load_checkpoint(latest_checkpoint(tmp_path / "hf_lm"), CheckpointState(model, optimizer=optimizer))[
            "step"
        ]
        == 1
    )


def test_unreadable_rng_state_accelerate_ignores_hf_lm_names_it(tmp_path, accelerate_state):
    model, optimizer = _model_and_optimizer()
    accelerator = Accelerator(cpu=True)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.save_state(str(tmp_path / "accelerate"))
    (tmp_path / "accelerate" / "random_states_0.pkl").write_bytes(b"")
    accelerator.load_state(str(tmp_path / "accelerate"))  # "Could not load random states", at info level

    ours = save_checkpoint(tmp_path / "hf_lm", CheckpointState(model, optimizer=optimizer), step=1)
    (ours / "rng.pt").write_bytes(b"")
    for verify in (True, False):  # by the manifest, and without one by the failed read
        with pytest.raises(CorruptCheckpointError, match="rng.pt"):
            load_checkpoint(ours, CheckpointState(model, optimizer=optimizer), verify=verify)


def test_total_limit_deletes_another_runs_checkpoint_hf_lm_prunes_per_run(tmp_path, accelerate_state):
    model, optimizer = _model_and_optimizer()
    root = tmp_path / "accelerate"
    (root / "checkpoints" / "checkpoint_7").mkdir(parents=True)  # another run's, in the same folder
    config = ProjectConfiguration(project_dir=str(root), automatic_checkpoint_naming=True, total_limit=1)
    accelerator = Accelerator(cpu=True, project_config=config)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.save_state()
    assert sorted(p.name for p in (root / "checkpoints").iterdir()) == ["checkpoint_0"]

    save_checkpoint(tmp_path / "hf_lm", CheckpointState(model), step=7, run_id="other")
    save_checkpoint(tmp_path / "hf_lm", CheckpointState(model), step=1, run_id="mine", keep_last=1)
    assert sorted(p.name for p in (tmp_path / "hf_lm").iterdir()) == [
        "checkpoint-00000001",
        "checkpoint-00000007",
    ]


class Unpickled:
    """An object only a full unpickler rebuilds (not a tensor, not a Python primitive)."""


class _StatefulPart:
    def __init__(self) -> None:
        self.loaded = None

    def state_dict(self) -> dict:
        return {"object": Unpickled()}

    def load_state_dict(self, state: dict) -> None:
        self.loaded = state


def test_registered_state_accelerate_unpickles_hf_lm_keeps_json(tmp_path, accelerate_state):
    accelerator = Accelerator(cpu=True)
    part = _StatefulPart()
    accelerator.register_for_checkpointing(part)
    accelerator.save_state(str(tmp_path / "accelerate"))
    with pytest.raises(Exception, match="Unpickled"):  # not loadable with weights_only=True...
        torch.load(tmp_path / "accelerate" / "custom_checkpoint_0.pkl", weights_only=True)
    accelerator.load_state(str(tmp_path / "accelerate"))
    assert isinstance(part.loaded["object"], Unpickled)  # ...yet load_state rebuilt it

    model, _ = _model_and_optimizer()
    with pytest.raises(TypeError):  # hf_lm's data position and extras are JSON, nothing else
        save_checkpoint(
            tmp_path / "hf_lm", CheckpointState(model, data=Values({"object": Unpickled()})), step=1
        )
    assert not any((tmp_path / "hf_lm").iterdir())
