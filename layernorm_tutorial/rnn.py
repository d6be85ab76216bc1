"""Recurrent cells with and without normalization, and batch-first sequence runners.

Every cell maps one time step ``x_t`` of shape ``(B, input_size)`` and a recurrent state to
``(h_t, new_state)`` where ``h_t`` has shape ``(B, hidden_size)``. The state is the tensor
``h`` for Elman cells and the pair ``(h, c)`` for LSTM cells. :func:`run_sequence` (or the
module :class:`RecurrentLayer`) unrolls a cell over a batch-first sequence ``(B, T, input_size)``.

Cells (stable API, used by the book's RNN and evidence chapters)
----------------------------------------------------------------
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

The per-time-step BatchNorm cells keep running statistics for each step index ``t`` they saw
in training. In evaluation mode a step beyond the longest training sequence has no
statistics: by default this raises :class:`UnseenTimeStepError`; ``on_unseen_step="reuse_last"``
reuses the statistics of the last trained step (the workaround of Cooijmans et al., 2017).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "BatchNormElmanRNNCell",
    "BatchNormLSTMCell",
    "CELL_KINDS",
    "ElmanRNNCell",
    "LSTMCell",
    "LayerNormElmanRNNCell",
    "LayerNormLSTMCell",
    "PerStepBatchNorm",
    "RecurrentLayer",
    "SequenceClassifier",
    "UnseenTimeStepError",
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


def _check_sizes(input_size: int, hidden_size: int) -> None:
    for name, value in (("input_size", input_size), ("hidden_size", hidden_size)):
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def _check_step_input(cell: nn.Module, x_t: Tensor) -> None:
    if x_t.dim() != 2 or x_t.shape[1] != cell.input_size:
        raise ValueError(
            f"x_t must have shape (batch, {cell.input_size}), got {tuple(x_t.shape)}"
        )


def layer_norm_summed_inputs(a: Tensor, gain: Tensor, bias: Tensor | None,
                             eps: float = 1e-5) -> Tensor:
    """Normalize summed inputs over the last axis as in Ba et al. (2016).

    ``a`` has shape ``(B, H)``; ``mu = mean(a)``, ``sigma = sqrt(mean((a - mu)^2) + eps)``
    (biased variance, ``eps`` inside the square root, one scalar pair per row), and the result
    is ``gain / sigma * (a - mu) + bias`` with ``gain`` and ``bias`` of shape ``(H,)``.
    The paper writes the formula without ``eps``; it only guards against ``sigma = 0``.
    This is the same computation as ``torch.nn.functional.layer_norm(a, (H,), gain, bias, eps)``.
    """
    mu = a.mean(dim=-1, keepdim=True)
    sigma = torch.sqrt(((a - mu) ** 2).mean(dim=-1, keepdim=True) + eps)
    out = gain / sigma * (a - mu)
    return out if bias is None else out + bias


class UnseenTimeStepError(RuntimeError):
    """A per-time-step BatchNorm was asked for a step it has no running statistics for."""


class PerStepBatchNorm(nn.Module):
    """BatchNorm over the batch with one set of running statistics per time step.

    ``forward(a, t)`` normalizes ``a`` of shape ``(B, num_features)`` at time step ``t``
    (0-based). In training mode it uses the batch's mean and biased variance at this step and
    updates ``running_mean[t]``, ``running_var[t]`` (unbiased variance, momentum as in torch);
    in evaluation mode it uses the running statistics of step ``t``. The gain ``weight`` and
    bias are shared across time steps. ``steps_seen`` counts the steps with statistics.

    For ``t >= steps_seen`` in evaluation mode: ``on_unseen_step="error"`` raises
    :class:`UnseenTimeStepError`; ``"reuse_last"`` uses the statistics of step
    ``steps_seen - 1``.
    """

    def __init__(self, num_features: int, max_steps: int = 256, eps: float = 1e-5,
                 momentum: float = 0.1, affine: bool = True, weight_init: float = 1.0,
                 on_unseen_step: str = "error"):
        super().__init__()
        if on_unseen_step not in ("error", "reuse_last"):
            raise ValueError(
                f"on_unseen_step must be 'error' or 'reuse_last', got {on_unseen_step!r}"
            )
        if max_steps <= 0:
            raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
        self.num_features, self.max_steps = num_features, max_steps
        self.eps, self.momentum, self.on_unseen_step = eps, momentum, on_unseen_step
        if affine:
            self.weight = nn.Parameter(torch.full((num_features,), float(weight_init)))
            self.bias = nn.Parameter(torch.zeros(num_features))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.register_buffer("running_mean", torch.zeros(max_steps, num_features))
        self.register_buffer("running_var", torch.ones(max_steps, num_features))
        self.register_buffer("steps_seen", torch.tensor(0, dtype=torch.long))

    def forward(self, a: Tensor, t: int) -> Tensor:
        if self.training:
            if t >= self.max_steps:
                raise UnseenTimeStepError(
                    f"time step {t} exceeds max_steps={self.max_steps} statistics slots"
                )
            if a.shape[0] < 2:
                raise ValueError(
                    "per-time-step BatchNorm needs more than 1 sample per batch in training, "
                    f"got input of shape {tuple(a.shape)}"
                )
            mean = a.mean(dim=0)
            var = a.var(dim=0, unbiased=False)
            with torch.no_grad():
                n = a.shape[0]
                self.running_mean[t].lerp_(mean.detach(), self.momentum)
                self.running_var[t].lerp_(var.detach() * n / (n - 1), self.momentum)
                self.steps_seen.fill_(max(int(self.steps_seen), t + 1))
        else:
            seen = int(self.steps_seen)
            if t >= seen:
                if self.on_unseen_step == "error" or seen == 0:
                    raise UnseenTimeStepError(
                        f"no BatchNorm statistics for time step {t}: training sequences had "
                        f"at most {seen} steps (a test sequence longer than every training "
                        "sequence). Use LayerNorm, or on_unseen_step='reuse_last'."
                    )
                t = seen - 1
            mean, var = self.running_mean[t], self.running_var[t]
        out = (a - mean) / torch.sqrt(var + self.eps)
        if self.weight is not None:
            out = out * self.weight + self.bias
        return out


class ElmanRNNCell(nn.Module):
    """Plain Elman cell: ``h_t = f(W_hh h_{t-1} + W_xh x_t + b)``.

    Parameters ``weight_xh (H, I)``, ``weight_hh (H, H)``, ``bias (H,)``, initialized
    ``U(-1/sqrt(H), 1/sqrt(H))`` as in ``torch.nn.RNNCell``. ``forward(x_t, h)`` returns
    ``(h_t, h_t)``; ``h=None`` means zeros.
    """

    time_indexed = False

    def __init__(self, input_size: int, hidden_size: int, nonlinearity: str = "tanh"):
        super().__init__()
        _check_sizes(input_size, hidden_size)
        self.input_size, self.hidden_size = input_size, hidden_size
        self.nonlinearity = nonlinearity
        self._f = _nonlinearity(nonlinearity)
        self.weight_xh = nn.Parameter(torch.empty(hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(hidden_size, hidden_size))
        self._init_bias()
        self.reset_parameters()

    def _init_bias(self) -> None:
        self.bias = nn.Parameter(torch.empty(self.hidden_size))

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in (self.weight_xh, self.weight_hh):
            nn.init.uniform_(p, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

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
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in (self.weight_xh, self.weight_hh):
            nn.init.uniform_(p, -bound, bound)
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
        self.norm = PerStepBatchNorm(hidden_size, max_steps, eps, momentum,
                                     on_unseen_step=on_unseen_step)

    def _init_bias(self) -> None:
        self.register_parameter("bias", None)

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in (self.weight_xh, self.weight_hh):
            nn.init.uniform_(p, -bound, bound)

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
        _check_sizes(input_size, hidden_size)
        self.input_size, self.hidden_size = input_size, hidden_size
        self.weight_ih = nn.Parameter(torch.empty(4 * hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden_size, hidden_size))
        self.bias = nn.Parameter(torch.empty(4 * hidden_size))
        self._init_norms()
        self.reset_parameters()

    def _init_norms(self) -> None:
        pass

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in (self.weight_ih, self.weight_hh, self.bias):
            nn.init.uniform_(p, -bound, bound)

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


# --------------------------------------------------------------------------------------------
# Experiments used by the book's RNN chapter (small enough for a 2-core CPU)
# --------------------------------------------------------------------------------------------


def set_recurrent_scale(cell: ElmanRNNCell, scale: float, seed: int = 0) -> ElmanRNNCell:
    """Set ``W_hh = scale * G / sqrt(H)`` and ``W_xh = G' / sqrt(I)`` with Gaussian G, G'.

    The spectral radius of ``W_hh`` is then close to ``scale`` (circular law), so ``scale < 1``
    shrinks and ``scale > 1`` grows a linear recurrence. Biases are zeroed. Returns the cell.
    """
    g = torch.Generator().manual_seed(seed)
    h, i = cell.hidden_size, cell.input_size
    with torch.no_grad():
        cell.weight_hh.copy_(scale * torch.randn(h, h, generator=g) / math.sqrt(h))
        cell.weight_xh.copy_(torch.randn(h, i, generator=g) / math.sqrt(i))
        cell.bias.zero_()
    return cell


def unrolled_dynamics(layer_norm: bool, recurrent_scale: float, steps: int = 150,
                      hidden_size: int = 64, input_size: int = 8, batch_size: int = 32,
                      nonlinearity: str = "tanh", inputs: str = "impulse",
                      seed: int = 0) -> dict:
    """Unroll a (LN-)Elman RNN at initialization and record how signals travel through time.

    ``inputs="impulse"`` feeds ``x_0 ~ N(0, I)`` and zeros afterwards (the RNN is then a
    ``steps``-deep weight-shared network applied to ``x_0``); ``"noise"`` feeds ``N(0, I)``
    at every step. Float64. Returns NumPy arrays indexed by step ``t = 1..steps``:

    * ``state_rms``: mean over the batch of ``||h_t|| / sqrt(H)``;
    * ``saturation``: fraction of units with ``|h_t| > 0.99`` (tanh's flat region, |z| > 2.65);
    * ``grad_norm``: mean over the batch of ``||dL/dh_t||`` for ``L = <v, h_T>`` with a
      random unit-variance ``v``; ``grad_norm[-1]`` is at distance 0 from the loss.
    """
    if inputs not in ("impulse", "noise"):
        raise ValueError(f"inputs must be 'impulse' or 'noise', got {inputs!r}")
    torch.manual_seed(seed)
    kind = LayerNormElmanRNNCell if layer_norm else ElmanRNNCell
    cell = set_recurrent_scale(kind(input_size, hidden_size, nonlinearity), recurrent_scale,
                               seed).double()
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch_size, steps, input_size, generator=g, dtype=torch.float64)
    if inputs == "impulse":
        x[:, 1:] = 0.0
    h = cell.initial_state(batch_size, torch.float64)
    states = []
    for t in range(steps):
        h, _ = cell(x[:, t], h)
        h.retain_grad()
        states.append(h)
    v = torch.randn(batch_size, hidden_size, generator=g, dtype=torch.float64)
    (states[-1] * v).sum().backward()
    stacked = torch.stack([s.detach() for s in states], dim=1)  # (B, T, H)
    grads = torch.stack([s.grad for s in states], dim=1)
    return {
        "state_rms": (stacked.norm(dim=-1) / math.sqrt(hidden_size)).mean(0).numpy(),
        "saturation": (stacked.abs() > 0.99).double().mean(dim=(0, 2)).numpy(),
        "grad_norm": grads.norm(dim=-1).mean(0).numpy(),
    }


def normalized_input_spread(cell: nn.Module, x: Tensor) -> Tensor:
    """Per-step std (over batch and units) of what an Elman cell feeds its nonlinearity.

    Runs ``cell`` over ``x (B, T, I)`` without gradients in its current mode and returns a
    ``(T,)`` tensor. For a well-normalized cell the values stay near the gain (1 at init).
    """
    h = cell.initial_state(x.shape[0], x.dtype)
    spreads = []
    with torch.no_grad():
        for t in range(x.shape[1]):
            z = cell.pre_activation(cell.summed_inputs(x[:, t], h), t)
            spreads.append(z.std())
            h = cell._f(z)
    return torch.stack(spreads)


def random_walk_sequences(batch_size: int, steps: int, input_size: int = 4,
                          seed: int = 0) -> Tensor:
    """``x_t = x_{t-1} + e_t`` with ``e_t ~ N(0, I)``: inputs whose scale grows like sqrt(t).

    Shape ``(batch_size, steps, input_size)``, float32. Statistics change with t, so the
    statistics of one time step do not describe a later one.
    """
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch_size, steps, input_size, generator=g).cumsum(dim=1)


def load_digit_sequences(test_fraction: float = 0.25, seed: int = 0):
    """scikit-learn's 8x8 digits read row by row: 8 steps of 8 pixel intensities in [0, 1].

    Returns ``(x_train, y_train, x_test, y_test)``: float32 tensors ``(N, 8, 8)`` and int64
    labels, split with a fixed seeded permutation (1797 images in total).
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    n_test = int(round(test_fraction * len(y)))
    test, train = perm[:n_test], perm[n_test:]
    return x[train], y[train], x[test], y[test]


def train_sequence_classifier(kind: str, data, hidden_size: int = 32, epochs: int = 10,
                              batch_size: int = 64, lr: float = 3e-3, seed: int = 0) -> dict:
    """Train ``SequenceClassifier(kind)`` with Adam on ``data = (x_tr, y_tr, x_te, y_te)``.

    Returns ``{"train_loss": [...], "test_accuracy": [...]}``: the mean training cross-entropy
    of each epoch and the test accuracy (evaluation mode) after each epoch, both as lists of
    floats of length ``epochs``. Fully determined by ``seed``.
    """
    x_tr, y_tr, x_te, y_te = data
    torch.manual_seed(seed)
    model = SequenceClassifier(kind, x_tr.shape[2], hidden_size, int(y_tr.max()) + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    history = {"train_loss": [], "test_accuracy": []}
    for _ in range(epochs):
        model.train()
        perm = torch.randperm(len(y_tr), generator=g)
        total, count = 0.0, 0
        for start in range(0, len(perm) - 1, batch_size):
            idx = perm[start:start + batch_size]
            if len(idx) < 2:  # a batch of 1 has no batch statistics
                continue
            loss = F.cross_entropy(model(x_tr[idx]), y_tr[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(idx)
            count += len(idx)
        model.eval()
        with torch.no_grad():
            accuracy = (model(x_te).argmax(dim=1) == y_te).float().mean()
        history["train_loss"].append(total / count)
        history["test_accuracy"].append(float(accuracy))
    return history
