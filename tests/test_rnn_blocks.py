"""The shared recurrent blocks against torch.nn.RNN/LSTM/GRU, masking, stepping, gradients and the cache."""

import pytest
import torch
from torch import nn

from hf_lm.models.hflm_rnn_blocks import (
    RNN_CELLS,
    RNN_IMPLEMENTATIONS,
    RecurrentCache,
    RecurrentLayer,
    StackedRNN,
)

CELLS = sorted(RNN_CELLS)
IN, H, B, T = 5, 6, 3, 7
TOL = dict(atol=1e-5, rtol=1e-5)


def torch_rnn(cell_type, **kwargs):
    cell = RNN_CELLS[cell_type]
    if cell.nonlinearity is not None:
        kwargs["nonlinearity"] = cell.nonlinearity
    return cell.torch_module(IN, H, batch_first=True, **kwargs)


def as_tuple(state):
    return state if isinstance(state, tuple) else (state,)


def random_state(cell_type, layers_x_dirs, batch=B):
    return tuple(torch.randn(layers_x_dirs, batch, H) for _ in range(RNN_CELLS[cell_type].num_states))


def torch_hx(state):
    return state if len(state) == 2 else state[0]


@pytest.mark.parametrize("cell_type", CELLS)
@pytest.mark.parametrize("bias", [True, False])
def test_recurrent_layer_matches_torch(cell_type, bias):
    ref = torch_rnn(cell_type, bias=bias)
    layer = RecurrentLayer(cell_type, IN, H, bias=bias)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if bias else ()):
            assert getattr(layer, name).shape == getattr(ref, name + "_l0").shape
            getattr(layer, name).copy_(getattr(ref, name + "_l0"))
    x = torch.randn(B, T, IN)
    state = tuple(s[0] for s in random_state(cell_type, 1))
    ref_out, ref_state = ref(x, torch_hx(tuple(s[None] for s in state)))
    out, final = layer(x, state)
    torch.testing.assert_close(out, ref_out, **TOL)
    for mine, theirs in zip(final, as_tuple(ref_state)):
        torch.testing.assert_close(mine, theirs[0], **TOL)
    # reverse=True is torch's backward direction: the forward direction of the flipped sequence
    rev_out, rev_final = layer(x, state, reverse=True)
    flip_out, flip_final = layer(x.flip(1), state)
    torch.testing.assert_close(rev_out, flip_out.flip(1), **TOL)
    torch.testing.assert_close(rev_final[0], flip_final[0], **TOL)


@pytest.mark.parametrize("cell_type", CELLS)
@pytest.mark.parametrize("num_layers", [1, 2, 3])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("implementation", RNN_IMPLEMENTATIONS)
def test_stacked_rnn_matches_torch(cell_type, num_layers, bidirectional, implementation):
    ref = torch_rnn(cell_type, num_layers=num_layers, bidirectional=bidirectional).eval()
    rnn = StackedRNN.from_torch(ref, rnn_implementation=implementation).eval()
    D = 2 if bidirectional else 1
    x = torch.randn(B, T, IN)
    for state in (None, random_state(cell_type, num_layers * D)):
        ref_out, ref_state = ref(x, None if state is None else torch_hx(state))
        out, final = rnn(x, state)
        assert out.shape == (B, T, D * H)
        torch.testing.assert_close(out, ref_out, **TOL)
        ref_state = as_tuple(ref_state)
        assert len(final) == len(ref_state) == RNN_CELLS[cell_type].num_states
        for mine, theirs in zip(final, ref_state):
            assert mine.shape == (num_layers * D, B, H)
            torch.testing.assert_close(mine, theirs, **TOL)


@pytest.mark.parametrize("cell_type", CELLS)
def test_weights_round_trip_to_torch(cell_type):
    rnn = StackedRNN(cell_type, IN, H, num_layers=2, bidirectional=True, dropout=0.25)
    module = rnn.to_torch()
    assert isinstance(module, RNN_CELLS[cell_type].torch_module) and module.dropout == 0.25
    x = torch.randn(B, T, IN)
    torch.testing.assert_close(rnn.eval()(x)[0], module.eval()(x)[0], **TOL)
    # parameter count equals torch's: same layout, nothing extra
    assert sum(p.numel() for p in rnn.parameters()) == sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("cell_type", CELLS)
