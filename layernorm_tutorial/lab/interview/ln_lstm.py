r"""Where the LayerNorms of a layer-normalized LSTM go, as float64 computations.

Ba et al. (2016, supplementary material, eqs. 20-22) normalize the two projections separately,
over all ``4H`` gate pre-activations at once, and the new cell state on its way to the output:

.. math::

    [f, i, o, g] = \mathrm{LN}(W_h h_{t-1}; \alpha_1, \beta_1)
                 + \mathrm{LN}(W_x x_t; \alpha_2, \beta_2) + b,\qquad
    c_t = \sigma(f)\odot c_{t-1} + \sigma(i)\odot\tanh(g),\qquad
    h_t = \sigma(o)\odot\tanh(\mathrm{LN}(c_t; \alpha_3, \beta_3)),

with one set of gains and biases shared by all time steps; the state carried forward is the
un-normalized :math:`c_t`. The package's cell is
:class:`~layernorm_tutorial.lab.rnn.cells.LayerNormLSTMCell` (gate order i, f, g, o, as
``torch.nn.LSTM``).

* :func:`equations_gap`: the package's cell against the three equations written out with
  ``torch.nn.functional.layer_norm``;
* :func:`projection_scale_change`: the LN-LSTM's output does not change when ``W_h`` and
  ``W_x`` are rescaled (each LN removes its projection's scale), while a fused
  ``torch.nn.LSTM`` with LayerNorms wrapped around it (on its input and on its output) does:
  the LNs that matter sit between the matrix products and the gate nonlinearities, inside
  the fused call;
* :func:`gate_block_means`: joint LN over the ``4H`` pre-activations (the paper) leaves each
  gate's block free to sit above or below the others, per-gate LN pins every block to mean
  :math:`\beta` (0 at initialization);
* :func:`cell_magnitude_change`: with the cell LN, :math:`h_t` is the same for :math:`c_t`
  and :math:`k c_t` (the memory's magnitude is discarded on the way out); without it, it is
  not.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as TF

from layernorm_tutorial.lab.rnn.cells import LayerNormLSTMCell, run_sequence

__all__ = ["equations_gap", "projection_scale_change", "gate_block_means",
           "cell_magnitude_change"]

F64 = torch.float64


def _own_rng(fn):
    """Run ``fn`` on a copy of torch's global random state: the cells and ``torch.nn.LSTM``
    draw their initial weights from it (seeded here), and the caller's later draws must not
    depend on that."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with torch.random.fork_rng(devices=[]):
            return fn(*args, **kwargs)
    return run


def _cell(input_size: int, hidden: int, eps: float, seed: int) -> LayerNormLSTMCell:
    torch.manual_seed(seed)
    cell = LayerNormLSTMCell(input_size, hidden, eps=eps).double()
    with torch.no_grad():                    # gains and biases away from their 1 and 0
        for name, p in cell.named_parameters():
            if name.startswith("ln_"):
                p.copy_(torch.rand_like(p) + 0.5 if name.endswith("weight")
                        else torch.randn_like(p) * 0.1)
    return cell


