r"""NumPy reference implementations in the ``forward -> (out, cache)``, ``backward(dout, cache)``
style, written to be read next to the math.

Layer norm (and RMS norm) normalizes each row of an ``(..., D)`` array over its last axis;
DyT squashes each element on its own; batch norm
(training mode) normalizes each column of an ``(N, D)`` array over axis 0. Names follow the
derivation: ``mean``, ``xshift = x - mean``, ``var``, ``rstd = 1/sqrt(var + eps)``,
``norm = xshift * rstd``.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "layer_norm_forward",
    "layer_norm_backward",
    "batch_norm_forward",
    "batch_norm_backward",
    "rms_norm_forward",
    "rms_norm_backward",
    "dyt_forward",
    "dyt_backward",
    "numerical_gradient",
]


def layer_norm_forward(x, gamma, beta, eps: float = 1e-5):
    """Layer norm over the last axis.

    x: (..., D); gamma, beta: (D,). Returns ``(out, cache)`` with out: (..., D).
    """
    x = np.asarray(x)
    D = x.shape[-1]
    if np.shape(gamma) != (D,) or np.shape(beta) != (D,):
        raise ValueError(
            f"gamma and beta must have shape ({D},) to match the last axis of x, "
            f"got {np.shape(gamma)} and {np.shape(beta)}"
        )
    mean = x.mean(axis=-1, keepdims=True)          # (..., 1)
    xshift = x - mean                              # (..., D)
    var = (xshift**2).mean(axis=-1, keepdims=True) # (..., 1)  biased: divide by D
    rstd = 1.0 / np.sqrt(var + eps)                # (..., 1)  eps inside the root
    norm = xshift * rstd                           # (..., D)  x_hat
    out = norm * gamma + beta                      # (..., D)
    cache = (norm, rstd, gamma)
    return out, cache


def layer_norm_backward(dout, cache):
    """Gradients of layer norm. dout: (..., D). Returns ``(dx, dgamma, dbeta)``."""
    norm, rstd, gamma = cache
    batch_axes = tuple(range(norm.ndim - 1))
    dbeta = dout.sum(axis=batch_axes)                            # (D,)
    dgamma = (dout * norm).sum(axis=batch_axes)                  # (D,)
    dnorm = dout * gamma                                         # (..., D)
    c1 = (dnorm * norm).mean(axis=-1, keepdims=True)             # (..., 1)
    c2 = dnorm.mean(axis=-1, keepdims=True)                      # (..., 1)
    dx = (dnorm - c2 - norm * c1) * rstd                         # (..., D)
    return dx, dgamma, dbeta


def batch_norm_forward(x, gamma, beta, eps: float = 1e-5):
    """Training-mode batch norm over axis 0.

    x: (N, D); gamma, beta: (D,). Returns ``(out, cache)`` with out: (N, D).
    """
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"x must be a 2-D (N, D) array, got shape {x.shape}")
    if x.shape[0] < 2:
        raise ValueError(f"batch norm needs at least 2 rows in x, got shape {x.shape}")
    D = x.shape[1]
    if np.shape(gamma) != (D,) or np.shape(beta) != (D,):
        raise ValueError(
            f"gamma and beta must have shape ({D},), got {np.shape(gamma)} and {np.shape(beta)}"
        )
    mean = x.mean(axis=0, keepdims=True)           # (1, D)
    xshift = x - mean                              # (N, D)
    var = (xshift**2).mean(axis=0, keepdims=True)  # (1, D)  biased
    rstd = 1.0 / np.sqrt(var + eps)                # (1, D)
    norm = xshift * rstd                           # (N, D)
    out = norm * gamma + beta                      # (N, D)
    cache = (norm, rstd, gamma)
    return out, cache


def batch_norm_backward(dout, cache):
    """Gradients of training-mode batch norm. dout: (N, D). Returns ``(dx, dgamma, dbeta)``."""
    norm, rstd, gamma = cache
    dbeta = dout.sum(axis=0)                                     # (D,)
    dgamma = (dout * norm).sum(axis=0)                           # (D,)
    dnorm = dout * gamma                                         # (N, D)
    c1 = (dnorm * norm).mean(axis=0, keepdims=True)              # (1, D)
    c2 = dnorm.mean(axis=0, keepdims=True)                       # (1, D)
    dx = (dnorm - c2 - norm * c1) * rstd                         # (N, D)
    return dx, dgamma, dbeta


def rms_norm_forward(x, gamma, eps: float = 1e-6):
    """RMS norm over the last axis (no centring, no beta).

    x: (..., D); gamma: (D,). Returns ``(out, cache)`` with out: (..., D).
    """
    x = np.asarray(x)
    D = x.shape[-1]
    if np.shape(gamma) != (D,):
        raise ValueError(f"gamma must have shape ({D},) to match the last axis of x, "
                         f"got {np.shape(gamma)}")
    ms = (x**2).mean(axis=-1, keepdims=True)       # (..., 1)  mean square, no mean removed
    rstd = 1.0 / np.sqrt(ms + eps)                 # (..., 1)
    norm = x * rstd                                # (..., D)  x_hat
    out = norm * gamma                             # (..., D)
    cache = (norm, rstd, gamma)
    return out, cache


def rms_norm_backward(dout, cache):
    """Gradients of RMS norm. dout: (..., D). Returns ``(dx, dgamma)``.

    Layer norm's backward without the ``c2 = mean(dnorm)`` term (no mean was subtracted)."""
    norm, rstd, gamma = cache
    batch_axes = tuple(range(norm.ndim - 1))
    dgamma = (dout * norm).sum(axis=batch_axes)                  # (D,)
    dnorm = dout * gamma                                         # (..., D)
    c1 = (dnorm * norm).mean(axis=-1, keepdims=True)             # (..., 1)
    dx = (dnorm - norm * c1) * rstd                              # (..., D)
    return dx, dgamma


