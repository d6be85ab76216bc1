r"""Finding the norm layer that breaks training: NaNs, gradient spikes, in-place and mode bugs.

Part 3 of the interview chapters (``book/interview_practice.ipynb``) asks how one debugs a
training run that a normalization layer breaks. The tools and the broken variants it needs:

``find_nonfinite(model, x)``
    one forward and backward pass with hooks on every leaf module: the first module whose
    output is not finite, and the first whose input gradient is not finite although its
    output gradient is (the module that *created* the NaN in the backward pass).
``anomaly_message(loss_fn)``
    the first line of the error that ``torch.autograd.detect_anomaly`` raises, warnings
    silenced (it names the backward function that returned NaN).
``EpsOutsideLayerNorm``
    the hand-written LayerNorm ``(x - mean) / (sqrt(var) + eps)``: finite forward on a
    constant row, NaN gradient (:math:`\tfrac{d}{dv}\sqrt v` is infinite at 0).
``gradient_gain(variance, eps)``
    how much LayerNorm amplifies an input gradient on a row of the given variance:
    exactly :math:`1/\sqrt{\sigma^2+\epsilon}` for the gradient components it passes.
``stashed_input_layer_norm`` / ``inplace_outcome``
    in-place edits of a tensor that autograd saved: an error with ``save_for_backward``,
    a silently wrong gradient when a custom function keeps the tensor on ``ctx``.
``mode_dependent_modules`` / ``buffers_of`` / ``max_buffer_change`` / ``evaluating``
    which modules behave differently in training mode, what a pass changed in the buffers,
    and an evaluation context that switches to evaluation mode and restores every module.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable

import torch
from torch import nn

from layernorm_tutorial import functional as LF
from layernorm_tutorial import nn as lnn

__all__ = ["find_nonfinite", "anomaly_message", "EpsOutsideLayerNorm", "gradient_gain",
           "stashed_input_layer_norm", "inplace_outcome", "MODE_DEPENDENT",
           "mode_dependent_modules", "buffers_of", "max_buffer_change", "evaluating"]

F64 = torch.float64


def _all_finite(value) -> bool:
    """True when every tensor in ``value`` (a tensor, or a tuple of tensors and None) is
    finite."""
    tensors = value if isinstance(value, (tuple, list)) else (value,)
    return all(bool(torch.isfinite(t).all()) for t in tensors if isinstance(t, torch.Tensor))


def find_nonfinite(model: nn.Module, x: torch.Tensor,
                   loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None) -> dict:
    """Locate the leaf module where a NaN or inf first appears, forward and backward.

    Runs ``loss_fn(model(x))`` (default: the sum of the output) and its backward pass once,
    with a forward hook and a full backward hook on every leaf module (a module without
    children). ``x`` is detached and made to require a gradient, so the first module's
    input gradient is checked too. Returns ``{"forward": name or None, "backward": name or
    None}``: the first module (in execution order) whose output is not finite, and the
    first module whose input gradient is not finite while its output gradient is. The hooks
    are removed afterwards, also when the pass raises.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    found: dict[str, str | None] = {"forward": None, "backward": None}

    def forward_hook(name):
        def hook(module, inputs, output):
            if found["forward"] is None and not _all_finite(output):
                found["forward"] = name
        return hook

    def backward_hook(name):
        def hook(module, grad_input, grad_output):
            if (found["backward"] is None and _all_finite(grad_output)
                    and not _all_finite(grad_input)):
                found["backward"] = name
        return hook

    handles = []
    try:
        for name, module in model.named_modules():
            if name and not any(True for _ in module.children()):
                handles.append(module.register_forward_hook(forward_hook(name)))
                handles.append(module.register_full_backward_hook(backward_hook(name)))
        out = model(x.detach().requires_grad_(True))
        loss = out.sum() if loss_fn is None else loss_fn(out)
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    return found


