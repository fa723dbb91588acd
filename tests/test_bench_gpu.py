"""The GPU benchmark (benchmarks/bench_gpu.py), run here in its CPU smoke mode, and the pieces it is
built from: the nanoGPT-shaped model, the device helpers of bench_common, the bf16 peak probe."""

import json
import math

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from benchmarks import bench_common, bench_gpu
from benchmarks.measure import analytic_decoder_train_flops, measure_peak_flops

# every row the smoke run must write, in order (decoding at batch 1 and 8)
DECODE_ROWS = [
    f"gpt2_decode_b{b}/{key}"
    for b in (1, 8)
    for key in (
        "hf_lm/dynamic",
        "hf_lm/static",
        "hf_lm/static_compiled",
        "hf_lm/static_compiled_loop",
        "hf_lm/static_compiled_sample",
        "hf_lm/static_compiled_loop_sample",
        "transformers/dynamic",
        "transformers/static_compiled",
    )
]
EXPECTED_ROWS = [
    "gpt2_train/hf_lm/eager",
    "gpt2_train/transformers/eager",
    "gpt2_train/nanogpt/eager",
    "gpt2_train/hf_lm_unpadded/eager",
    "gpt2_train/hf_lm/compiled",
    "gpt2_train/transformers/compiled",
    "gpt2_train/nanogpt/compiled",
    "gpt2_head_loss/hf_lm/eager",
    "gpt2_head_loss/hf_lm_unpadded/eager",
    "gpt2_head_loss/hf_lm/compiled",
    "gpt2_head_loss/transformers/eager",
    "bert_train/hf_lm/eager",
    "bert_train/hf_lm_sparse/eager",
    "bert_train/transformers/eager",
    "bert_train/hf_lm/compiled",
    "bert_train/transformers/compiled",
    "t5_train/hf_lm/eager",
    "t5_train/transformers/eager",
    "t5_train/hf_lm/compiled",
    "t5_train/transformers/compiled",
    *DECODE_ROWS,
]
# BERT/T5 compilation is opt-in (--compile_encoders): the smoke run lists those rows as skipped
SKIPPED_IN_SMOKE = {
    "bert_train/hf_lm/compiled",
    "bert_train/transformers/compiled",
    "t5_train/hf_lm/compiled",
    "t5_train/transformers/compiled",
}


