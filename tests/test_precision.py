"""bf16 and fp16 on CPU for every family: autocast forward, backward and generation, half-precision weights;
the training loop in bf16.

Every check runs over `hf_lm.testing.FAMILY_CASES` (one tiny case per registered model class) and, but for
the training loop, its `VARIANT_CASES` (the GPT and BERT variant grids) and tests/config_variants.py.

The LSTM once crashed under CPU autocast ("could not create a primitive descriptor for the LSTM forward
propagation primitive") on CPUs without oneDNN bf16 kernels, e.g. AVX2-only x86, and ran on those with
them (AVX-512 with BF16, AMX). `test_recurrent_checks_on_a_cpu_without_bf16_kernels` runs the recurrent
checks again with oneDNN capped at AVX2 (`ONEDNN_MAX_CPU_ISA`), so the crash shows on any x86 machine;
run the whole file with `ONEDNN_MAX_CPU_ISA=AVX2` to do the same for every check.
"""

import math
import os
import platform
import subprocess
import sys

import pytest
import torch
from accelerate.state import AcceleratorState, GradientState
from config_variants import variant_models
from conftest import REPO_ROOT

import hf_lm
from hf_lm.models.hflm_rnn_blocks import RNN_CELLS, StackedRNN
from hf_lm.testing import FAMILY_CASES, GENERATING_CASES, VARIANT_CASES
from training.args import parse_args
from training.train import train

BF16 = torch.bfloat16
# both half types: bf16 (8 bits of mantissa, fp32's range) and fp16 (11 bits, largest finite 65504, where a
# mask fill of -1e9 or an fp32 minimum would overflow), as GPUs train and serve them
HALF = [pytest.param(BF16, id="bf16"), pytest.param(torch.float16, id="fp16")]
CASES = FAMILY_CASES + VARIANT_CASES  # every class, and the GPT and BERT variant grids
GENERATING = GENERATING_CASES + [case for case in VARIANT_CASES if case.generates]


def _main_output(output) -> torch.Tensor:
    """The head's first float output (logits, start logits, a bare model's last_hidden_state), in fp32."""
    return next(
        value.float()
        for key, value in output.items()
        if key != "loss" and isinstance(value, torch.Tensor) and value.is_floating_point()
    )


def _objective(output) -> torch.Tensor:
    """The loss, or for a bare model (no labels) a fixed random linear function of its main output."""
    if output.get("loss") is not None:
        return output.loss.float()
    main = _main_output(output)
    probe = torch.randn(main.shape, generator=torch.Generator().manual_seed(0))
    return (main * probe).sum()


def _assert_near(output, reference, rel: float, what: str) -> None:
    """bf16 keeps 8 bits of mantissa: the loss within `rel` (relative, at least absolute), and the main
    output within `rel` of its largest magnitude."""
    if reference.get("loss") is not None:
        loss, ref_loss = output.loss.item(), reference.loss.item()
        assert math.isfinite(loss) and abs(loss - ref_loss) <= rel * max(1.0, abs(ref_loss)), (
            what,
            loss,
            ref_loss,
        )
    main, ref_main = _main_output(output), _main_output(reference)
    assert torch.isfinite(main).all(), what
    error, scale = (main - ref_main).abs().max().item(), ref_main.abs().max().item()
    assert error <= rel * scale, (what, error, scale)


def _gradients(model) -> dict[str, torch.Tensor | None]:
    return {name: p.grad for name, p in model.named_parameters() if p.requires_grad}