def anomaly_message(loss_fn: Callable[[], torch.Tensor]) -> str | None:
    """Run ``loss_fn().backward()`` under ``torch.autograd.detect_anomaly()`` and return the
    first line of the RuntimeError it raises when a backward function returns NaN (or None
    when the backward pass is clean). Anomaly mode's warnings, which print the forward
    traceback with file paths, are silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autograd.detect_anomaly():
            try:
                loss_fn().backward()
            except RuntimeError as err:
                return str(err).splitlines()[0]
    return None


class EpsOutsideLayerNorm(nn.Module):
    r"""The common hand-written LayerNorm over the last dim, with :math:`\epsilon` added to
    the *standard deviation* (biased): :math:`y = (x-\mu)/(\sqrt{\sigma^2}+\epsilon)`.

    Input ``(*, features)``, output of the same shape; no affine parameters. Its forward
    pass is finite on a constant row (0 / eps = 0), but the backward pass differentiates
    :math:`\sqrt{\sigma^2}` at 0, where the derivative is infinite: the input gradient of a
    constant row is NaN.
    """

    def __init__(self, features: int, eps: float = 1e-5):
        super().__init__()
        self.features, self.eps = features, eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.var(-1, keepdim=True, correction=0).sqrt()
        return (x - mean) / (std + self.eps)

    def extra_repr(self) -> str:
        return f"{self.features}, eps={self.eps}"


def _row_with_variance(variance: float, features: int, g: torch.Generator) -> torch.Tensor:
    """A row ``(features,)`` with mean 3 and biased variance exactly ``variance`` (up to
    round-off), and the unit-variance direction ``z`` it was built from."""
    z = torch.randn(features, generator=g, dtype=F64)
    z = (z - z.mean()) / z.var(correction=0).sqrt()
    return 3.0 + variance ** 0.5 * z, z


def gradient_gain(variance: float, eps: float = 1e-5, *, features: int = 16,
                  seed: int = 0) -> dict:
    r"""How much LayerNorm scales an input gradient on a row of biased variance ``variance``.

    LayerNorm's input gradient is :math:`dx = r\,(g - \bar g - \hat x\,\overline{g\hat x})`
    with :math:`r = 1/\sqrt{\sigma^2+\epsilon}`: the components of the output gradient
    :math:`g` orthogonal to the constant vector and to :math:`\hat x` pass through scaled by
    exactly :math:`r`. The function builds a row with that variance (float64), an output
    gradient with only such components, back-propagates it through the package's
    :func:`~layernorm_tutorial.functional.layer_norm` and returns ``{"measured":
    |dx| / |g|, "predicted": 1/sqrt(variance + eps)}``. For a constant row (variance 0) the
    gain is :math:`1/\sqrt\epsilon`: 316 for eps = 1e-5, a million for 1e-12.
    """
    if variance < 0:
        raise ValueError(f"variance must be >= 0, got {variance}")
    if features < 3:
        raise ValueError(f"features must be >= 3, got {features}")
    g = torch.Generator().manual_seed(seed)
    row, z = _row_with_variance(float(variance), features, g)
    x = row.unsqueeze(0).requires_grad_(True)                # (1, features)
    dy = torch.randn(features, generator=g, dtype=F64)
    dy = dy - dy.mean()
    dy = (dy - z * (dy @ z) / (z @ z)).unsqueeze(0)          # orthogonal to 1 and to x_hat
    LF.layer_norm(x, (features,), eps=eps).backward(dy)
    return {"measured": (x.grad.norm() / dy.norm()).item(),
            "predicted": (variance + eps) ** -0.5}


class _StashedInputLayerNorm(torch.autograd.Function):
    """LayerNorm over the last dim that keeps its input on ``ctx`` instead of calling
    ``save_for_backward``: autograd cannot see the tensor, so it cannot check its version."""

    @staticmethod
    def forward(ctx, x, eps):
        ctx.x, ctx.eps = x, eps                   # the bug: no save_for_backward
        return LF.layer_norm(x, (x.shape[-1],), eps=eps)

    @staticmethod
    def backward(ctx, dy):
        with torch.enable_grad():
            x = ctx.x.detach().requires_grad_(True)
            y = LF.layer_norm(x, (x.shape[-1],), eps=ctx.eps)
            (dx,) = torch.autograd.grad(y, x, dy)
        return dx, None


def stashed_input_layer_norm(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm of ``x`` ``(*, features)`` over its last dim, with a backward that reads
    the input kept on ``ctx`` (no version check): correct unless the input is edited in
    place between the forward and the backward pass."""
    return _StashedInputLayerNorm.apply(x, eps)