@pytest.mark.slow
def test_smoke_run_on_cpu_writes_every_row(tmp_path):
    """The whole smoke run (about a minute on a shared 2-core CPU): every planned row is in the
    JSON, measured, with the compiled and static-cache paths really taken; the targets, checks and
    markdown are written."""
    rc = bench_gpu.main(["--smoke", "--device", "cpu", "--threads", "1", "--output_dir", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "bench_gpu.json").read_text())
    rows = {row["id"]: row for row in result["rows"]}
    assert list(rows) == EXPECTED_ROWS  # a missing (or extra) row fails here
    assert (
        result["smoke"] is True and result["finished"] is True and result["accelerator"] == {"device": "cpu"}
    )
    assert (
        result["compile_backend"] == "eager" and "say nothing about compiled speed" in result["compile_note"]
    )

    for row_id, row in rows.items():
        if row_id in SKIPPED_IN_SMOKE:
            assert row["status"] == "skipped" and "--compile_encoders" in row["reason"], row
            continue
        assert row["status"] == "ok", row
        assert math.isfinite(row["value"]) and row["value"] > 0, row
        assert len(row["samples_s"]) == 2 and row["median_s"] > 0
    for impl in bench_gpu.GPT_IMPLS:
        compiled = rows[f"gpt2_train/{impl}/compiled"]
        assert compiled["dynamo_first_call"]["graphs"] >= 1  # Dynamo really traced the model
        assert 0 < compiled["mfu"] and compiled["optimizer"].startswith("AdamW(")
    for key in ("hf_lm/eager", "hf_lm_unpadded/eager", "hf_lm/compiled", "transformers/eager"):
        head = rows[f"gpt2_head_loss/{key}"]
        assert head["share_of_step"] > 0 and head["step_median_s"] == rows[f"gpt2_train/{key}"]["median_s"]
    for row_id in DECODE_ROWS:
        if "static" in row_id:
            assert rows[row_id]["tokens_identical_to_dynamic"] is True, row_id
        if "static_compiled" in row_id:
            assert rows[row_id]["compiled"] is True, row_id

    # the FLOP count of the reference is the fused-attention closed form; MFU uses PaLM's (12 L d T^2)
    s, flops = result["settings"], result["gpt_flops"]
    ref = GPT2LMHeadModel(GPT2Config(n_embd=s["gpt_hidden"], n_layer=s["gpt_layers"], n_head=s["gpt_heads"],
                                     vocab_size=s["gpt_vocab"], n_positions=s["gpt_context"]))  # fmt: skip
    assert flops["model_flops_per_step"] == bench_gpu.gpt_model_flops(ref, s["gpt_batch"], s["gpt_seq"])
    n = (
        flops["model_flops_per_step"]
        - 12 * s["gpt_layers"] * s["gpt_hidden"] * s["gpt_batch"] * s["gpt_seq"] ** 2
    )
    n //= 6 * s["gpt_batch"] * s["gpt_seq"]
    assert flops["counted_flops_per_step"] == analytic_decoder_train_flops(
        n, s["gpt_layers"], s["gpt_hidden"], s["gpt_batch"], s["gpt_seq"], fused_attention=True
    )

    assert result["checks_ok"] and all(check["ok"] for check in result["checks"].values())
    assert set(result["checks"]) == {
        "gpt2_logits",
        "bert_logits",
        "t5_logits",
        "decode_b1_tokens",
        "decode_b8_tokens",
    }
    assert [t["key"] for t in result["targets"]] == [t["key"] for t in bench_gpu.TARGETS]
    assert all(t["measured"] is not None for t in result["targets"])
    assert result["peak"]["peak_flops"] > 0 and result["peak"]["dtype"] == "bfloat16"
    markdown = (tmp_path / "bench_gpu.md").read_text()
    for t in bench_gpu.TARGETS:
        assert t["text"] in markdown
    assert markdown.count("| GPT-2 decoding B=") == len(DECODE_ROWS) and "## Checks" in markdown
    assert (tmp_path / "profile_gpt2_hf_lm_train.txt").is_file()
    # the compiled decoding rows' profile: the host's time found in generate()'s parts
    profiled = result["decode_profile"]["rows"]
    assert sorted(profiled) == [
        "gpt2_decode_b1/hf_lm/static_compiled",
        "gpt2_decode_b1/hf_lm/static_compiled_loop",
        "gpt2_decode_b1/transformers/static_compiled",
    ]
    for row_id, p in profiled.items():
        assert 0 < p["host_share"]["compiled forward"] < 1
        prepare = p["host_share"]["prepare_inputs_for_generation"]
        if row_id.endswith("_loop"):  # static_decode prepares its inputs once
            assert prepare is None
        else:
            assert 0 < prepare < 1
    assert "Profile of one compiled static-cache call" in markdown
    assert (tmp_path / "profile_gpt2_decode_b1.txt").is_file()


def test_without_cuda_it_says_so_and_exits_0(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench_gpu.main(["--output_dir", str(tmp_path)]) == 0
    assert "needs CUDA" in capsys.readouterr().out
    assert not (tmp_path / "bench_gpu.json").exists()
    with pytest.raises(SystemExit):  # asking for CUDA explicitly is an error
        bench_gpu.main(["--device", "cuda", "--output_dir", str(tmp_path)])
    with pytest.raises(SystemExit):
        bench_gpu.main(["--smoke", "--device", "cpu", "--sections", "gpt_train,bogus"])


def test_nanogpt_computes_gpt2s_function():
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=97, n_positions=24, n_embd=32, n_layer=2, n_head=4, activation_function="gelu_new"
    )
    ref = GPT2LMHeadModel._from_config(config, attn_implementation="sdpa").eval()
    nano = bench_gpu.NanoGPT.from_gpt2(ref).eval()
    assert nano.lm_head.weight is nano.wte.weight  # tied
    assert sum(p.numel() for p in nano.parameters()) == sum(p.numel() for p in ref.parameters())
    ids = torch.randint(0, 97, (3, 24))
    with torch.no_grad():
        a, b = nano(ids, labels=ids), ref(input_ids=ids, labels=ids)
    assert (a.logits - b.logits).abs().max() < 1e-5
    assert abs(a.loss.item() - b.loss.item()) < 1e-5


