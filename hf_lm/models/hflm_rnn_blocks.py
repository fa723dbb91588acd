"""Shared recurrent building blocks of hf_lm's pre-Transformer families (the RNN LM, the RNN encoder-decoder).

Shipped model code: `save_pretrained` copies this file next to the weights, so it imports only torch,
transformers and sibling files (`from .x import Y`).

- `RNN_CELLS`: the cell step functions (Elman tanh/ReLU, LSTM, GRU) with their equations, indexed by a
  validated `cell_type` string.
- `RecurrentLayer`: one layer, one direction, with torch.nn.RNN/LSTM/GRU's parameter names, shapes and
  gate order, so weights copy to and from torch's modules. Its loop is the readable reference.
- `StackedRNN`: layers stacked (and optionally bidirectional), with dropout between layers and two
  interchangeable implementations (`RNN_IMPLEMENTATIONS`): torch's fused kernels, or the loop.
- `RecurrentCache`: the recurrent state `generate()` carries between steps (and truncated BPTT between
  blocks), reorderable for beam search.

State format everywhere: a tuple of tensors, `(h,)` or `(h, c)` for the LSTM. For one `RecurrentLayer`
each is (B, H); for a `StackedRNN` each is (num_layers * D, B, H), layer-major as torch orders `h_n`.

Shape legend: B batch, T time steps, I input size, H hidden size, G gates, D directions (1 or 2), L layers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .hflm_common import (
    RNN_CELL_NAMES,
    RNN_IMPLEMENTATIONS,
    _choice,
    _positive_int,
)

State = tuple[torch.Tensor, ...]

# ----------------------------------------------------------------------------------------------
# Cells. Each step function takes the two pre-activations torch's kernels also compute,
#   gi = W_ih x_t + b_ih   (B, G*H)   (for every t at once: one matmul hoisted out of the time loop)
#   gh = W_hh h    + b_hh  (B, G*H)
# and the previous state, and returns the next state. Gate order and bias placement follow torch
# (and cuDNN), so the same parameters give the same numbers in the loop and in the fused kernels.
# ----------------------------------------------------------------------------------------------


def elman_tanh_step(gi: torch.Tensor, gh: torch.Tensor, state: State) -> State:
    """Elman (1990), "Finding structure in time": h' = tanh(W_ih x + b_ih + W_hh h + b_hh)."""
    return (torch.tanh(gi + gh),)  # (B, H)


def elman_relu_step(gi: torch.Tensor, gh: torch.Tensor, state: State) -> State:
    """Elman's recurrence with a ReLU: h' = relu(W_ih x + b_ih + W_hh h + b_hh) (unbounded, so it can explode)."""
    return (torch.relu(gi + gh),)  # (B, H)


def lstm_step(gi: torch.Tensor, gh: torch.Tensor, state: State) -> State:
    """LSTM (Hochreiter & Schmidhuber, 1997) with the forget gate of Gers et al. (2000), torch's gate order:

    i = sigmoid(gi_i + gh_i)      input gate
    f = sigmoid(gi_f + gh_f)      forget gate
    g = tanh(gi_g + gh_g)         candidate cell
    o = sigmoid(gi_o + gh_o)      output gate
    c' = f * c + i * g            the additive cell path that lets gradients survive many steps
    h' = o * tanh(c')
    """
    _, c = state  # (B, H)
    i, f, g, o = (gi + gh).chunk(4, dim=-1)  # 4 x (B, H)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    h = torch.sigmoid(o) * torch.tanh(c)
    return h, c


def gru_step(gi: torch.Tensor, gh: torch.Tensor, state: State) -> State:
    """GRU (Cho et al., 2014), torch's gate order r, z, n:

    r = sigmoid(gi_r + gh_r)          reset gate
    z = sigmoid(gi_z + gh_z)          update gate
    n = tanh(gi_n + r * gh_n)         candidate; r scales (W_hn h + b_hn), the cuDNN/torch variant
                                      (the paper puts r inside: W_hn (r * h))
    h' = (1 - z) * n + z * h
    """
    (h,) = state  # (B, H)
    i_r, i_z, i_n = gi.chunk(3, dim=-1)  # 3 x (B, H)
    h_r, h_z, h_n = gh.chunk(3, dim=-1)
    r = torch.sigmoid(i_r + h_r)
    z = torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return (n + z * (h - n),)  # = (1 - z) * n + z * h, one op fewer