def inplace_outcome(norm: Callable[[torch.Tensor], torch.Tensor], where: str, *,
                    rows: int = 4, features: int = 8, seed: int = 0) -> dict:
    """What an in-place edit does to ``norm``'s backward pass.

    ``norm`` maps ``x`` ``(rows, features)`` to an output of the same shape. ``where`` is
    ``"input"`` (``x.mul_(2)`` after the forward pass, ``x`` a non-leaf tensor computed from
    a leaf) or ``"output"`` (``y.relu_()`` instead of an out-of-place ReLU). The backward
    pass of ``sum(dy * result)`` is compared, in float64, with the same computation done
    without the in-place edit. Returns ``{"status": "error" or "ok", "message": first
    clause of the error or "", "gradient_error": max |grad - reference| or None}``.
    """
    if where not in ("input", "output"):
        raise ValueError(f"where must be 'input' or 'output', got {where!r}")
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(rows, features, generator=g, dtype=F64)
    dy = torch.randn(rows, features, generator=g, dtype=F64)

    leaf = base.clone().requires_grad_(True)                 # reference, no in-place edit
    reference_out = norm(leaf * 1.0)
    if where == "output":
        reference_out = torch.relu(reference_out)
    (reference,) = torch.autograd.grad((dy * reference_out).sum(), leaf)

    leaf = base.clone().requires_grad_(True)
    x = leaf * 1.0                                           # non-leaf: may be edited
    y = norm(x)
    if where == "input":
        x.mul_(2.0)
    else:
        y = y.relu_()
    try:
        (grad,) = torch.autograd.grad((dy * y).sum(), leaf)
    except RuntimeError as err:
        return {"status": "error", "message": str(err).split(": [")[0].split("\n")[0],
                "gradient_error": None}
    return {"status": "ok", "message": "",
            "gradient_error": (grad - reference).abs().max().item()}


#: Modules that compute something different in training and in evaluation mode.
MODE_DEPENDENT = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm,
                  lnn._BatchNorm, nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d,
                  nn.AlphaDropout)


def mode_dependent_modules(model: nn.Module, *, training: bool | None = True) -> list[str]:
    """Names of ``model``'s BatchNorm and dropout modules (``MODE_DEPENDENT``) whose
    ``training`` flag equals ``training`` (all of them when ``training`` is None)."""
    return [name for name, m in model.named_modules() if isinstance(m, MODE_DEPENDENT)
            and (training is None or m.training == training)]


def buffers_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of every buffer of ``model`` (running statistics, counters), by name."""
    return {name: b.detach().clone() for name, b in model.named_buffers()}


def max_buffer_change(before: dict[str, torch.Tensor], model: nn.Module) -> float:
    """Largest absolute change of any floating-point buffer of ``model`` since ``before``
    (a :func:`buffers_of` snapshot of the same model)."""
    now = dict(model.named_buffers())
    if set(now) != set(before):
        raise ValueError("before must be a buffers_of snapshot of the same model")
    changes = [(now[n].double() - before[n].double()).abs().max().item()
               for n in now if before[n].is_floating_point() and before[n].numel()]
    return max(changes, default=0.0)


@contextlib.contextmanager
def evaluating(model: nn.Module):
    """Within the block ``model`` is in evaluation mode and gradients are off; on exit every
    module gets back its own previous ``training`` flag (a per-module ``eval()`` made
    before the block survives)."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        for module, mode in modes:
            module.training = mode