@pytest.mark.parametrize("implementation", RNN_IMPLEMENTATIONS)
def test_implementations_agree_with_dropout_off_and_gradients(cell_type, implementation):
    torch.manual_seed(0)
    rnn = StackedRNN(cell_type, IN, H, num_layers=2, bidirectional=True, rnn_implementation=implementation)
    other = StackedRNN(cell_type, IN, H, num_layers=2, bidirectional=True)
    other.load_state_dict(rnn.state_dict())
    other.rnn_implementation = "loop" if implementation == "fused" else "fused"
    x = torch.randn(B, T, IN, requires_grad=True)
    state = tuple(s.requires_grad_() for s in random_state(cell_type, 4))
    out, final = rnn(x, state)
    (out.square().sum() + sum(f.sum() for f in final)).backward()
    grads = [p.grad.clone() for p in rnn.parameters()] + [x.grad.clone()] + [s.grad.clone() for s in state]
    for p in rnn.parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0
    x.grad = None
    for s in state:
        s.grad = None
    out2, final2 = other(x, state)
    (out2.square().sum() + sum(f.sum() for f in final2)).backward()
    torch.testing.assert_close(out2, out, **TOL)
    grads2 = [p.grad for p in other.parameters()] + [x.grad] + [s.grad for s in state]
    for g1, g2 in zip(grads, grads2):
        torch.testing.assert_close(g1, g2, **TOL)


@pytest.mark.parametrize("cell_type", CELLS)
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("implementation", RNN_IMPLEMENTATIONS)
@pytest.mark.parametrize("side", ["right", "left"])
def test_masked_rows_equal_the_row_alone(cell_type, bidirectional, implementation, side):
    rnn = StackedRNN(
        cell_type, IN, H, num_layers=2, bidirectional=bidirectional, rnn_implementation=implementation
    )
    lengths = [T, 4, 1]
    x = torch.randn(len(lengths), T, IN)
    mask = torch.zeros(len(lengths), T, dtype=torch.bool)
    for b, n in enumerate(lengths):
        if side == "right":
            mask[b, :n] = True
        else:
            mask[b, T - n :] = True
    out, final = rnn(x, mask=mask)
    for b in range(len(lengths)):
        real = mask[b]
        alone_out, alone_final = rnn(x[b : b + 1, real])
        torch.testing.assert_close(out[b, real], alone_out[0], **TOL)
        assert torch.all(out[b, ~real] == 0)  # padded steps output zeros
        for mine, theirs in zip(final, alone_final):
            # the final state is the one after the row's last real token (both directions)
            torch.testing.assert_close(mine[:, b], theirs[:, 0], **TOL)


def test_masked_reverse_matches_packed_sequence():
    """torch's own answer for right padding: a packed sequence through a bidirectional LSTM."""
    ref = torch_rnn("lstm", num_layers=2, bidirectional=True).eval()
    rnn = StackedRNN.from_torch(ref).eval()
    lengths = torch.tensor([T, 5, 2])
    x = torch.randn(3, T, IN)
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    ref_out, (h, c) = ref(packed)
    ref_out, _ = nn.utils.rnn.pad_packed_sequence(ref_out, batch_first=True, total_length=T)
    out, (my_h, my_c) = rnn(x, mask=torch.arange(T)[None] < lengths[:, None])
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(my_h, h, **TOL)
    torch.testing.assert_close(my_c, c, **TOL)


@pytest.mark.parametrize("cell_type", CELLS)
def test_step_by_step_equals_full_sequence(cell_type):
    rnn = StackedRNN(cell_type, IN, H, num_layers=3).eval()
    x = torch.randn(B, T, IN)
    full_out, full_state = rnn(x)
    state, outs = None, []
    for t in range(T):
        out, state = rnn.step(x[:, t], state)
        outs.append(out)
    torch.testing.assert_close(torch.stack(outs, 1), full_out, **TOL)
    for a, b in zip(state, full_state):
        torch.testing.assert_close(a, b, **TOL)
    # a masked step keeps the state of that row
    mask = torch.tensor([True, False, True])
    out, kept = rnn.step(x[:, 0], full_state, mask=mask)
    for new, old in zip(kept, full_state):
        torch.testing.assert_close(new[:, 1], old[:, 1], rtol=0, atol=0)
        assert not torch.allclose(new[:, 0], old[:, 0])
    assert torch.all(out[1] == 0)
    # one layer's fused kernel is its loop, forwards and backwards
    layer = rnn.layers[0]
    for reverse in (False, True):
        loop_out, loop_state = layer(x, reverse=reverse)
        fused_out, fused_state = layer(x, reverse=reverse, fused=True)
        torch.testing.assert_close(fused_out, loop_out, **TOL)
        for a, b in zip(fused_state, loop_state):
            torch.testing.assert_close(a, b, **TOL)


