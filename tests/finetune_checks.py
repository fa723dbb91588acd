"""Checks shared by the tests of the two Trainer scripts (`training.finetune_classification` and
`training.finetune_translation`): a script module is passed in, with its `parse_args` and `finetune`."""

import json

import pytest
from safetensors.torch import load_file

# a two-step run that neither evaluates, saves checkpoints, draws progress bars nor reports
QUICK_RUN = ["--max_steps", "2", "--per_device_train_batch_size", "8", "--eval_strategy", "no"]
QUICK_RUN += ["--save_strategy", "no", "--disable_tqdm", "true", "--report_to", "none"]


def assert_accumulation_equals_large_batch(script, tmp_path, flags: list[str]) -> None:
    """2 micro-batches of 8 give exactly the update of one batch of 16: the same logged losses and
    grad norms for 4 plain-SGD steps, and the same final weights.

    Plain SGD without clipping makes the update proportional to the gradient, so a gradient scaled
    by the accumulation steps would show as a doubled grad norm and a different trajectory. The
    huge `max_grad_norm` never clips but makes Trainer log the norm.

    Args:
        script: the script module (`parse_args`, `finetune`).
        tmp_path: the runs go to `tmp_path/large` and `tmp_path/accumulated`.
        flags: the data and model flags of the script.
    """
    histories = {}
    for name, batch, accumulation in (("large", 16, 1), ("accumulated", 8, 2)):
        args = script.parse_args(
            [
                *flags, "--output_dir", str(tmp_path / name),
                "--optim", "sgd", "--learning_rate", "0.5", "--lr_scheduler_type", "constant",
                "--weight_decay", "0", "--max_grad_norm", "1e9", "--max_steps", "4",
                "--per_device_train_batch_size", str(batch),
                "--gradient_accumulation_steps", str(accumulation),
                "--eval_strategy", "no", "--save_strategy", "no", "--logging_steps", "1",
                "--disable_tqdm", "true", "--seed", "0",
            ]
        )  # fmt: skip
        script.finetune(*args)
        state = json.loads((tmp_path / name / "trainer_state.json").read_text())
        histories[name] = [log for log in state["log_history"] if "loss" in log]

    large, accumulated = histories["large"], histories["accumulated"]
    assert len(large) == len(accumulated) == 4
    for a, b in zip(large, accumulated):
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
    # the trajectory moved: the comparison would see a wrong step size
    assert large[-1]["loss"] != pytest.approx(large[0]["loss"], rel=1e-3)

    weights = {name: load_file(tmp_path / name / "final" / "model.safetensors") for name in histories}
    assert weights["large"].keys() == weights["accumulated"].keys()
    for key, value in weights["large"].items():
        assert weights["accumulated"][key].allclose(value, rtol=1e-4, atol=1e-6), key
