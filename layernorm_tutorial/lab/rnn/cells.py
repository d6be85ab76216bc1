"""Recurrent cells with and without normalization, and batch-first sequence runners.

Every cell maps one time step ``x_t`` of shape ``(B, input_size)`` and a recurrent state to
``(h_t, new_state)`` where ``h_t`` has shape ``(B, hidden_size)``. The state is the tensor
``h`` for Elman cells and the pair ``(h, c)`` for LSTM cells. :func:`run_sequence` (or the
module :class:`RecurrentLayer`) unrolls a cell over a batch-first sequence ``(B, T, input_size)``.

Cells (used by the book's RNN and evidence chapters):

``ElmanRNNCell``             h_t = f(W_hh h_{t-1} + W_xh x_t + b)
``LayerNormElmanRNNCell``    Ba et al. (2016), eq. for the LN-RNN:
                             a_t = W_hh h_{t-1} + W_xh x_t,
                             h_t = f(g / sigma_t * (a_t - mu_t) + b)
``BatchNormElmanRNNCell``    f(BN_t(a_t)) with separate statistics per time step t
``LSTMCell``                 the standard LSTM (gate order i, f, g, o as in ``torch.nn.LSTMCell``)
``LayerNormLSTMCell``        Ba et al. (2016), LN on W_h h and on W_x x separately and on c_t
``BatchNormLSTMCell``        per-time-step BN on W_h h and W_x x and on c_t (Cooijmans et al.)

Build any of them by name with :func:`make_cell` (kinds: ``"rnn"``, ``"ln_rnn"``,
``"bn_rnn"``, ``"lstm"``, ``"ln_lstm"``, ``"bn_lstm"``).

The per-time-step BatchNorm cells keep running statistics per step index ``t`` in
:class:`~layernorm_tutorial.lab.ln_vs_bn.per_step_batch_norm.PerStepBatchNorm` (a step beyond the
longest
training sequence raises, or with ``on_unseen_step="reuse_last"`` reuses the last step's
statistics, as Cooijmans et al., 2017 suggest). The chapter's experiments and data are in
:mod:`layernorm_tutorial.lab.rnn.experiments`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from layernorm_tutorial._validation import as_int
from layernorm_tutorial.functional import layer_norm_forward
from layernorm_tutorial.lab.ln_vs_bn.per_step_batch_norm import PerStepBatchNorm

__all__ = [
    "BatchNormElmanRNNCell",
    "BatchNormLSTMCell",
    "CELL_KINDS",
    "ElmanRNNCell",
    "LSTMCell",
    "LayerNormElmanRNNCell",
    "LayerNormLSTMCell",
    "RecurrentLayer",
    "SequenceClassifier",
    "layer_norm_summed_inputs",
    "make_cell",
    "run_sequence",
]

_NONLINEARITIES = {"tanh": torch.tanh, "relu": torch.relu, "identity": lambda a: a}


def _nonlinearity(name: str):
    if name not in _NONLINEARITIES:
        raise ValueError(
            f"nonlinearity must be one of {sorted(_NONLINEARITIES)}, got {name!r}"
        )
    return _NONLINEARITIES[name]


def _check_sizes(input_size: int, hidden_size: int) -> tuple[int, int]:
    """Both sizes as Python ints by the package's rule (:func:`~layernorm_tutorial._validation.
    as_int`): not an int -> TypeError, not positive -> ValueError, naming the argument."""
    return (as_int(input_size, "input_size", minimum=1, error=ValueError),
            as_int(hidden_size, "hidden_size", minimum=1, error=ValueError))


def _check_step_input(cell: nn.Module, x_t: Tensor) -> None:
    if x_t.dim() != 2 or x_t.shape[1] != cell.input_size:
        raise ValueError(
            f"x_t must have shape (batch, {cell.input_size}), got {tuple(x_t.shape)}"
        )


def _uniform_init(hidden_size: int, *params: Tensor) -> None:
    """``U(-1/sqrt(H), 1/sqrt(H))`` in place, as ``torch.nn.RNNCell`` initializes."""
    bound = 1.0 / math.sqrt(hidden_size)
    for p in params:
        nn.init.uniform_(p, -bound, bound)


def layer_norm_summed_inputs(a: Tensor, gain: Tensor, bias: Tensor | None,
                             eps: float = 1e-5) -> Tensor:
    """Normalize summed inputs over the last axis as in Ba et al. (2016).

    ``a`` has shape ``(B, H)``; ``mu = mean(a)``,
    ``sigma = sqrt(mean((a - mu)^2) + eps)`` (biased variance, ``eps``
    inside the square root, one scalar pair per row), and the result is
    ``gain / sigma * (a - mu) + bias`` with ``gain`` and ``bias`` of shape
    ``(H,)``. The paper writes the formula without ``eps``; it only guards
    against ``sigma = 0``. It is the package's layer norm over the last axis
    (:func:`functional.layer_norm_forward`).
    """
    return layer_norm_forward(a, (a.shape[-1],), gain, bias, eps)[0]


class ElmanRNNCell(nn.Module):
    """Plain Elman cell: ``h_t = f(W_hh h_{t-1} + W_xh x_t + b)``.

    Parameters ``weight_xh (H, I)``, ``weight_hh (H, H)``, ``bias (H,)``, initialized
    ``U(-1/sqrt(H), 1/sqrt(H))`` as in ``torch.nn.RNNCell``. ``forward(x_t, h)`` returns
    ``(h_t, h_t)``; ``h=None`` means zeros.
    """

    time_indexed = False

    def __init__(self, input_size: int, hidden_size: int, nonlinearity: str = "tanh"):
        super().__init__()
        self.input_size, self.hidden_size = _check_sizes(input_size, hidden_size)
        input_size, hidden_size = self.input_size, self.hidden_size
        self.nonlinearity = nonlinearity
        self._f = _nonlinearity(nonlinearity)
        self.weight_xh = nn.Parameter(torch.empty(hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(hidden_size, hidden_size))
        self._init_bias()
        self.reset_parameters()

    def _init_bias(self) -> None:
        self.bias = nn.Parameter(torch.empty(self.hidden_size))

    def reset_parameters(self) -> None:
        _uniform_init(self.hidden_size, self.weight_xh, self.weight_hh, self.bias)

    def initial_state(self, batch_size: int, dtype=None, device=None) -> Tensor:
        return torch.zeros(batch_size, self.hidden_size, dtype=dtype, device=device)

    def summed_inputs(self, x_t: Tensor, h: Tensor) -> Tensor:
        """``a_t = W_hh h_{t-1} + W_xh x_t`` of shape ``(B, H)`` (no bias)."""
        return h @ self.weight_hh.T + x_t @ self.weight_xh.T

    def pre_activation(self, a: Tensor, t: int) -> Tensor:
        """What goes into the nonlinearity, given the summed inputs ``a``."""
        return a + self.bias

    def forward(self, x_t: Tensor, h: Tensor | None = None, t: int = 0):
        _check_step_input(self, x_t)
        if h is None:
            h = self.initial_state(x_t.shape[0], x_t.dtype, x_t.device)
        h_t = self._f(self.pre_activation(self.summed_inputs(x_t, h), t))
        return h_t, h_t


class LayerNormElmanRNNCell(ElmanRNNCell):
    """Elman cell with LN exactly as Ba et al. (2016):

    ``a_t = W_hh h_{t-1} + W_xh x_t``;  ``h_t = f(g / sigma_t * (a_t - mu_t) + b)``
    with ``mu_t``, ``sigma_t`` the mean and (biased) standard deviation of the H entries of
    ``a_t`` (one pair per sample and step), gain ``g = weight (H,)`` initialized to 1 and
    bias ``b (H,)`` to 0, both shared across time steps. ``eps`` goes inside the square root.
    The output is unchanged when ``W_hh`` and ``W_xh`` are multiplied by the same c > 0.
    """

    def __init__(self, input_size: int, hidden_size: int, nonlinearity: str = "tanh",
                 eps: float = 1e-5):
        self.eps = eps
        super().__init__(input_size, hidden_size, nonlinearity)

    def _init_bias(self) -> None:
        self.weight = nn.Parameter(torch.ones(self.hidden_size))
        self.bias = nn.Parameter(torch.zeros(self.hidden_size))

    def reset_parameters(self) -> None:
        _uniform_init(self.hidden_size, self.weight_xh, self.weight_hh)
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)

    def pre_activation(self, a: Tensor, t: int) -> Tensor:
        return layer_norm_summed_inputs(a, self.weight, self.bias, self.eps)


class BatchNormElmanRNNCell(ElmanRNNCell):
    """Elman cell with per-time-step BatchNorm: ``h_t = f(BN_t(a_t))``.

    ``BN_t`` normalizes each of the H summed inputs over the batch, with running statistics
    kept separately for each time step (see :class:`PerStepBatchNorm`); gain and bias are
    shared across steps. Needs the step index ``t``, which :func:`run_sequence` passes.
    """

    time_indexed = True

    def __init__(self, input_size: int, hidden_size: int, nonlinearity: str = "tanh",
                 max_steps: int = 256, on_unseen_step: str = "error", eps: float = 1e-5,
                 momentum: float = 0.1):
        super().__init__(input_size, hidden_size, nonlinearity)  # no bias: BN has one
        self.norm = PerStepBatchNorm(self.hidden_size, max_steps, eps, momentum,
                                     on_unseen_step=on_unseen_step)

    def _init_bias(self) -> None:
        self.register_parameter("bias", None)

    def reset_parameters(self) -> None:
        _uniform_init(self.hidden_size, self.weight_xh, self.weight_hh)

    def pre_activation(self, a: Tensor, t: int) -> Tensor:
        return self.norm(a, t)


class LSTMCell(nn.Module):
    """The standard LSTM cell (gate order i, f, g, o, as ``torch.nn.LSTMCell``):

    ``[i, f, g, o] = W_ih x_t + W_hh h_{t-1} + b``; ``c_t = s(f) * c_{t-1} + s(i) * tanh(g)``;
    ``h_t = s(o) * tanh(c_t)`` where ``s`` is the logistic sigmoid. Parameters
    ``weight_ih (4H, I)``, ``weight_hh (4H, H)``, ``bias (4H,)``. The state is ``(h, c)``;
    ``forward(x_t, state)`` returns ``(h_t, (h_t, c_t))``.
    """

    time_indexed = False

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.input_size, self.hidden_size = _check_sizes(input_size, hidden_size)
        input_size, hidden_size = self.input_size, self.hidden_size
        self.weight_ih = nn.Parameter(torch.empty(4 * hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden_size, hidden_size))
        self.bias = nn.Parameter(torch.empty(4 * hidden_size))
        self._init_norms()
        self.reset_parameters()

    def _init_norms(self) -> None:
        pass

    def reset_parameters(self) -> None:
        _uniform_init(self.hidden_size, self.weight_ih, self.weight_hh, self.bias)

    def initial_state(self, batch_size: int, dtype=None, device=None):
        zeros = torch.zeros(batch_size, self.hidden_size, dtype=dtype, device=device)
        return zeros, zeros.clone()

    def gate_inputs(self, x_t: Tensor, h: Tensor, t: int) -> Tensor:
        """The ``(B, 4H)`` summed inputs of the four gates."""
        return x_t @ self.weight_ih.T + h @ self.weight_hh.T + self.bias

    def cell_output(self, c: Tensor, t: int) -> Tensor:
        """What goes into the output tanh, given the new cell state ``c_t``."""
        return c

    def forward(self, x_t: Tensor, state=None, t: int = 0):
        _check_step_input(self, x_t)
        if state is None:
            state = self.initial_state(x_t.shape[0], x_t.dtype, x_t.device)
        h, c = state
        i, f, g, o = self.gate_inputs(x_t, h, t).chunk(4, dim=1)
        c_t = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h_t = torch.sigmoid(o) * torch.tanh(self.cell_output(c_t, t))
        return h_t, (h_t, c_t)


class LayerNormLSTMCell(LSTMCell):
    """Layer-normalized LSTM as in Ba et al. (2016), section 3.1 / supplementary:

    ``[f, i, o, g] = LN(W_h h_{t-1}; a1, b1) + LN(W_x x_t; a2, b2) + b``
    ``c_t = s(f) * c_{t-1} + s(i) * tanh(g)``;  ``h_t = s(o) * tanh(LN(c_t; a3, b3))``.

    Each LN normalizes over all of its units: the two gate LNs over the 4H summed inputs
    (one mean/std per sample for all four gates together), the cell LN over the H entries of
    ``c_t``. The cell state carried to the next step is the un-normalized ``c_t``. Gains are
    initialized to 1 and LN biases to 0; gate order here is i, f, g, o like the other cells.

    Where other implementations differ:

    * TensorFlow 1's ``LayerNormBasicLSTMCell`` normalizes each gate's H summed inputs
      separately, and normalizes the *sum* ``W [x, h]`` rather than the two terms.
    * TensorFlow Addons' ``LayerNormLSTMCell`` normalizes ``W x`` and ``U h`` separately
      over all 4H units, like the paper.
    * Both carry the normalized cell state ``LN(c_t)`` to the next step; the paper (and this
      cell) carries ``c_t`` and normalizes it only on the way to ``h_t``.
    * Many PyTorch snippets apply LN only to the hidden state ``h_t`` or only to the gates.
    """

    def __init__(self, input_size: int, hidden_size: int, eps: float = 1e-5):
        self.eps = eps
        super().__init__(input_size, hidden_size)

    def _init_norms(self) -> None:
        four_h, h = 4 * self.hidden_size, self.hidden_size
        self.ln_hh_weight = nn.Parameter(torch.ones(four_h))
        self.ln_hh_bias = nn.Parameter(torch.zeros(four_h))
        self.ln_ih_weight = nn.Parameter(torch.ones(four_h))
        self.ln_ih_bias = nn.Parameter(torch.zeros(four_h))
        self.ln_cell_weight = nn.Parameter(torch.ones(h))
        self.ln_cell_bias = nn.Parameter(torch.zeros(h))

    def reset_parameters(self) -> None:
        super().reset_parameters()
        for name, p in self.named_parameters():
            if name.startswith("ln_"):
                (nn.init.ones_ if name.endswith("weight") else nn.init.zeros_)(p)

    def gate_inputs(self, x_t: Tensor, h: Tensor, t: int) -> Tensor:
        from_h = layer_norm_summed_inputs(h @ self.weight_hh.T, self.ln_hh_weight,
                                          self.ln_hh_bias, self.eps)
        from_x = layer_norm_summed_inputs(x_t @ self.weight_ih.T, self.ln_ih_weight,
                                          self.ln_ih_bias, self.eps)
        return from_h + from_x + self.bias

    def cell_output(self, c: Tensor, t: int) -> Tensor:
        return layer_norm_summed_inputs(c, self.ln_cell_weight, self.ln_cell_bias, self.eps)


class BatchNormLSTMCell(LSTMCell):
    """Recurrent BatchNorm LSTM (Cooijmans et al., 2017), per-time-step statistics:

    ``gates = BN_t(W_h h_{t-1}) + BN_t(W_x x_t) + b``; ``h_t = s(o) * tanh(BN_t(c_t))``.
    The gate BNs have no bias (``b`` plays that role); their gains start at 0.1 as the paper
    recommends. Needs the step index ``t``, which :func:`run_sequence` passes.
    """

    time_indexed = True

    def __init__(self, input_size: int, hidden_size: int, max_steps: int = 256,
                 on_unseen_step: str = "error", eps: float = 1e-5, momentum: float = 0.1):
        self._bn_args = dict(max_steps=max_steps, eps=eps, momentum=momentum,
                             on_unseen_step=on_unseen_step)
        super().__init__(input_size, hidden_size)

    def _init_norms(self) -> None:
        four_h = 4 * self.hidden_size
        self.bn_hh = PerStepBatchNorm(four_h, weight_init=0.1, **self._bn_args)
        self.bn_ih = PerStepBatchNorm(four_h, weight_init=0.1, **self._bn_args)
        self.bn_cell = PerStepBatchNorm(self.hidden_size, weight_init=0.1, **self._bn_args)
        for bn in (self.bn_hh, self.bn_ih):
            bn.bias.requires_grad_(False)  # redundant with the cell's bias; kept at 0

    def gate_inputs(self, x_t: Tensor, h: Tensor, t: int) -> Tensor:
        return (self.bn_hh(h @ self.weight_hh.T, t) + self.bn_ih(x_t @ self.weight_ih.T, t)
                + self.bias)

    def cell_output(self, c: Tensor, t: int) -> Tensor:
        return self.bn_cell(c, t)


CELL_KINDS = {
    "rnn": ElmanRNNCell,
    "ln_rnn": LayerNormElmanRNNCell,
    "bn_rnn": BatchNormElmanRNNCell,
    "lstm": LSTMCell,
    "ln_lstm": LayerNormLSTMCell,
    "bn_lstm": BatchNormLSTMCell,
}


def make_cell(kind: str, input_size: int, hidden_size: int, **kwargs) -> nn.Module:
    """Build a cell by name: one of ``CELL_KINDS`` (extra keyword args go to the cell)."""
    if kind not in CELL_KINDS:
        raise ValueError(f"kind must be one of {sorted(CELL_KINDS)}, got {kind!r}")
    return CELL_KINDS[kind](input_size, hidden_size, **kwargs)


def run_sequence(cell: nn.Module, x: Tensor, state=None):
    """Unroll ``cell`` over a batch-first sequence.

    ``x``: ``(B, T, input_size)``. Returns ``(outputs, final_state)`` with ``outputs`` of
    shape ``(B, T, hidden_size)`` (``h_1 .. h_T``) and ``final_state`` the cell's state after
    the last step. Time-indexed cells (per-step BatchNorm) receive ``t = 0 .. T-1``.
    """
    if x.dim() != 3:
        raise ValueError(f"x must have shape (batch, time, features), got {tuple(x.shape)}")
    outputs = []
    for t in range(x.shape[1]):
        h_t, state = cell(x[:, t], state, t) if cell.time_indexed else cell(x[:, t], state)
        outputs.append(h_t)
    return torch.stack(outputs, dim=1), state


class RecurrentLayer(nn.Module):
    """``nn.Module`` wrapper of :func:`run_sequence`: ``forward(x (B,T,I), state=None)``."""

    def __init__(self, cell: nn.Module):
        super().__init__()
        self.cell = cell

    def forward(self, x: Tensor, state=None):
        return run_sequence(self.cell, x, state)


class SequenceClassifier(nn.Module):
    """A recurrent cell read over ``(B, T, I)`` then a linear head on the last ``h_T``.

    ``kind`` selects the cell (see :func:`make_cell`); returns logits ``(B, num_classes)``.
    """

    def __init__(self, kind: str, input_size: int, hidden_size: int, num_classes: int,
                 **cell_kwargs):
        super().__init__()
        self.kind = kind
        self.cell = make_cell(kind, input_size, hidden_size, **cell_kwargs)
        self.head = nn.Linear(hidden_size, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        outputs, _ = run_sequence(self.cell, x)
        return self.head(outputs[:, -1])