def _sequence(batch: int, steps: int, input_size: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(batch, steps, input_size, generator=g, dtype=F64)


@_own_rng
@torch.no_grad()
def equations_gap(*, batch: int = 3, steps: int = 6, input_size: int = 5, hidden: int = 4,
                  seed: int = 0) -> float:
    """Largest ``|h_t|`` difference between the package's LN-LSTM cell and eqs. 20-22 of
    Ba et al. written out with ``torch.nn.functional.layer_norm`` (float64)."""
    cell = _cell(input_size, hidden, 1e-5, seed)
    x = _sequence(batch, steps, input_size, seed)
    ours, _ = run_sequence(cell, x)
    h = torch.zeros(batch, hidden, dtype=F64)
    c = torch.zeros(batch, hidden, dtype=F64)
    outs = []
    for t in range(steps):
        pre = (TF.layer_norm(h @ cell.weight_hh.T, (4 * hidden,), cell.ln_hh_weight,
                             cell.ln_hh_bias, 1e-5)
               + TF.layer_norm(x[:, t] @ cell.weight_ih.T, (4 * hidden,), cell.ln_ih_weight,
                               cell.ln_ih_bias, 1e-5) + cell.bias)
        i, f, g, o = pre.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(TF.layer_norm(c, (hidden,), cell.ln_cell_weight,
                                                        cell.ln_cell_bias, 1e-5))
        outs.append(h)
    return (ours - torch.stack(outs, 1)).abs().max().item()


@_own_rng
@torch.no_grad()
def projection_scale_change(scale: float = 10.0, *, batch: int = 3, steps: int = 6,
                            input_size: int = 5, hidden: int = 4, seed: int = 0) -> dict:
    """Multiply ``W_h`` and ``W_x`` by ``scale``; return the largest change of the output
    sequence for the LN-LSTM cell (``"ln_lstm"``; ``eps = 1e-12``, so the invariance holds up
    to round-off; the first step's ``W_h h_0 = 0`` rows need an ``eps > 0``) and for
    ``torch.nn.LSTM`` with the same weights and a LayerNorm on its input and on its output
    (``"wrapped_lstm"``)."""
    x = _sequence(batch, steps, input_size, seed)
    cell = _cell(input_size, hidden, 1e-12, seed)
    lstm = torch.nn.LSTM(input_size, hidden, batch_first=True).double()

    def wrapped(inp):
        out, _ = lstm(TF.layer_norm(inp, (input_size,)))
        return TF.layer_norm(out, (hidden,))

    before = {"ln_lstm": run_sequence(cell, x)[0], "wrapped_lstm": wrapped(x)}
    for w in (cell.weight_hh, cell.weight_ih, lstm.weight_hh_l0, lstm.weight_ih_l0):
        w.mul_(scale)
    after = {"ln_lstm": run_sequence(cell, x)[0], "wrapped_lstm": wrapped(x)}
    return {k: (after[k] - before[k]).abs().max().item() for k in before}


def gate_block_means(per_gate: bool, *, batch: int = 8, hidden: int = 6,
                     seed: int = 0) -> torch.Tensor:
    """Mean over each gate's ``H`` units of ``LN(W_h h)`` (no affine), for LN over all ``4H``
    pre-activations at once (``per_gate=False``, Ba et al.) or over each gate's block.
    Returns a ``(batch, 4)`` tensor (gates i, f, g, o)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(4 * hidden, hidden, generator=g, dtype=F64)
    w[hidden:2 * hidden] += 0.5                # the forget gate's rows lean positive
    h = torch.rand(batch, hidden, generator=g, dtype=F64) + 0.5
    pre = h @ w.T                               # (batch, 4H)
    if per_gate:
        blocks = TF.layer_norm(pre.view(batch, 4, hidden), (hidden,))
    else:
        blocks = TF.layer_norm(pre, (4 * hidden,)).view(batch, 4, hidden)
    return blocks.mean(-1)


@_own_rng
def cell_magnitude_change(k: float = 5.0, *, batch: int = 4, hidden: int = 6,
                          seed: int = 0) -> dict:
    """Largest change of ``tanh(cell_output(c))`` when ``c`` is replaced by ``k c``: with the
    cell LN (``"with_cell_ln"``, Ba et al.) and without it (``"without_cell_ln"``)."""
    cell = _cell(3, hidden, 0.0, seed)
    g = torch.Generator().manual_seed(seed + 2)
    c = torch.randn(batch, hidden, generator=g, dtype=F64)
    with torch.no_grad():
        ln = (torch.tanh(cell.cell_output(k * c, 0)) - torch.tanh(cell.cell_output(c, 0)))
    plain = torch.tanh(k * c) - torch.tanh(c)
    return {"with_cell_ln": ln.abs().max().item(), "without_cell_ln": plain.abs().max().item()}