class RNNCell(NamedTuple):
    """One row of `RNN_CELLS`."""

    step: Callable[[torch.Tensor, torch.Tensor, State], State]
    num_gates: int  # G: rows of weight_ih / weight_hh are G * H
    num_states: int  # 1 (h) or 2 (h, c)
    fused: Callable  # torch's fused multi-step kernel taking a flat parameter list
    torch_module: type  # the torch.nn module with the same parameters
    nonlinearity: str | None  # torch.nn.RNN's `nonlinearity` argument


RNN_CELLS = {
    "rnn_tanh": RNNCell(elman_tanh_step, 1, 1, torch.rnn_tanh, nn.RNN, "tanh"),
    "rnn_relu": RNNCell(elman_relu_step, 1, 1, torch.rnn_relu, nn.RNN, "relu"),
    "lstm": RNNCell(lstm_step, 4, 2, torch.lstm, nn.LSTM, None),
    "gru": RNNCell(gru_step, 3, 1, torch.gru, nn.GRU, None),
}

assert tuple(RNN_CELLS) == RNN_CELL_NAMES  # the names the configs validate against


def _check_state(state, num_states: int, shape: tuple[int, ...], what: str) -> State:
    if isinstance(state, torch.Tensor):
        state = (state,)  # a bare h for the one-state cells, as torch.nn.RNN/GRU accept
    if not isinstance(state, (tuple, list)) or len(state) != num_states:
        raise ValueError(
            f"{what} must be a tuple of {num_states} tensor(s) ({'(h, c)' if num_states == 2 else '(h,)'}), "
            f"got {type(state).__name__}{'' if not isinstance(state, (tuple, list)) else f' of {len(state)}'}."
        )
    for tensor in state:
        if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != shape:
            got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise ValueError(f"{what} tensors must have shape {shape}, got {got}.")
    return tuple(state)


def _check_mask(
    mask: torch.Tensor | None, batch: int, length: int, none_if_all_real: bool = True
) -> torch.Tensor | None:
    """A (B, T) bool step mask, or None when every step is real (so the fused path applies).

    Finding that out reads the mask on the host, a device sync: `none_if_all_real=False` skips it
    where nothing would change (the loop handles an all-real mask the same).
    """
    if mask is None:
        return None
    if tuple(mask.shape) != (batch, length):
        raise ValueError(
            f"`mask` must have shape (batch, seq_len) = ({batch}, {length}), got {tuple(mask.shape)}."
        )
    mask = mask.bool()
    if none_if_all_real and not torch.compiler.is_compiling() and bool(mask.all()):
        return None
    return mask


