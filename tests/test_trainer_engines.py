"""The `Trainer` scripts refuse a sharding engine that transformers' `Trainer` would not run.

On processes on the CPU accelerate's state is MULTI_CPU, which takes no FSDP or DeepSpeed plugin:
`--fsdp` (FSDP2, and FSDP1), `--deepspeed` and an accelerate config asking for either (its
ACCELERATE_USE_* variable) would train with plain DDP, every process holding the whole model, without
a word. Megatron-LM is refused on every device (`Trainer` is not accelerate's Megatron loop). On CUDA
`--fsdp` and `--deepspeed` pass through to `Trainer`. Each refusal comes while the arguments are
parsed (`trainer_common.check_sharding_engine`), before any data is read or any model built.
"""

import json
import logging
import os
import subprocess
import types

import pytest
import torch
from accelerate.state import AcceleratorState, GradientState
from conftest import TORCHRUN_2
from transformers import TrainingArguments

import training.finetune_classification as classification
import training.finetune_translation as translation
from training.trainer_common import check_sharding_engine, train_with_budget

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = {"classification": classification, "translation": translation}
ENVIRONMENT = (
    "ACCELERATE_USE_FSDP",
    "ACCELERATE_USE_DEEPSPEED",
    "ACCELERATE_USE_MEGATRON_LM",
    "ACCELERATE_USE_CPU",
)
# what the CPU refusals point to instead
CPU_WAY_OUT = (
    "torchrun --nproc_per_node N -m training.<script> --use_cpu",
    "training.train --fsdp full_shard",
)

# name -> (flags, environment, what the message names); "{tmp}" is the test's folder
REFUSALS = {
    "fsdp_v2_flag": (
        ["--fsdp", "full_shard", "--fsdp_config", "{tmp}/fsdp_v2.json"],
        {},
        r"`--fsdp full_shard` asks transformers' Trainer for FSDP",
    ),
    "fsdp_auto_wrap_flag": (
        ["--fsdp", "full_shard auto_wrap"],
        {},
        r"`--fsdp full_shard auto_wrap` asks transformers' Trainer for FSDP",
    ),
    "fsdp_bare_flag": (["--fsdp"], {}, r"`--fsdp` asks transformers' Trainer for FSDP"),
    "fsdp_v1_flag": (
        ["--fsdp", "full_shard", "--fsdp_config", "{tmp}/fsdp_v1.json"],
        {},
        r"`--fsdp full_shard` asks transformers' Trainer for FSDP",
    ),
    "fsdp_env": ([], {"ACCELERATE_USE_FSDP": "true"}, r"ACCELERATE_USE_FSDP=true.*`distributed_type: FSDP`"),
    "deepspeed_flag": (
        ["--deepspeed", "{tmp}/ds_config.json"],
        {},
        r"`--deepspeed \S*ds_config.json` asks transformers' Trainer for DeepSpeed",
    ),
    "deepspeed_env": (
        [],
        {"ACCELERATE_USE_DEEPSPEED": "true"},
        r"ACCELERATE_USE_DEEPSPEED=true.*`distributed_type: DEEPSPEED`",
    ),
    "megatron_env": (
        [],
        {"ACCELERATE_USE_MEGATRON_LM": "true"},
        r"Megatron-LM \(ACCELERATE_USE_MEGATRON_LM=true.*`distributed_type: MEGATRON_LM`\), "
        r"which transformers' Trainer does not run",
    ),
}


def _reset_accelerate() -> None:
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


@pytest.fixture(autouse=True)
def _no_launch_environment(monkeypatch):
    """No engine from the shell that runs the tests, and no process state (a faked CUDA device's
    included) left to the next test."""
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    _reset_accelerate()
    yield
    _reset_accelerate()