def test_dropout_is_between_layers_only():
    rnn = StackedRNN("gru", IN, H, num_layers=1, dropout=0.9).train()
    x = torch.randn(B, T, IN)
    torch.testing.assert_close(rnn(x)[0], rnn(x)[0])  # one layer: no dropout anywhere
    deep = StackedRNN("gru", IN, H, num_layers=2, dropout=0.9).train()
    assert not torch.allclose(deep(x)[0], deep(x)[0])
    deep.eval()
    torch.testing.assert_close(deep(x)[0], deep(x)[0])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cell_type", CELLS)
def test_half_precision(cell_type, dtype):
    rnn = StackedRNN(cell_type, IN, H, num_layers=2, bidirectional=True)
    x = torch.randn(B, T, IN)
    ref, _ = rnn(x)
    rnn = rnn.to(dtype)
    results = []
    for implementation in RNN_IMPLEMENTATIONS:
        rnn.rnn_implementation = implementation
        out, state = rnn(x.to(dtype))
        assert out.dtype == dtype and all(s.dtype == dtype for s in state)
        results.append(out.float())
    masked, _ = rnn(x.to(dtype), mask=torch.ones(B, T, dtype=torch.bool).tril(T - 3))
    assert masked.dtype == dtype and torch.isfinite(masked.float()).all()
    for out in results:
        torch.testing.assert_close(out, ref, atol=5e-2, rtol=5e-2)


def test_clear_errors():
    with pytest.raises(ValueError, match="cell_type"):
        StackedRNN("lstmm", IN, H)
    with pytest.raises(ValueError, match="rnn_implementation"):
        StackedRNN("lstm", IN, H, rnn_implementation="cudnn")
    with pytest.raises(ValueError, match="dropout"):
        StackedRNN("lstm", IN, H, dropout=1.0)
    with pytest.raises(ValueError, match="num_layers"):
        StackedRNN("lstm", IN, H, num_layers=0)
    rnn = StackedRNN("lstm", IN, H, num_layers=2)
    with pytest.raises(ValueError, match="input must be"):
        rnn(torch.randn(B, T, IN + 1))
    with pytest.raises(ValueError, match=r"tuple of 2"):
        rnn(torch.randn(B, T, IN), (torch.zeros(2, B, H),))
    with pytest.raises(ValueError, match=r"\(2, 3, 6\)"):
        rnn(torch.randn(B, T, IN), (torch.zeros(1, B, H), torch.zeros(1, B, H)))
    with pytest.raises(ValueError, match="mask"):
        rnn(torch.randn(B, T, IN), mask=torch.ones(B, T + 1))
    with pytest.raises(ValueError, match="unidirectional"):
        StackedRNN("gru", IN, H, bidirectional=True).step(torch.randn(B, IN))


def test_recurrent_cache_reorder_detach_and_extras():
    state = (torch.arange(2 * 3 * 2.0).view(2, 3, 2).requires_grad_(), torch.zeros(2, 3, 2))
    extra = torch.arange(3.0)[:, None].repeat(1, 4)
    cache = RecurrentCache(extras={"input_feed": extra})
    assert cache.get_seq_length() == 0 and not cache.is_initialized
    cache.update(tuple(s * 1 for s in state), 5)
    assert cache.get_seq_length() == 5 and cache.batch_size == 3
    detached = cache.detach()
    assert detached is not cache and not detached.state[0].requires_grad and cache.state[0].requires_grad
    assert detached.get_seq_length() == 5
    beam_idx = torch.tensor([2, 2, 0])
    cache.reorder_cache(beam_idx)
    torch.testing.assert_close(cache.state[0], state[0][:, beam_idx])
    torch.testing.assert_close(cache.extras["input_feed"], extra[beam_idx])
    detached.batch_repeat_interleave(2)
    assert detached.state[0].shape == (2, 6, 2) and detached.extras["input_feed"].shape == (6, 4)
    torch.testing.assert_close(detached.state[0][:, 1], state[0][:, 0].detach())
    with pytest.raises(ValueError, match="cropped"):
        cache.crop(3)
    assert not cache.is_compileable and not cache.is_croppable