def _cpu_autocast_inputs(x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
    """The fused kernels' input and initial state in the autocast dtype under CPU autocast (else unchanged).

    Why: CPU autocast has no rule for `lstm`/`gru`/`rnn_*` (they fall through), and torch's CPU LSTM
    picks its kernel from the input's dtype. An fp32 input always selects oneDNN, and oneDNN's
    `mkldnn_rnn_layer` is on CPU autocast's lower-precision list, so it is cast to bf16 (or fp16)
    whether or not this CPU has oneDNN kernels for that dtype; where it has not (for bf16, x86 without
    AVX-512, as in many desktops and laptops; for fp16, x86 without AVX512-FP16) the forward fails with
    "could not create a primitive descriptor for the LSTM forward propagation primitive". Given an
    input already in the autocast dtype, torch checks the CPU itself: oneDNN where it supports that
    dtype, ATen's native kernels elsewhere. The weights stay fp32 parameters (autocast casts them
    inside, so their gradients are fp32). Every cell type is treated alike: all run in the autocast dtype.
    CUDA is left alone: autocast's own `_cudnn_rnn` wrapper casts the input, states and weights
    (re-flattened) for cuDNN.
    """
    if x.device.type != "cpu" or not torch.is_autocast_enabled("cpu"):
        return x, state
    dtype = torch.get_autocast_dtype("cpu")
    return x.to(dtype), tuple(s.to(dtype) for s in state)


# ----------------------------------------------------------------------------------------------
# One layer, one direction
# ----------------------------------------------------------------------------------------------


class RecurrentLayer(nn.Module):
    """One recurrent layer in one direction, parameterized exactly like a torch.nn.RNN/LSTM/GRU layer.

    Parameters (G gates, see `RNN_CELLS`): `weight_ih` (G*H, I), `weight_hh` (G*H, H), `bias_ih`,
    `bias_hh` (G*H); the rows are the gates in torch's order, so `weight_ih_l0` of a torch module
    copies straight into `weight_ih`.

    Args:
        cell_type: one of `RNN_CELLS` ("rnn_tanh", "rnn_relu", "lstm", "gru").
        input_size: I.
        hidden_size: H.
        bias: learn `bias_ih` and `bias_hh`.
    """

    def __init__(self, cell_type: str, input_size: int, hidden_size: int, bias: bool = True):
        super().__init__()
        _choice("cell_type", cell_type, RNN_CELLS)
        _positive_int("input_size", input_size)
        _positive_int("hidden_size", hidden_size)
        self.cell_type = cell_type
        self.cell = RNN_CELLS[cell_type]
        self.input_size = input_size
        self.hidden_size = hidden_size
        gates = self.cell.num_gates * hidden_size
        # torch.empty: the owning model initializes (`reset_parameters` here, `_init_weights` in hf_lm models)
        self.weight_ih = nn.Parameter(torch.empty(gates, input_size))
        self.weight_hh = nn.Parameter(torch.empty(gates, hidden_size))
        if bias:
            self.bias_ih = nn.Parameter(torch.empty(gates))
            self.bias_hh = nn.Parameter(torch.empty(gates))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """torch's default: U(-1/sqrt(H), 1/sqrt(H)) for every parameter."""
        bound = self.hidden_size**-0.5
        for param in self.parameters():
            nn.init.uniform_(param, -bound, bound)

    def extra_repr(self) -> str:
        return f"{self.cell_type}, {self.input_size}, {self.hidden_size}, bias={self.bias_ih is not None}"

    def initial_state(self, batch_size: int, device=None, dtype=None) -> State:
        """The zero state: `num_states` tensors of shape (B, H)."""
        dtype = dtype or self.weight_hh.dtype
        device = device or self.weight_hh.device
        return tuple(
            torch.zeros(batch_size, self.hidden_size, device=device, dtype=dtype)
            for _ in range(self.cell.num_states)
        )

    def forward(
        self,
        x: torch.Tensor,
        state: State | None = None,
        mask: torch.Tensor | None = None,
        reverse: bool = False,
        fused: bool = False,
    ) -> tuple[torch.Tensor, State]:
        """Run the layer over all T steps: the loop, or torch's fused kernel (`fused`, unmasked input).

        Every use of the weights goes through this call (the stack's fused levels and its one-step
        decoding too), so a wrapper of this module sees all of them: a LoRA on the parameters
        swaps `weight_ih`/`weight_hh` for W + BA only for the duration of the wrapped call.

        Args:
            x: (B, T, I) inputs.
            state: initial state ((B, H), ...); zeros when None.
            mask: (B, T), True/1 for real steps. On a padded step the state is carried unchanged
                and the output is zero, so a reversed pass over a right-padded row starts at its
                last real token and a left-padded row starts its real tokens from the initial state.
            reverse: run from t = T-1 down to 0 (the backward direction of a bidirectional layer).
            fused: run torch's multi-step kernel when no step is masked (the loop otherwise); the
                same results.

        Returns:
            outputs (B, T, H), the top state `h` of every step (zero on padded steps), and the final
            state ((B, H), ...): the state after each row's last real token.
        """
        if x.dim() != 3 or x.shape[-1] != self.input_size or x.shape[1] == 0:
            raise ValueError(
                f"`x` must be a non-empty (batch, seq_len, {self.input_size}) tensor, got {tuple(x.shape)}."
            )
        B, T, _ = x.shape
        if state is None:
            state = self.initial_state(B, x.device, x.dtype)
        state = _check_state(state, self.cell.num_states, (B, self.hidden_size), "`state`")
        mask = _check_mask(mask, B, T, none_if_all_real=fused)
        if fused and mask is None:
            return self._fused(x, state, reverse)
        # the input projection does not depend on the recurrence: one (B*T, I) x (I, G*H) matmul
        gi_all = F.linear(x, self.weight_ih, self.bias_ih)  # (B, T, G*H)
        outputs: list[torch.Tensor | None] = [None] * T
        for t in range(T - 1, -1, -1) if reverse else range(T):
            gh = F.linear(state[0], self.weight_hh, self.bias_hh)  # (B, G*H)
            new_state = self.cell.step(gi_all[:, t], gh, state)
            if mask is not None:
                real = mask[:, t, None]  # (B, 1)
                new_state = tuple(torch.where(real, new, old) for new, old in zip(new_state, state))
                outputs[t] = new_state[0].masked_fill(~real, 0.0)
            else:
                outputs[t] = new_state[0]
            state = new_state
        return torch.stack(outputs, dim=1), state  # (B, T, H)

    def _fused(self, x: torch.Tensor, state: State, reverse: bool) -> tuple[torch.Tensor, State]:
        params = [self.weight_ih, self.weight_hh]
        if self.bias_ih is not None:
            params += [self.bias_ih, self.bias_hh]
        x, state = _cpu_autocast_inputs(x, state)
        if reverse:  # the backward direction reads the sequence from the end
            x = x.flip(1)
        hx = tuple(s[None] for s in state)  # ((1, B, H), ...): torch's (layers * directions, B, H)
        # one layer, one direction, no dropout (the stack applies its own between levels); `train`
        # only decides whether cuDNN keeps what backward needs
        result = self.cell.fused(
            x,
            hx if self.cell.num_states == 2 else hx[0],
            params,
            self.bias_ih is not None,
            1,
            0.0,
            torch.is_grad_enabled(),
            False,
            True,
        )
        out = result[0].flip(1) if reverse else result[0]  # (B, T, H)
        return out, tuple(s[0] for s in result[1:])  # ((B, H), ...)


# ----------------------------------------------------------------------------------------------
# The stack
# ----------------------------------------------------------------------------------------------


class StackedRNN(nn.Module):
    """`num_layers` recurrent layers, optionally bidirectional, with dropout between layers.

    Equivalent to `torch.nn.{RNN, LSTM, GRU}(..., batch_first=True)` with the same arguments:
    `layers[l * D + d]` holds torch's `*_l{l}` (d = 0) and `*_l{l}_reverse` (d = 1) parameters
    (`from_torch` / `to_torch` copy them). A bidirectional layer concatenates its forward and
    backward outputs, forward first, and feeds the next layer 2H features.

    Args:
        cell_type: one of `RNN_CELLS`.
        input_size: I.
        hidden_size: H per direction.
        num_layers: L.
        dropout: dropout probability on the outputs of every layer but the last.
        bidirectional: D = 2, a second layer per level reading the sequence backwards.
        bias: learn biases.
        rnn_implementation: one of `RNN_IMPLEMENTATIONS`. "fused" runs torch's multi-step kernels
            (`torch.lstm`, `torch.gru`, `torch.rnn_tanh`, `torch.rnn_relu`) on these same parameters
            whenever no step is masked, and falls back to the loop when a mask has padding; "loop"
            always runs the step functions (the reference). Both give the same results.
    """

    def __init__(
        self,
        cell_type: str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        bidirectional: bool = False,
        bias: bool = True,
        rnn_implementation: str = "fused",
    ):
        super().__init__()
        _choice("cell_type", cell_type, RNN_CELLS)
        _positive_int("input_size", input_size)
        _positive_int("hidden_size", hidden_size)
        _positive_int("num_layers", num_layers)
        _choice("rnn_implementation", rnn_implementation, RNN_IMPLEMENTATIONS)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be a number in [0, 1), got {dropout!r}.")
        for name, value in (("bidirectional", bidirectional), ("bias", bias)):
            if not isinstance(value, bool):
                raise ValueError(f"`{name}` must be True or False, got {value!r}.")
        self.cell_type = cell_type
        self.cell = RNN_CELLS[cell_type]
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.num_directions = 2 if bidirectional else 1
        self.bidirectional = bidirectional
        self.bias = bias
        self.rnn_implementation = rnn_implementation
        D = self.num_directions
        self.layers = nn.ModuleList(
            RecurrentLayer(cell_type, input_size if level == 0 else D * hidden_size, hidden_size, bias)
            for level in range(num_layers)
            for _ in range(D)
        )
        self.dropout = nn.Dropout(dropout)

    @property
    def output_size(self) -> int:
        """D * H, the width of `forward`'s outputs."""
        return self.num_directions * self.hidden_size

    def extra_repr(self) -> str:
        return f"rnn_implementation={self.rnn_implementation!r}"

    def initial_state(self, batch_size: int, device=None, dtype=None) -> State:
        """The zero state: `num_states` tensors of shape (L * D, B, H)."""
        ref = next(self.parameters())  # not `layers[0].weight_hh`: an adapter may wrap the layers
        shape = (self.num_layers * self.num_directions, batch_size, self.hidden_size)
        return tuple(
            torch.zeros(shape, device=device or ref.device, dtype=dtype or ref.dtype)
            for _ in range(self.cell.num_states)
        )

    def check_state(self, state, batch_size: int) -> State:
        """Validate a stacked state (a tuple of (L * D, B, H) tensors) and return it as a tuple."""
        shape = (self.num_layers * self.num_directions, batch_size, self.hidden_size)
        return _check_state(state, self.cell.num_states, shape, f"The {self.cell_type} state")

    # ---- the two implementations of one level (all directions of one layer) ----

    def _level(self, level: int, x: torch.Tensor, state: State, mask: torch.Tensor | None, fused: bool):
        """All directions of one level: (B, T, I) -> (B, T, D*H) and the level's final state ((D, B, H), ...)."""
        outs, finals = [], []
        for d in range(self.num_directions):
            layer = self.layers[level * self.num_directions + d]
            out, final = layer(x, tuple(s[d] for s in state), mask, reverse=d == 1, fused=fused)
            outs.append(out)  # (B, T, H)
            finals.append(final)
        out = torch.cat(outs, dim=-1) if len(outs) > 1 else outs[0]  # (B, T, D*H)
        # back to torch's layout: per state tensor, (D, B, H) for this level
        return out, tuple(torch.stack([f[k] for f in finals]) for k in range(self.cell.num_states))

    def forward_all_layers(
        self, x: torch.Tensor, state: State | None = None, mask: torch.Tensor | None = None
    ) -> tuple[list[torch.Tensor], State]:
        """Like `forward`, but returns every layer's outputs (each (B, T, D*H), before dropout)."""
        if x.dim() != 3 or x.shape[-1] != self.input_size or x.shape[1] == 0:
            raise ValueError(
                f"The input must be a non-empty (batch, seq_len, {self.input_size}) tensor, got {tuple(x.shape)}."
            )
        B, T, _ = x.shape
        state = self.initial_state(B, x.device, x.dtype) if state is None else self.check_state(state, B)
        fused = self.rnn_implementation == "fused"
        mask = _check_mask(mask, B, T, none_if_all_real=fused)
        fused = fused and mask is None
        D = self.num_directions
        layer_outputs, finals = [], []
        inputs = x
        for level in range(self.num_layers):
            level_state = tuple(s[level * D : (level + 1) * D] for s in state)  # ((D, B, H), ...)
            out, final = self._level(level, inputs, level_state, mask, fused)
            layer_outputs.append(out)
            finals.append(final)
            inputs = self.dropout(out) if level < self.num_layers - 1 else out
        final_state = tuple(torch.cat([f[k] for f in finals]) for k in range(self.cell.num_states))
        return layer_outputs, final_state  # state: ((L*D, B, H), ...)

    def forward(
        self, x: torch.Tensor, state: State | None = None, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, State]:
        """Run the stack over a sequence.

        Args:
            x: (B, T, I).
            state: tuple of (L * D, B, H) tensors, layer-major as torch's `h_n`/`c_n`; zeros when None.
            mask: (B, T), True/1 for real steps; padded steps keep the state and output zeros.

        Returns:
            outputs (B, T, D * H) of the last layer, and the final state ((L * D, B, H), ...).
        """
        layer_outputs, state = self.forward_all_layers(x, state, mask)
        return layer_outputs[-1], state

    def step(
        self, x_t: torch.Tensor, state: State | None = None, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, State]:
        """One time step of a unidirectional stack (one-token decoding, scheduled sampling).

        Args:
            x_t: (B, I).
            state: ((L, B, H), ...); zeros when None.
            mask: optional (B,), False where this step is padding (the state is carried unchanged
                and the output is zero).

        Returns:
            the top layer's output (B, H) and the new state ((L, B, H), ...).
        """
        if self.bidirectional:
            raise ValueError(
                "`step` needs a unidirectional StackedRNN: a backward direction needs the whole sequence."
            )
        if x_t.dim() != 2 or x_t.shape[-1] != self.input_size:
            raise ValueError(f"`x_t` must be a (batch, {self.input_size}) tensor, got {tuple(x_t.shape)}.")
        B = x_t.shape[0]
        state = self.initial_state(B, x_t.device, x_t.dtype) if state is None else self.check_state(state, B)
        if mask is not None:
            if tuple(mask.shape) != (B,):
                raise ValueError(f"`mask` for one step must have shape ({B},), got {tuple(mask.shape)}.")
            mask = mask[:, None]  # (B, 1): the layer carries the state over a padded step, outputs zero
        new_levels = []
        inputs = x_t
        for level, layer in enumerate(self.layers):
            old = tuple(s[level] for s in state)  # ((B, H), ...)
            out, new = layer(inputs[:, None], old, mask)  # a one-step sequence: (B, 1, H)
            new_levels.append(new)
            inputs = self.dropout(out[:, 0]) if level < self.num_layers - 1 else out[:, 0]
        new_state = tuple(torch.stack([lv[k] for lv in new_levels]) for k in range(self.cell.num_states))
        return inputs, new_state

    # ---- weights to and from torch.nn.RNN / LSTM / GRU ----

    def _torch_names(self):
        for level in range(self.num_layers):
            for d in range(self.num_directions):
                suffix = f"_l{level}" + ("_reverse" if d == 1 else "")
                yield self.layers[level * self.num_directions + d], suffix

    @classmethod
    def from_torch(cls, module: nn.RNNBase, rnn_implementation: str = "fused") -> StackedRNN:
        """A StackedRNN with the configuration and (copied) weights of a torch.nn.RNN/LSTM/GRU."""
        if getattr(module, "proj_size", 0):
            raise ValueError("LSTMs with `proj_size` > 0 have no StackedRNN equivalent.")
        cell_type = {"RNN_TANH": "rnn_tanh", "RNN_RELU": "rnn_relu", "LSTM": "lstm", "GRU": "gru"}[
            module.mode
        ]
        rnn = cls(
            cell_type,
            module.input_size,
            module.hidden_size,
            module.num_layers,
            float(module.dropout),
            module.bidirectional,
            module.bias,
            rnn_implementation,
        ).to(device=module.weight_hh_l0.device, dtype=module.weight_hh_l0.dtype)
        with torch.no_grad():
            for layer, suffix in rnn._torch_names():
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    if getattr(layer, name) is not None:
                        getattr(layer, name).copy_(getattr(module, name + suffix))
        return rnn

    def to_torch(self) -> nn.RNNBase:
        """The equivalent `torch.nn.RNN/LSTM/GRU(..., batch_first=True)`, with these weights copied in."""
        kwargs = dict(
            num_layers=self.num_layers,
            bias=self.bias,
            batch_first=True,
            dropout=self.dropout.p,
            bidirectional=self.bidirectional,
        )
        if self.cell.nonlinearity is not None:
            kwargs["nonlinearity"] = self.cell.nonlinearity
        ref = self.layers[0].weight_hh
        module = self.cell.torch_module(self.input_size, self.hidden_size, **kwargs).to(ref.device, ref.dtype)
        with torch.no_grad():
            for layer, suffix in self._torch_names():
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    if getattr(layer, name) is not None:
                        getattr(module, name + suffix).copy_(getattr(layer, name))
        return module


# ----------------------------------------------------------------------------------------------
# The cache
# ----------------------------------------------------------------------------------------------


class RecurrentCache:
    """The recurrent state carried between calls: by `generate()` from step to step, and by a
    truncated-BPTT training loop from one block of a long text to the next.

    A recurrent model summarizes its whole past in a fixed-size state, so this "cache" holds one
    stacked state (a tuple of (L * D, B, H) tensors, see `StackedRNN`), the number of positions
    consumed so far (`get_seq_length()`, counting padding as attention caches do, so `generate()`
    slices new tokens the same way), and `extras`: named per-model tensors with the batch on
    dim 0 that must travel and be reordered with the state (e.g. an attentional decoder's
    input-feeding vector).

    It deliberately does not subclass `transformers.Cache`: that class is a list of per-layer
    key/value (or linear-attention) layers whose `update(key, value, layer_idx)`, mask sizes,
    offloading and cropping have no meaning for a recurrent state. `generate()` only duck-types
    the cache it gets back from `forward` (`get_seq_length`, `reorder_cache` for beam search,
    `is_compileable`, `is_croppable`, `is_linear`). Models using it must override
    `_supports_default_dynamic_cache()` to return False, so `generate()` does not build a
    `DynamicCache` for them, and create the `RecurrentCache` in `forward` when `use_cache` is on;
    setting `_is_stateful = True` makes assisted decoding (which needs cropping) fail clearly.

    Example (truncated backpropagation through time):
        >>> out = model(block_1, labels=block_1, use_cache=True)
        >>> out.loss.backward()
        >>> cache = out.past_key_values.detach()  # keep the state, cut the graph
        >>> out = model(block_2, labels=block_2, past_key_values=cache, use_cache=True)
    """

    is_compileable = False  # the state is replaced, not written in place into static buffers
    is_croppable = False  # a recurrent state cannot be rewound to an earlier position
    # transformers >= 5.24 feeds a cache whose layers are all "linear" (Mamba-style) the whole input
    # again; this one counts the positions it has seen, so generate() must slice off the new ones
    is_linear = (False,)

    def __init__(self, state: State | None = None, seen_tokens: int = 0, extras: dict | None = None):
        self.state = tuple(state) if state is not None else None
        self.seen_tokens = int(seen_tokens)
        self.extras: dict[str, torch.Tensor] = dict(extras or {})

    def __repr__(self) -> str:
        shapes = None if self.state is None else [tuple(s.shape) for s in self.state]
        return f"RecurrentCache(state={shapes}, seen_tokens={self.seen_tokens}, extras={sorted(self.extras)})"

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Positions consumed so far (padding included)."""
        return self.seen_tokens

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return -1  # no length limit: the state has a fixed size

    @property
    def is_initialized(self) -> bool:
        return self.state is not None

    @property
    def batch_size(self) -> int | None:
        return None if self.state is None else self.state[0].shape[1]

    def update(self, state: State, num_new_tokens: int) -> State:
        """Store the state after `num_new_tokens` more positions and return it."""
        self.state = tuple(state)
        self.seen_tokens += int(num_new_tokens)
        return self.state

    def _map(self, state_fn, extra_fn) -> None:
        if self.state is not None:
            self.state = tuple(state_fn(s) for s in self.state)  # batch on dim 1
        self.extras = {
            k: (extra_fn(v) if v is not None else None) for k, v in self.extras.items()
        }  # batch on dim 0

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Keep the rows `beam_idx` (in place), as beam search calls it after each step."""
        self._map(
            lambda s: s.index_select(1, beam_idx.to(s.device)),
            lambda v: v.index_select(0, beam_idx.to(v.device)),
        )

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat every row `repeats` times (in place), e.g. to expand a prompt's state for beams."""
        self._map(
            lambda s: s.repeat_interleave(repeats, dim=1), lambda v: v.repeat_interleave(repeats, dim=0)
        )

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the rows `indices` (in place)."""
        self.reorder_cache(indices)

    def detach(self) -> RecurrentCache:
        """A new cache with the same values cut from the autograd graph (truncated BPTT)."""
        state = None if self.state is None else tuple(s.detach() for s in self.state)
        extras = {k: (v.detach() if v is not None else None) for k, v in self.extras.items()}
        return RecurrentCache(state, self.seen_tokens, extras)

    def reset(self) -> None:
        self.state, self.seen_tokens, self.extras = None, 0, {}

    def crop(self, max_length: int) -> None:
        raise ValueError(
            "A RecurrentCache cannot be cropped: a recurrent state cannot be rewound to an earlier position "
            "(assisted / speculative decoding is not supported for recurrent models)."
        )

    def activate_past_recording(self) -> None:
        self.crop(0)


# API-STABLE