def _cuda(monkeypatch, available: bool) -> None:
    """A machine with one CUDA device, as far as `TrainingArguments` looks (its device is set up
    while the arguments are parsed), or one without."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    if available:
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)


def _argv(tmp_path) -> list[str]:
    """The smallest valid command line of either script (a data folder and a model from scratch)."""
    (tmp_path / "train.tsv").write_text("sentence\tlabel\na\t0\nb\t1\n", encoding="utf-8")
    (tmp_path / "fsdp_v2.json").write_text(json.dumps({"version": 2}))
    (tmp_path / "fsdp_v1.json").write_text(json.dumps({"version": 1}))
    (tmp_path / "ds_config.json").write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    return ["--data_dir", str(tmp_path), "--from_scratch", "--output_dir", str(tmp_path / "out")]


def _refusal(tmp_path, monkeypatch, name: str) -> tuple[list[str], str]:
    """The command line and environment of the refusal `name`; returns (argv, pattern)."""
    flags, environment, pattern = REFUSALS[name]
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    return _argv(tmp_path) + [flag.format(tmp=tmp_path) for flag in flags], pattern


def _never_finetune(*args):
    raise AssertionError("finetune ran: the arguments were accepted")


@pytest.mark.parametrize("name", list(REFUSALS))
@pytest.mark.parametrize("script", list(SCRIPTS))
def test_engine_refused_on_the_cpu_before_the_run(tmp_path, monkeypatch, script, name):
    """Each engine asked for on a machine without a GPU: a ValueError naming it (and, but for
    Megatron-LM, DDP with torchrun and hf_lm's sharding loop instead), from the scripts' `main`
    while the arguments are parsed, before `finetune` reads any data or builds any model."""
    _cuda(monkeypatch, False)
    module = SCRIPTS[script]
    monkeypatch.setattr(module, "finetune", _never_finetune)
    argv, pattern = _refusal(tmp_path, monkeypatch, name)
    with pytest.raises(ValueError, match=pattern) as refused:
        module.main(argv)
    if name != "megatron_env":
        assert "this machine has no CUDA GPU" in str(refused.value)
        assert all(way in str(refused.value) for way in CPU_WAY_OUT), str(refused.value)


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_no_engine_no_refusal(tmp_path, monkeypatch, script):
    """Without an engine (and with the variables set to false) the arguments parse on the CPU."""
    _cuda(monkeypatch, False)
    for name in ENVIRONMENT:
        monkeypatch.setenv(name, "false")
    *_, training_args = SCRIPTS[script].parse_args(_argv(tmp_path))
    assert not training_args.fsdp and training_args.deepspeed is None


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_flags_pass_through_on_cuda(tmp_path, monkeypatch, script):
    """With CUDA, `--fsdp` (FSDP2 and FSDP1) and an accelerate FSDP config reach `Trainer` as given;
    `--deepspeed` and an accelerate DeepSpeed config are not refused either (transformers reads
    the DeepSpeed config itself, which needs DeepSpeed installed: checked on the check alone)."""
    _cuda(monkeypatch, True)
    module = SCRIPTS[script]
    for name, version in (("fsdp_v2_flag", 2), ("fsdp_v1_flag", 1), ("fsdp_auto_wrap_flag", 2)):
        argv, _ = _refusal(tmp_path, monkeypatch, name)
        *_, training_args = module.parse_args(argv)
        assert training_args.fsdp is True and training_args.fsdp_plugin_args["fsdp_version"] == version
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    module.parse_args(_argv(tmp_path))
    monkeypatch.delenv("ACCELERATE_USE_FSDP")
    check_sharding_engine(
        types.SimpleNamespace(fsdp=None, fsdp_config=None, deepspeed="ds.json", use_cpu=False)
    )
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    check_sharding_engine(types.SimpleNamespace(fsdp=None, fsdp_config=None, deepspeed=None, use_cpu=False))


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_megatron_refused_on_cuda_too(tmp_path, monkeypatch, script):
    _cuda(monkeypatch, True)
    argv, pattern = _refusal(tmp_path, monkeypatch, "megatron_env")
    with pytest.raises(ValueError, match=pattern):
        SCRIPTS[script].parse_args(argv)


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_processes_put_on_the_cpu_refused_with_cuda(tmp_path, monkeypatch, script):
    """`--use_cpu` (or an accelerate config's `use_cpu: true`) on a CUDA machine: MULTI_CPU again."""
    _cuda(monkeypatch, True)
    module = SCRIPTS[script]
    argv = _argv(tmp_path)
    with pytest.raises(
        ValueError, match=r"`--fsdp full_shard` .* but `--use_cpu` puts this run's processes on"
    ):
        module.parse_args([*argv, "--use_cpu", "--fsdp", "full_shard"])
    monkeypatch.setenv("ACCELERATE_USE_CPU", "true")
    with pytest.raises(ValueError, match=r"`--fsdp full_shard` .* but ACCELERATE_USE_CPU=true"):
        module.parse_args([*argv, "--fsdp", "full_shard"])


@pytest.mark.parametrize("cuda", [False, True])
@pytest.mark.parametrize("script", list(SCRIPTS))
def test_fsdp_config_without_fsdp_refused(tmp_path, monkeypatch, script, cuda):
    """transformers ignores `--fsdp_config` without `--fsdp` on every device."""
    _cuda(monkeypatch, cuda)
    argv = _argv(tmp_path)
    with pytest.raises(ValueError, match=r"`--fsdp_config` configures FSDP only together with `--fsdp`"):
        SCRIPTS[script].parse_args([*argv, "--fsdp_config", str(tmp_path / "fsdp_v2.json")])


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_python_caller_refused(tmp_path, monkeypatch, script):
    """A Python caller building the script's training arguments is refused as the command line is;
    plain `TrainingArguments` are refused by `train_with_budget` before `Trainer` is built."""
    _cuda(monkeypatch, False)
    arguments_class = SCRIPTS[script].ARGUMENT_CLASSES[-1]
    with pytest.raises(ValueError, match=r"`--fsdp full_shard` asks transformers' Trainer for FSDP"):
        arguments_class(output_dir=str(tmp_path / "out"), fsdp="full_shard")

    class NeverBuilt:
        def __init__(self, *args, **kwargs):
            raise AssertionError("Trainer built")

    plain = TrainingArguments(output_dir=str(tmp_path / "out"), fsdp="full_shard", report_to="none")
    with pytest.raises(
        ValueError, match=r"`--fsdp` asks transformers' Trainer for FSDP"
    ):  # after its post-init
        train_with_budget(NeverBuilt, plain, {"train": []})
    plain = TrainingArguments(output_dir=str(tmp_path / "out"), report_to="none")
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")  # a launch environment set after the arguments
    with pytest.raises(ValueError, match=r"ACCELERATE_USE_FSDP=true"):
        train_with_budget(NeverBuilt, plain, {"train": []})


# ---------------------------------------------------------------------------------------------
# a launch of several processes on a machine without a GPU: one DDP group on the CPU
# ---------------------------------------------------------------------------------------------

# the variables that give a launch's number of processes (torchrun's, then an MPI launcher's own)
LAUNCH_SIZES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def _use_cpu_at_device_setup(monkeypatch, module, argv) -> tuple[list[bool], object]:
    """Parse `argv` with the script's `parse_args`, recording `use_cpu` when transformers' own
    post-init (which sets up the device and process state) starts; that post-init is replaced, so
    that no process group is created in the test process. Returns (the recorded values, the args)."""
    seen = []
    monkeypatch.setattr(TrainingArguments, "__post_init__", lambda self: seen.append(self.use_cpu))
    *_, training_args = module.parse_args(argv)
    return seen, training_args


@pytest.mark.parametrize(
    ("environment", "cuda", "expected"),
    [
        ({"WORLD_SIZE": "2"}, False, True),
        ({"OMPI_COMM_WORLD_SIZE": "4"}, False, True),  # an MPI launch
        ({"WORLD_SIZE": "2"}, True, False),  # NCCL on the GPUs
        ({"WORLD_SIZE": "1"}, False, False),
        ({}, False, False),
        ({"WORLD_SIZE": "two"}, False, False),  # not a launcher's: left to accelerate
    ],
)
@pytest.mark.parametrize("script", list(SCRIPTS))
def test_launch_without_gpu_runs_on_the_cpu(
    tmp_path, monkeypatch, caplog, script, environment, cuda, expected
):
    """`torchrun --nproc_per_node 2` without `--use_cpu` on a machine without a GPU: `use_cpu` is set
    before transformers sets up the device, so accelerate makes one gloo group of the launch (without
    it, accelerate ignores WORLD_SIZE there and every process trains alone into the same folder)."""
    _cuda(monkeypatch, cuda)
    for name in LAUNCH_SIZES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")  # as every launcher sets it
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with caplog.at_level(logging.INFO, logger="training.trainer_common"):
        seen, training_args = _use_cpu_at_device_setup(monkeypatch, SCRIPTS[script], _argv(tmp_path))
    assert seen == [expected] and training_args.use_cpu is expected
    assert ("`use_cpu` set, so that the" in caplog.text) is expected, caplog.text
    # asked for, it stays
    seen, _ = _use_cpu_at_device_setup(monkeypatch, SCRIPTS[script], [*_argv(tmp_path), "--use_cpu"])
    assert seen == [True]


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_world_size_left_in_a_shell_refused(tmp_path, monkeypatch, script):
    """A WORLD_SIZE that no launcher set (no MASTER_ADDR) is refused by name, not made a gloo group
    that waits for processes that never come."""
    _cuda(monkeypatch, False)
    for name in (*LAUNCH_SIZES, "MASTER_ADDR", "LOCAL_RANK", "RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"\(WORLD_SIZE=2\), but MASTER_ADDR, which every launcher sets"):
        _use_cpu_at_device_setup(monkeypatch, SCRIPTS[script], _argv(tmp_path))


def test_plain_arguments_of_a_launch_training_alone_refused(tmp_path, monkeypatch):
    """Plain `TrainingArguments` from a Python caller, built without `use_cpu` in a launch on a
    machine without a GPU, have set up a process that trains alone: `train_with_budget` refuses
    them before `Trainer` is built."""
    _cuda(monkeypatch, False)
    for name in LAUNCH_SIZES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")  # no LOCAL_RANK: accelerate sets up no process group

    class NeverBuilt:
        def __init__(self, *args, **kwargs):
            raise AssertionError("Trainer built")

    plain = TrainingArguments(output_dir=str(tmp_path / "out"), report_to="none")
    assert plain.world_size == 1
    with pytest.raises(
        ValueError, match=r"a launch of 2 processes \(WORLD_SIZE=2\), but it trains alone.*`use_cpu=True`"
    ):
        train_with_budget(NeverBuilt, plain, {"train": []})


@pytest.mark.slow
def test_two_process_launch_without_use_cpu_trains_as_one_group(tmp_path):
    """`torchrun --nproc_per_node 2 -m training.finetune_classification` without `--use_cpu` on the
    CPU: the two processes share the data as one DDP group, so an epoch of 48 examples in batches of
    8 takes 3 optimizer steps, not the 6 of a process training alone."""
    from test_finetune_classification import _toy_sentiment

    _toy_sentiment(tmp_path / "train.tsv", 48, seed=0)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ENVIRONMENT}
    env.update(PYTHONPATH=REPO_ROOT, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", HF_HUB_OFFLINE="1")
    argv = [
        "--data_dir", str(tmp_path), "--from_scratch", "--vocab_size", "80", "--hidden_size", "16",
        "--num_hidden_layers", "1", "--num_attention_heads", "2", "--max_seq_length", "16",
        "--per_device_train_batch_size", "8", "--num_train_epochs", "1", "--eval_strategy", "no",
        "--save_strategy", "no", "--disable_tqdm", "true", "--seed", "0", "--output_dir", str(out),
    ]  # fmt: skip
    cmd = [*TORCHRUN_2, "-m", "training.finetune_classification", *argv]
    result = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["train_steps"] == 3 and metrics["train_samples"] == 48, metrics
    # logged once, by the main process
    assert result.stderr.count("2 processes train on the CPU as one DDP group") == 1, result.stderr[-3000:]
