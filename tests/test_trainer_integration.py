"""`Trainer` with `label_smoothing_factor > 0` scores hf_lm causal LMs on shifted labels, as it does
transformers' own causal LMs.

With label smoothing, `Trainer.compute_loss` pops `labels`, runs the model without them and scores
the logits itself; it shifts the labels only for classes listed in transformers'
`MODEL_FOR_CAUSAL_LM_MAPPING_NAMES` (`hflm_common.trainer_shifts_labels`). Checked with hf_lm
imported and, in a fresh interpreter where hf_lm cannot be imported, on folders loaded with
`trust_remote_code=True`.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from remote_code import run_fresh_interpreter
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from hf_lm.convert import from_transformers
from hf_lm.testing import FAMILY_CASES

EPSILON = 0.1
VOCAB = 97
# every causal LM head of hf_lm: the GPT, recurrent, feed-forward and n-gram families
CAUSAL_CASES = [case for case in FAMILY_CASES if case.name.endswith("causal-lm")]


def smoothed_loss(logits: torch.Tensor, labels: torch.Tensor, epsilon: float, shift: bool) -> torch.Tensor:
    """Label-smoothed cross-entropy written out: (1 - eps) * NLL + eps * the mean over the vocabulary
    of -log p, averaged over the scored tokens (-100 ignored); with `shift`, position t is scored
    against label t + 1."""
    if shift:
        logits, labels = logits[:, :-1], labels[:, 1:]
    log_probs = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    scored = labels != -100
    nll = -log_probs.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B, T)
    uniform = -log_probs.mean(dim=-1)  # (B, T)
    return (1 - epsilon) * nll[scored].mean() + epsilon * uniform[scored].mean()


def trainer_loss(model, batch: dict, output_dir, epsilon: float = EPSILON) -> float:
    """The loss `Trainer.compute_loss` gives for `batch` with `label_smoothing_factor=epsilon`."""
    args = TrainingArguments(
        output_dir=str(output_dir), label_smoothing_factor=epsilon, report_to="none", use_cpu=True
    )
    trainer = Trainer(model=model, args=args)
    with torch.no_grad():
        return trainer.compute_loss(model, dict(batch)).item()  # compute_loss pops the labels


def gpt2_pair():
    """A random GPT-2 and the hf_lm GPT holding the same weights, and a padded batch with labels."""
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=0.2,
    )  # fmt: skip
    reference = GPT2LMHeadModel(config).eval()
    model = from_transformers(reference)
    input_ids = torch.randint(3, VOCAB, (3, 12))
    mask = torch.ones_like(input_ids)
    mask[1, 8:] = 0  # right padding
    mask[2, 5:] = 0
    batch = {"input_ids": input_ids, "attention_mask": mask, "labels": input_ids.masked_fill(mask == 0, -100)}
    return reference, model, batch


def test_gpt_label_smoothing_equals_gpt2(tmp_path):
    reference, model, batch = gpt2_pair()
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    want = trainer_loss(reference, batch, tmp_path / "gpt2")
    got = trainer_loss(model, batch, tmp_path / "hflm")
    assert got == pytest.approx(want, abs=1e-5)
    # transformers' value is the shifted one, and it differs from the unshifted one the bug gave
    assert want == pytest.approx(smoothed_loss(logits, batch["labels"], EPSILON, shift=True).item(), abs=1e-5)
    assert abs(want - smoothed_loss(logits, batch["labels"], EPSILON, shift=False).item()) > 1e-3


@pytest.mark.parametrize("case", CAUSAL_CASES, ids=str)
def test_causal_families_get_the_shifted_loss(case, tmp_path):
    model, batch = case.make_model(seed=0), case.make_batch(seed=1)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    shifted = smoothed_loss(logits, batch["labels"], EPSILON, shift=True).item()
    unshifted = smoothed_loss(logits, batch["labels"], EPSILON, shift=False).item()
    assert abs(shifted - unshifted) > 1e-3  # the batch tells the two apart
    assert trainer_loss(model, batch, tmp_path) == pytest.approx(shifted, abs=1e-5)


def test_label_smoothing_zero_keeps_the_models_own_loss(tmp_path):
    """Without smoothing Trainer uses the model's loss; the written-out loss at eps=0 is that loss."""
    _, model, batch = gpt2_pair()
    with torch.no_grad():
        out = model(**batch)
    assert trainer_loss(model, batch, tmp_path, epsilon=0.0) == pytest.approx(out.loss.item(), abs=1e-6)
    assert smoothed_loss(out.logits, batch["labels"], 0.0, shift=True).item() == pytest.approx(
        out.loss.item(), abs=1e-5
    )


REMOTE_TRAINER_SCRIPT = """
    import json
    import sys

    sys.modules["hf_lm"] = None  # hf_lm must not be importable: the code comes from the folders
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    torch.set_num_threads(1)
    folders, epsilon = json.loads(sys.argv[1]), float(sys.argv[2])
    losses = {}
    for name, folder in folders.items():
        model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        batch = load_file(f"{folder}/batch.safetensors")
        args = TrainingArguments(
            output_dir=f"{folder}/run", label_smoothing_factor=epsilon, report_to="none", use_cpu=True
        )
        with torch.no_grad():
            losses[name] = Trainer(model=model, args=args).compute_loss(model, batch).item()
    print("LOSSES " + json.dumps(losses))
"""


def test_remote_code_label_smoothing_is_shifted(tmp_path):
    """Saved folders loaded with trust_remote_code where hf_lm is not importable: GPT equals GPT-2,
    and every causal family gets the shifted value."""
    reference, gpt, gpt_batch = gpt2_pair()
    models = {"gpt2-weights": (gpt, gpt_batch)}
    models.update({case.name: (case.make_model(seed=0), case.make_batch(seed=1)) for case in CAUSAL_CASES})
    folders, want = {}, {"gpt2-weights": trainer_loss(reference, gpt_batch, tmp_path / "gpt2")}
    for name, (model, batch) in models.items():
        folders[name] = str(tmp_path / name)
        model.save_pretrained(folders[name])
        save_file({k: v.contiguous() for k, v in batch.items()}, f"{folders[name]}/batch.safetensors")
        if name != "gpt2-weights":
            with torch.no_grad():
                logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            want[name] = smoothed_loss(logits, batch["labels"], EPSILON, shift=True).item()
    stdout = run_fresh_interpreter(REMOTE_TRAINER_SCRIPT, json.dumps(folders), str(EPSILON), cwd=tmp_path)
    got = json.loads(stdout.split("LOSSES ", 1)[1])
    assert got.keys() == want.keys()
    for name in want:
        assert got[name] == pytest.approx(want[name], abs=1e-5), name