def dyt_forward(x, alpha, gamma, beta):
    """Dynamic Tanh: ``gamma * tanh(alpha * x) + beta``, element-wise (no statistics).

    x: (..., D); alpha: a scalar; gamma, beta: (D,). Returns ``(out, cache)``.
    """
    x = np.asarray(x)
    D = x.shape[-1]
    if np.ndim(alpha) != 0:
        raise ValueError(f"alpha must be a scalar, got shape {np.shape(alpha)}")
    if np.shape(gamma) != (D,) or np.shape(beta) != (D,):
        raise ValueError(
            f"gamma and beta must have shape ({D},) to match the last axis of x, "
            f"got {np.shape(gamma)} and {np.shape(beta)}"
        )
    t = np.tanh(alpha * x)                         # (..., D)
    out = gamma * t + beta                         # (..., D)
    cache = (x, t, alpha, gamma)
    return out, cache


def dyt_backward(dout, cache):
    """Gradients of DyT. dout: (..., D). Returns ``(dx, dalpha, dgamma, dbeta)``."""
    x, t, alpha, gamma = cache
    batch_axes = tuple(range(x.ndim - 1))
    dbeta = dout.sum(axis=batch_axes)                            # (D,)
    dgamma = (dout * t).sum(axis=batch_axes)                     # (D,)
    dt = dout * gamma * (1.0 - t**2)                             # (..., D)  through tanh
    dx = dt * alpha                                              # (..., D)  element-wise
    dalpha = float((dt * x).sum())                               # scalar
    return dx, dalpha, dgamma, dbeta


def numerical_gradient(f, x, dout, h: float = 1e-5):
    """Central-difference gradient of ``sum(f(x) * dout)`` with respect to ``x``.

    ``f`` maps an array shaped like ``x`` to an array shaped like ``dout``. Perturbs each
    element of a float64 copy of ``x`` by ``+-h``. Returns an array shaped like ``x``.
    """
    x = np.array(x, dtype=np.float64)  # a contiguous copy: the caller's array is untouched
    grad = np.zeros_like(x)
    flat, gflat = x.reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + h
        plus = np.sum(f(x) * dout)
        flat[i] = old - h
        minus = np.sum(f(x) * dout)
        flat[i] = old
        gflat[i] = (plus - minus) / (2 * h)
    return grad
