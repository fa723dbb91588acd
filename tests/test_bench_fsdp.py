"""The accounting of the speed runner's fsdp entry (benchmarks/speed_fsdp.py), in one process: saved tensors counted once and
released by the backward, storages counted once, the cost model's scaling and the budget search."""

import pytest
import torch

from benchmarks.speed_fsdp import (
    MemoryMeter,
    SavedTensorCounter,
    allocator_peak,
    family_config,
    largest_in_budget,
    predict_peaks,
    shape_numels,
    storage_bytes,
)


def test_a_tensor_saved_by_two_ops_counts_once_until_the_backward_releases_it():
    w = torch.randn(256, requires_grad=True)
    x = torch.randn(1024)  # 4 KiB, saved by both products below
    live = []
    counter = SavedTensorCounter(excluded={w.untyped_storage()._cdata}.__contains__)
    counter.on_change = lambda: live.append(counter.bytes)
    with counter.hooks():
        y = (x.view(4, 256) * w).sum() + (x[:256] * w).sum()  # two views of x's storage, and w
    assert counter.bytes == counter.peak == 4096  # x once; the parameter w left out
    y.backward()
    assert counter.bytes == 0 and counter.live == {}
    assert live == [4096, 0]  # one count up, one down: the second save of x added nothing
    torch.testing.assert_close(w.grad, x.view(4, 256).sum(0) + x[:256])


def test_saved_tensors_are_filed_under_their_category():
    a = torch.randn(8, 16, requires_grad=True)
    counter = SavedTensorCounter(category=lambda t: "wide" if t.shape[-1] == 16 else "narrow")
    with counter.hooks():
        b = a.exp()  # saves its output (8 x 16 floats)
        c = b[:, :4].sin()  # saves its input, a view of b's storage: already counted
        d = torch.randn(8, 4, requires_grad=True).exp()
    assert counter.by_category == {"wide": 512, "narrow": 128}
    (c.sum() + d.sum()).backward()
    assert counter.by_category == {"wide": 0, "narrow": 0}


def test_storage_bytes_counts_shared_storage_once_and_skips_none():
    base = torch.zeros(100)
    assert storage_bytes([base[:10], base[50:], None, torch.zeros(3, dtype=torch.float64)]) == 400 + 24


def test_meter_keeps_each_peak_with_its_parts_and_the_total_peak():
    clock = iter([{"a": 1, "b": 9}, {"a": 5, "b": 1}, {"a": 2, "b": 2}])
    now = {}
    meter = MemoryMeter({"x": lambda: {"p": now["a"]}, "y": lambda: {"q": now["b"]}})
    for state in clock:
        now = state
        meter.sample()
    result = meter.result()
    assert result["peak_bytes"] == {"x": 5, "y": 9} and result["sum_of_peaks_bytes"] == 14
    assert result["total_peak_bytes"] == 10 and result["at_total_peak_bytes"] == {"x": 1, "y": 9}


def test_allocator_peak_follows_the_events_in_time_order():
    # allocate 4, allocate 4, free 4, allocate 12, free everything: 16 held at most, given shuffled
    events = [(3, -4), (1, 4), (5, -16), (4, 12), (2, 4)]
    assert allocator_peak(events) == 16
    assert allocator_peak([(1, -8), (2, 4)]) == 0  # frees of what was held before the start: no peak


def test_largest_in_budget_picks_the_largest_fitting_size():
    def cost(k):  # synthetic: 20 bytes per parameter of a 12 k^3-parameter model, plus 100 per k
        return 20 * 12 * k**3 + 100 * k

    assert largest_in_budget(range(1, 20), cost, cost(7)) == 7
    assert largest_in_budget(range(1, 20), cost, cost(7) - 1) == 6
    assert largest_in_budget(range(1, 20), cost, 10**12) == 19
    assert largest_in_budget(range(1, 20), cost, 10) is None


def test_prediction_scales_each_part_by_what_it_grows_with():
    ref = {"total": 100, "block": 10, "root": 20, "layers": 8, "hidden": 512}
    new = {"total": 300, "block": 40, "root": 30, "layers": 12, "hidden": 768}
    measured = {
        "optimizer_state": {"all": 800},
        "activations": {"blocks": 1000, "vocab": 50, "other": 64},
        "gathered_parameters": {"root": 80, "blocks": 40},
    }
    assert predict_peaks(measured, ref, new) == {
        "optimizer_state": 2400,  # with the parameter count
        "activations": 1000 * (12 * 768) // (8 * 512) + 50 + 96,  # layers x width; fixed; width
        "gathered_parameters": 120 + 160,  # the root's and a block's parameters
    }


def test_family_shapes_and_their_parameter_counts():
    shape = shape_numels(family_config(8, vocab=8192, block=256))
    block = 12 * 512**2 + 13 * 512  # qkv, out, MLP up and down with biases, two norms
    assert shape["block"] == block
    assert shape["root"] == 8192 * 512 + 256 * 512 + 2 * 512  # tied head, positions, final norm
    assert shape["total"] == 8 * block + shape["root"] == 29_545_472
    with pytest.raises(ValueError, match="`k`"):
        family_config(0, vocab=8192, block=256)