def test_device_helpers():
    assert bench_common.resolve_device("cpu") == "cpu"
    assert bench_common.resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="device"):
        bench_common.resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            bench_common.resolve_device("cuda")
    assert bench_common.accelerator_info("cpu") == {"device": "cpu"}

    calls, syncs = [], []
    samples = bench_common.alternating_rounds(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
        rounds=3,
        reps=2,
        warmup=1,
        synchronize=lambda: syncs.append(1),
    )
    assert calls == ["a", "b"] + ["a", "a", "b", "b"] + ["b", "b", "a", "a"] + ["a", "a", "b", "b"]
    assert {k: len(v) for k, v in samples.items()} == {"a": 3, "b": 3}
    assert len(syncs) == 1 + 3 * 2 * 2  # after warm-up, then before both clock reads of every sample


def test_kernel_time_counts_each_kernel_once():
    """A profile lists a GPU kernel twice: as its own (device) event and inside the self device time
    of the operator that launched it. The busy time is the kernels' events alone."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    events = [
        SimpleNamespace(key="aten::mm", device_type=DeviceType.CPU, self_device_time_total=30.0),
        SimpleNamespace(key="gemm_kernel", device_type=DeviceType.CUDA, self_device_time_total=30.0),
        SimpleNamespace(key="aten::add", device_type=DeviceType.CPU, self_device_time_total=5.0),
        SimpleNamespace(key="add_kernel", device_type=DeviceType.CUDA, self_device_time_total=5.0),
    ]
    assert bench_gpu.kernel_time_us(events) == 35.0


def test_a_failing_row_is_recorded_and_the_others_timed():
    rows = bench_gpu.Rows()
    rows.plan("x/ok", "s", "w", "hf_lm", "eager", "s")
    rows.plan("x/bad", "s", "w", "hf_lm", "eager", "s")

    def bad():
        raise RuntimeError("CUDA out of memory")

    settings = {"warmup": 0}
    samples = bench_gpu.time_group(
        rows, {"x/ok": lambda: None, "x/bad": bad}, settings, torch.device("cpu"), 1, 2
    )
    assert list(samples) == ["x/ok"] and rows["x/ok"]["status"] == "ok"
    assert rows["x/bad"]["status"] == "error" and "out of memory" in rows["x/bad"]["error"]


def test_peak_probe_takes_a_dtype_and_a_device():
    result = measure_peak_flops(sizes=(32, 64), repeats=2, min_time=0.005, dtype=torch.bfloat16, device="cpu")
    assert result["peak_flops"] > 0 and result["dtype"] == "bfloat16" and result["device"] == "cpu"
    assert result["device_name"] is None


def test_decode_writes_each_batch_size_before_the_next(tmp_path, monkeypatch):
    """A decode section stopped by a time limit while it compiles its batch-8 rows (as on the second
    H100) must leave batch 1's rows and token checks in bench_gpu.json."""
    on_disk = {}
    real_time_group = bench_gpu.time_group

    class TimeLimit(BaseException):  # as the kill: not an `Exception` a failing row is caught as
        pass

    def spy(rows, fns, *args, **kwargs):
        if any(row_id.startswith("gpt2_decode_b8/") for row_id in fns):  # batch 8 is about to start
            on_disk.update(json.loads((tmp_path / "bench_gpu.json").read_text()))
            raise TimeLimit
        return real_time_group(rows, fns, *args, **kwargs)

    monkeypatch.setattr(bench_gpu, "time_group", spy)
    argv = ["--smoke", "--device", "cpu", "--threads", "1", "--sections", "decode", "--no_compile"]
    argv += ["--decode_rounds", "1"]
    with pytest.raises(TimeLimit):
        bench_gpu.main([*argv, "--output_dir", str(tmp_path)])
    rows = {row["id"]: row for row in on_disk["rows"]}
    assert on_disk["finished"] is False
    for key in ("hf_lm/dynamic", "hf_lm/static", "transformers/dynamic"):
        assert rows[f"gpt2_decode_b1/{key}"]["status"] == "ok" and rows[f"gpt2_decode_b1/{key}"]["value"] > 0
        assert rows[f"gpt2_decode_b8/{key}"]["status"] == "not run"
    assert on_disk["checks"]["decode_b1_tokens"]["ok"] is True