def test_family_table_covers_the_registry():
    """A model class added to hf_lm's registry without a case in hf_lm/testing.py fails here."""
    registered = {model for family in hf_lm.FAMILIES.values() for model in family.heads.values()}
    covered = [case.model_class for case in FAMILY_CASES]
    assert set(covered) == registered, (
        f"no FamilyCase for {sorted(c.__name__ for c in registered - set(covered))}"
    )
    assert len({case.name for case in FAMILY_CASES}) == len(FAMILY_CASES)
    for case in FAMILY_CASES:
        assert case.generates == case.model_class.can_generate(), case.name


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("padding", [True, False], ids=["padded", "full"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_autocast_forward_and_backward(case, padding, dtype):
    """Under CPU autocast: a finite loss and outputs close to fp32's, and a finite fp32 gradient for every
    parameter that has one in fp32.

    `padding=False` sends the recurrent models through torch's fused kernels (the LSTM's crashed).
    """
    model = case.make_model()
    batch = case.make_batch(padding=padding)
    reference = model(**batch)
    trainable = any(p.requires_grad for p in model.parameters())  # the n-gram model has counts only
    if trainable:
        _objective(reference).backward()
    has_grad = {name: g is not None for name, g in _gradients(model).items()}
    model.zero_grad(set_to_none=True)

    with torch.autocast("cpu", dtype=dtype):
        output = model(**batch)
    _assert_near(output, reference, 0.05, case.name)
    if trainable:
        _objective(output).backward()
    for name, grad in _gradients(model).items():
        assert (grad is not None) == has_grad[name], name
        if grad is not None:
            assert grad.dtype == torch.float32 and torch.isfinite(grad).all(), name


@pytest.mark.parametrize("dtype", [BF16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("cell_type", sorted(RNN_CELLS))
def test_fused_rnn_kernels_under_cpu_autocast(cell_type, dtype):
    """Every cell's fused kernel runs in the autocast dtype, near the fp32 loop, with fp32 gradients.

    (fp16 autocast crashed the LSTM on CPUs without oneDNN fp16 kernels, bf16 on those without bf16 ones.)
    """
    rnn = StackedRNN(cell_type, 8, 16, num_layers=2, bidirectional=True, rnn_implementation="fused")
    loop = StackedRNN(cell_type, 8, 16, num_layers=2, bidirectional=True, rnn_implementation="loop")
    loop.load_state_dict(rnn.state_dict())
    x = torch.randn(2, 5, 8)
    reference, _ = loop(x)
    with torch.autocast("cpu", dtype=dtype):
        out, state = rnn(x)
    assert out.dtype == dtype and all(s.dtype == dtype for s in state)
    torch.testing.assert_close(out.float(), reference, atol=0.03, rtol=0.03)
    out.float().square().sum().backward()
    for name, param in rnn.named_parameters():
        assert param.grad.dtype == torch.float32 and torch.isfinite(param.grad).all(), name


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("case", GENERATING, ids=str)
def test_autocast_generate(case, dtype):
    model = case.make_model()
    prompt = case.prompt(case.make_batch())
    with torch.autocast("cpu", dtype=dtype):
        out = model.generate(**prompt, max_new_tokens=4, do_sample=False)
    assert out.shape[0] == prompt["input_ids"].shape[0] and out.shape[1] > 1
    assert 0 <= out.min() and out.max() < model.config.vocab_size


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_half_weights_forward(case, dtype):
    """`model.to(dtype)`: every float parameter in bf16 or fp16; forward (and generation) run, near fp32."""
    model = case.make_model()
    batch = case.make_batch()
    with torch.no_grad():
        reference = model(**batch)
        model.to(dtype)
        assert all(p.dtype == dtype for p in model.parameters() if p.is_floating_point())
        _assert_near(model(**batch), reference, 0.08, case.name)
        if case.generates:
            out = model.generate(**case.prompt(batch), max_new_tokens=3, do_sample=False)
            assert out.max() < model.config.vocab_size


@pytest.mark.parametrize("dtype", HALF)
def test_every_config_variant_in_half_precision_weights(dtype):
    """The variants beyond the cases (tests/config_variants.py: imported Llama and BERT, experts with a
    capacity, Mask-Predict's decoding), each with its weights in `dtype`: every check's forward near fp32
    and its search gives valid ids."""
    failures = []
    for name, model, _, checks in variant_models():
        forward = [inputs for inputs, search in checks if search is None]
        searches = [(inputs, search) for inputs, search in checks if search is not None]
        with torch.no_grad():
            references = [model(**inputs) for inputs in forward]
            model.to(dtype)
            try:  # every variant is tried; the failures name theirs
                for inputs, reference in zip(forward, references):
                    _assert_near(model(**inputs), reference, 0.08, name)
                for inputs, search in searches:
                    out = model.generate(**inputs, **search)
                    assert 0 <= out.min() and out.max() < model.config.vocab_size, f"{name}: ids out of range"
            except (AssertionError, RuntimeError, ValueError) as error:
                failures.append(f"{name}: {type(error).__name__}: {error}")
    assert not failures, failures


# ----------------------------------------------------------------------------------------------
# The training loop with --mixed_precision bf16 (in process, as tests/test_train_pretransformer.py)
# ----------------------------------------------------------------------------------------------

TINY_RUN = {
    "dataset": "synthetic",
    "max_documents": 100,
    "vocab_size": 300,
    "block_size": 16,
    "num_hidden_layers": 1,
    "hidden_size": 16,
    "per_device_batch_size": 4,
    "learning_rate": 3e-3,
    "warmup_steps": 1,
    "max_steps": 4,
    "eval_every": 4,
    "eval_batches": 2,
    "log_every": 2,
    "save_every": 4,
    "report_to": "csv",
    "mixed_precision": "bf16",
}


@pytest.fixture
def _fresh_accelerate_state():
    yield
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


@pytest.mark.usefixtures("_fresh_accelerate_state")
@pytest.mark.parametrize(
    "overrides,model_class",
    [
        ({"arch": "rnn", "cell_type": "lstm"}, hf_lm.HfLmRNNForCausalLM),
        (
            {"arch": "rnn_seq2seq", "cell_type": "lstm", "objective": "span_corruption"},
            hf_lm.HfLmRNNSeq2SeqForConditionalGeneration,
        ),
    ],
    ids=["rnn-lstm", "rnn_seq2seq-span_corruption"],
)
def test_bf16_training_run(tmp_path, monkeypatch, overrides, model_class):
    """`python -m training.train --mixed_precision bf16 --arch rnn|rnn_seq2seq ...` trains the LSTMs on
    CPU under autocast, to finite metrics."""
    autocast_seen = []
    forward = model_class.forward

    def spy(self, *args, **kwargs):
        if self.training:
            autocast_seen.append(torch.is_autocast_enabled("cpu"))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(model_class, "forward", spy)
    argv = []
    for key, value in {**TINY_RUN, **overrides, "output_dir": str(tmp_path)}.items():
        argv += [f"--{key}", str(value)]
    metrics = train(*parse_args(argv))
    assert metrics["step"] == TINY_RUN["max_steps"]
    assert autocast_seen and all(autocast_seen)  # every training forward ran in bf16 autocast
    numbers = {k: v for k, v in metrics.items() if isinstance(v, float)}
    assert "eval_loss" in numbers and all(math.isfinite(v) for v in numbers.values()), numbers


# ----------------------------------------------------------------------------------------------
# The same recurrent checks on a CPU without oneDNN's bf16 kernels
# ----------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="caps oneDNN's x86 ISA")
@pytest.mark.skipif(bool(os.environ.get("ONEDNN_MAX_CPU_ISA")), reason="already running with a capped oneDNN")
@pytest.mark.skipif(
    not torch.ops.mkldnn._is_mkldnn_bf16_supported(),
    reason="this CPU has no bf16 kernels: the `-k rnn` checks run without them in this interpreter already",
)
def test_recurrent_checks_on_a_cpu_without_bf16_kernels():
    """This file's recurrent checks (`-k rnn`) in a fresh interpreter whose oneDNN is capped at AVX2, so it
    has no bf16 RNN kernels: the LSTM's fused kernel under CPU autocast must not pick them there."""
    script = (
        "import sys, torch, pytest\n"
        "assert not torch.ops.mkldnn._is_mkldnn_bf16_supported(), 'ONEDNN_MAX_CPU_ISA=AVX2 left bf16 on'\n"
        f"sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', {__file__!r}, '-k', 'rnn']))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not an xdist worker
    env["ONEDNN_MAX_CPU_ISA"] = "AVX2"
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
