"""The residual chapter's experiments: signal and gradient propagation through deep stacks.

CPU-sized and seeded: every function takes a ``seed`` and leaves torch's global random state
unchanged. The models are in :mod:`layernorm_tutorial.lab.common.transformer`.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as TF
from torch import Tensor

from layernorm_tutorial import functional
from layernorm_tutorial._seeding import seeded
from layernorm_tutorial.lab.common.transformer import TokenTransformer, TransformerEncoder
from layernorm_tutorial.nn import LayerNorm

__all__ = [
    "gradient_norm_per_layer",
    "input_probe_by_depth",
    "residual_stack_at_init",
    "residual_variance_by_depth",
    "reverse_task_batch",
    "reverse_task_steps",
    "stack_output_spread",
    "train_reverse_task",
    "warmup_factor",
]


def _branch_weights(width: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """``W1`` He-initialized (``Var = 2/width``) and ``W2`` with ``Var = 1/width``, float64."""
    w1 = torch.randn(width, width, generator=generator, dtype=torch.float64) * math.sqrt(2 / width)
    w2 = torch.randn(width, width, generator=generator, dtype=torch.float64) / math.sqrt(width)
    return w1, w2


def _mlp_branch(width: int, generator: torch.Generator, with_norm: bool):
    """``F(x) = W2 relu(W1 LN(x))`` (or without LN), weights from :func:`_branch_weights`."""
    w1, w2 = _branch_weights(width, generator)
    norm = LayerNorm(width).double() if with_norm else None

    def branch(x: Tensor) -> Tensor:
        z = norm(x) if norm is not None else x
        return torch.relu(z @ w1.T) @ w2.T

    return branch


def residual_variance_by_depth(depth: int = 40, width: int = 256, batch_size: int = 512,
                               architecture: str = "residual", seed: int = 0) -> dict:
    """Track the activation variance ``v_l = Var(x_l)`` through a random deep stack.

    ``architecture``: ``"plain"`` (``x_{l+1} = F(x_l)``, LN at the start of every F),
    ``"residual"`` (``x_{l+1} = x_l + F(x_l)``, LN inside F: the pre-LN arrangement) or
    ``"residual_no_norm"`` (``x_{l+1} = x_l + F(x_l)`` without LN). F is a two-layer ReLU MLP
    (see :func:`_mlp_branch`). ``x_0 ~ N(0, 1)``, float64, no training.

    Returns NumPy arrays: ``variance`` (``depth + 1`` values, ``v_0 .. v_depth``),
    ``branch_variance`` (``Var(F(x_l))``, ``depth`` values), ``predicted`` (``depth``
    values, ``v_l + Var(F(x_l))`` for residual stacks and ``Var(F(x_l))`` for plain ones,
    each computed from the measured quantities of layer ``l``) and ``input_correlation``
    (``depth + 1`` values, the correlation of the entries of ``x_l`` with those of ``x_0``).
    """
    if architecture not in ("plain", "residual", "residual_no_norm"):
        raise ValueError("architecture must be 'plain', 'residual' or 'residual_no_norm', "
                         f"got {architecture!r}")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, width, generator=g, dtype=torch.float64)
    x0 = x.clone()
    variance, branch_variance, predicted = [float(x.var())], [], []
    correlation = [1.0]
    with torch.no_grad():
        for _ in range(depth):
            f = _mlp_branch(width, g, with_norm=architecture != "residual_no_norm")(x)
            branch_variance.append(float(f.var()))
            if architecture == "plain":
                predicted.append(float(f.var()))
                x = f
            else:
                predicted.append(float(x.var()) + float(f.var()))
                x = x + f
            variance.append(float(x.var()))
            correlation.append(float(torch.corrcoef(torch.stack([x.flatten(),
                                                                 x0.flatten()]))[0, 1]))
    return {"variance": np.array(variance), "branch_variance": np.array(branch_variance),
            "predicted": np.array(predicted), "input_correlation": np.array(correlation)}


def _held_out_r2(features: Tensor, target: Tensor, n_fit: int) -> float:
    """Fit ``target ~ features @ A + b`` by least squares on the first ``n_fit`` rows and
    return R^2 on the remaining rows: ``1 - sum ||y - y_hat||^2 / sum ||y - mean(y)||^2``.

    The fit solves the normal equations ``(X^T X) A = X^T y`` in float64 (the design ``X``
    has the intercept column; a ridge of ``1e-10 * trace / columns`` guards a singular
    ``X^T X``)."""
    ones = torch.ones(features.shape[0], 1, dtype=features.dtype)
    design = torch.cat([features, ones], dim=1)
    fit = design[:n_fit]
    gram = fit.T @ fit
    gram = gram + 1e-10 * gram.diagonal().mean() * torch.eye(gram.shape[0], dtype=gram.dtype)
    coef = torch.linalg.solve(gram, fit.T @ target[:n_fit])
    test, y = design[n_fit:], target[n_fit:]
    residual = ((y - test @ coef) ** 2).sum()
    total = ((y - y.mean(dim=0)) ** 2).sum()
    return float(1 - residual / total)


def input_probe_by_depth(depth: int = 40, width: int = 128, batch_size: int = 256,
                         architecture: str = "residual", seed: int = 0,
                         n_fit: int = 4096, n_test: int = 1024) -> dict:
    """How much of the input ``x_0`` a *linear probe* can read back from ``x_l``, per layer.

    The stack is that of :func:`residual_variance_by_depth` with the same arguments (the same
    weights: the generator draws the batch and then the blocks in the same order). Extra
    inputs ``x_0 ~ N(0, I)`` (``n_fit + n_test`` rows, from their own generator) go through
    it; for each layer ``l`` a linear map with intercept is fitted by least squares from
    ``x_l`` to ``x_0`` on ``n_fit`` rows and scored on the other ``n_test``:

    ``R^2_l = 1 - sum ||x_0 - x_0_hat||^2 / sum ||x_0 - mean(x_0)||^2`` (held out; 1 = the
    input is a linear function of ``x_l``, 0 = no linear read-out does better than the mean;
    small negative values are the fit's noise, about ``-(width + 1) / n_fit``).

    Also returns the coordinate correlation ``corr(x_l, x_0)`` over all entries of the held
    out rows, the quantity of :func:`residual_variance_by_depth`. NumPy arrays of
    ``depth + 1`` values (layer 0 included, where both are 1).
    """
    if architecture not in ("plain", "residual", "residual_no_norm"):
        raise ValueError("architecture must be 'plain', 'residual' or 'residual_no_norm', "
                         f"got {architecture!r}")
    if n_fit <= width + 1 or n_test < 2:
        raise ValueError(f"n_fit must exceed width + 1 = {width + 1} and n_test must be at "
                         f"least 2, got n_fit={n_fit}, n_test={n_test}")
    g = torch.Generator().manual_seed(seed)
    torch.randn(batch_size, width, generator=g, dtype=torch.float64)  # as the variance run
    x0 = torch.randn(n_fit + n_test, width, generator=torch.Generator().manual_seed(seed + 1),
                     dtype=torch.float64)
    x = x0
    r2, correlation = [1.0], [1.0]
    with torch.no_grad():
        for _ in range(depth):
            f = _mlp_branch(width, g, with_norm=architecture != "residual_no_norm")(x)
            x = f if architecture == "plain" else x + f
            r2.append(_held_out_r2(x, x0, n_fit))
            held = torch.stack([x[n_fit:].flatten(), x0[n_fit:].flatten()])
            correlation.append(float(torch.corrcoef(held)[0, 1]))
    return {"probe_r2": np.array(r2), "input_correlation": np.array(correlation)}


def reverse_task_batch(batch_size: int, seq_len: int = 8, vocab_size: int = 16,
                       generator: torch.Generator | None = None):
    """Toy task: random tokens ``(B, T)`` and the same sequence reversed as per-position targets."""
    tokens = torch.randint(0, vocab_size, (batch_size, seq_len), generator=generator)
    return tokens, tokens.flip(dims=[1])


def gradient_norm_per_layer(num_layers: int, norm_first: bool, d_model: int = 32,
                            nhead: int = 2, dim_feedforward: int = 64, seq_len: int = 8,
                            vocab_size: int = 16, batch_size: int = 64, seed: int = 0):
    """At initialization, ``||dL/dW||`` of each block's FFN output weight ``linear2.weight``.

    ``L`` is the cross-entropy of a :class:`TokenTransformer` on one batch of the reverse task;
    pre-LN models get the final LN. This is the quantity of Xiong et al. (2020), Fig. 3.
    Returns a NumPy array of ``num_layers`` norms, layer 1 (nearest the input) first.
    """
    with seeded(seed):
        model = TokenTransformer(vocab_size, vocab_size, seq_len, num_layers, d_model, nhead,
                                 dim_feedforward, norm_first=norm_first)
    tokens, targets = reverse_task_batch(batch_size, seq_len, vocab_size,
                                         torch.Generator().manual_seed(seed + 1))
    logits = model(tokens)
    TF.cross_entropy(logits.reshape(-1, vocab_size), targets.reshape(-1)).backward()
    return np.array([float(layer.linear2.weight.grad.norm()) for layer in model.encoder.layers])


def warmup_factor(step: int, warmup_steps: int) -> float:
    """Linear warm-up: ``min(1, (step + 1) / warmup_steps)``; 1 when ``warmup_steps == 0``."""
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps!r}")
    return 1.0 if warmup_steps == 0 else min(1.0, (step + 1) / warmup_steps)


def reverse_task_steps(model: torch.nn.Module, optimizer, schedule, *, steps: int,
                       batch_size: int, seq_len: int, vocab_size: int,
                       generator: torch.Generator, after_step=None) -> list[float]:
    """The training loop of the book's toy runs: ``steps`` optimizer steps on the reverse task.

    Each step draws a fresh batch ``(batch_size, seq_len)`` from ``generator``
    (:func:`reverse_task_batch`), takes the mean cross-entropy of the logits
    ``(batch_size, seq_len, vocab_size)``, steps ``optimizer`` and then ``schedule`` (a
    ``torch.optim.lr_scheduler``). ``after_step(loss)``, if given, is called after each step
    with that step's loss; a true return value stops the loop. Returns the losses, one a step.
    """
    losses = []
    for _ in range(steps):
        tokens, targets = reverse_task_batch(batch_size, seq_len, vocab_size, generator)
        loss = TF.cross_entropy(model(tokens).reshape(-1, vocab_size), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if after_step is not None and after_step(losses[-1]):
            break
    return losses


def train_reverse_task(num_layers: int, norm_first: bool, steps: int = 100, lr: float = 1e-3,
                       warmup_steps: int = 0, d_model: int = 32, nhead: int = 2,
                       dim_feedforward: int = 64, seq_len: int = 8, vocab_size: int = 16,
                       batch_size: int = 32, seed: int = 0) -> dict:
    """Train a small :class:`TokenTransformer` with Adam to reverse token sequences.

    Learning rate ``lr * warmup_factor(step, warmup_steps)``. Fresh random batches each step
    (a seeded generator), so there is no overfitting. Returns ``{"loss": [...] (one per step),
    "accuracy": float}``: the per-token accuracy on a held-out batch of 512 sequences after
    training (chance is ``1 / vocab_size``).
    """
    with seeded(seed):  # the model's initial weights come from torch's global generator
        model = TokenTransformer(vocab_size, vocab_size, seq_len, num_layers, d_model, nhead,
                                 dim_feedforward, norm_first=norm_first)
        optimizer = torch.optim.Adam(model.parameters(), lr=lr, fused=True)  # fewer kernel calls
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: warmup_factor(step, warmup_steps))
        losses = reverse_task_steps(model, optimizer, schedule, steps=steps,
                                    batch_size=batch_size, seq_len=seq_len,
                                    vocab_size=vocab_size,
                                    generator=torch.Generator().manual_seed(seed + 1))
        tokens, targets = reverse_task_batch(512, seq_len, vocab_size,
                                             torch.Generator().manual_seed(seed + 10_000))
        with torch.no_grad():
            accuracy = float((model(tokens).argmax(-1) == targets).float().mean())
    return {"loss": losses, "accuracy": accuracy}


def stack_output_spread(num_layers: int, norm_first: bool, final_norm: bool | None = None,
                        d_model: int = 32, nhead: int = 2, dim_feedforward: int = 64,
                        seq_len: int = 8, batch_size: int = 64, seed: int = 0) -> dict:
    """At initialization, the spread of the residual stream before and after the final norm.

    Runs a :class:`TransformerEncoder` on ``N(0, 1)`` inputs ``(batch_size, seq_len, d_model)``
    and returns ``{"stream_std": ..., "output_std": ...}``: the standard deviation of the
    last block's output (the residual stream) and of the encoder's output (after the final
    norm, if any), both as floats.
    """
    with seeded(seed):
        encoder = TransformerEncoder(num_layers, d_model, nhead, dim_feedforward,
                                     norm_first=norm_first, final_norm=final_norm)
    x = torch.randn(batch_size, seq_len, d_model, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        stream = x
        for layer in encoder.layers:
            stream = layer(stream)
        out = stream if encoder.norm is None else encoder.norm(stream)
    return {"stream_std": float(stream.std()), "output_std": float(out.std())}


def residual_stack_at_init(depth: int = 12, placement: str = "pre", width: int = 64,
                           batch: int = 32, seed: int = 0):
    r"""Weight-gradient norms and residual-stream variances of a residual MLP stack at init.

    Block ``l``: ``F(u) = W2 relu(W1 u)`` (weights of :func:`_branch_weights`).
    ``placement="pre"``: ``x_{l+1} = x_l + F(LN(x_l))`` and a final LN; ``placement="post"``:
    ``x_{l+1} = LN(x_l + F(x_l))`` (the original Transformer's "Add & Norm"). The loss is
    ``sum(out * r)`` for a fixed random ``r`` of the output's shape.

    Returns ``(grad_norms, variances)``: ``grad_norms[l] = ||dL/dW2_l||_F`` (shape
    ``(depth,)``) and ``variances[l] = Var(x_l)`` over all entries (shape ``(depth + 1,)``).
    Xiong et al. (2020): Post-LN's last-block gradient does not shrink with depth, Pre-LN's
    shrinks like :math:`1/\sqrt{L}`, because its stream variance grows like :math:`L`.
    """
    if placement not in ("pre", "post"):
        raise ValueError(f"placement must be 'pre' or 'post', got {placement!r}")
    if depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth}")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, width, generator=g, dtype=torch.float64)
    upstream = torch.randn(batch, width, generator=g, dtype=torch.float64)
    w2s, variances = [], [float(x.var())]
    for _ in range(depth):
        w1, w2 = _branch_weights(width, g)
        w2s.append(w2.requires_grad_(True))
        if placement == "pre":
            x = x + torch.relu(functional.layer_norm(x, (width,)) @ w1.T) @ w2.T
        else:
            x = functional.layer_norm(x + torch.relu(x @ w1.T) @ w2.T, (width,))
        variances.append(float(x.detach().var()))
    out = functional.layer_norm(x, (width,)) if placement == "pre" else x
    (out * upstream).sum().backward()
    return np.array([float(w.grad.norm()) for w in w2s]), np.array(variances)
