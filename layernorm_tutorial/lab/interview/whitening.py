r"""Why BatchNorm standardizes each feature instead of whitening: the batch covariance.

Whitening a batch ``x`` of shape ``(m, d)`` maps it to
:math:`\Sigma^{-1/2}(x - \mu)` with :math:`\Sigma` the ``d x d`` batch covariance, so that
the output has identity covariance (ZCA whitening; here through an eigendecomposition,
:math:`\Sigma^{-1/2} = U\,\mathrm{diag}(\lambda + \epsilon)^{-1/2}U^\top`). BatchNorm keeps
only the diagonal: :math:`(x_j - \mu_j)/\sqrt{\Sigma_{jj} + \epsilon}`.

The facts the interview answer rests on, as computations:

* :func:`covariance_rank`: the covariance of ``m`` centred samples has rank at most
  ``m - 1``, so for ``m <= d`` it is singular and :math:`\Sigma^{-1/2}` does not exist
  (Ioffe and Szegedy, 2015, sec. 3: regularization would be required);
* :func:`whitened_covariance`: with ``m > d`` the whitened batch has identity covariance;
  with ``m <= d`` (and a small ``eps``) it has rank ``m - 1`` and cannot be the identity,
  while per-feature standardization gives unit variances at any ``m >= 2``;
* :func:`feature_coupling`: per sample, BatchNorm's Jacobian across features is diagonal
  (output feature ``i`` depends on input feature ``j`` only if ``i == j``), whitening's is
  dense: every output depends on every feature.
"""

from __future__ import annotations

import torch

from layernorm_tutorial import functional as LF

__all__ = ["zca_whiten", "covariance_rank", "whitened_covariance", "feature_coupling"]

F64 = torch.float64


def zca_whiten(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """ZCA whitening of a batch ``x`` ``(m, d)`` over its ``m`` rows (biased covariance,
    ``eps`` added to the eigenvalues). Returns a tensor of the shape of ``x``."""
    if x.dim() != 2:
        raise ValueError(f"x must have shape (m, d), got {tuple(x.shape)}")
    centred = x - x.mean(0)
    cov = centred.T @ centred / x.shape[0]
    evals, evecs = torch.linalg.eigh(cov)
    return centred @ evecs @ torch.diag((evals + eps).rsqrt()) @ evecs.T


def _batch(m: int, d: int, seed: int) -> torch.Tensor:
    """``m`` samples of ``d`` correlated features (a random linear mix of normals)."""
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(d, d, generator=g, dtype=F64)
    return torch.randn(m, d, generator=g, dtype=F64) @ mix + 1.0


def covariance_rank(m: int, d: int, *, seed: int = 0) -> int:
    """Numerical rank of the ``d x d`` covariance of ``m`` correlated samples."""
    if m < 2 or d < 1:
        raise ValueError(f"need m >= 2 samples and d >= 1 features, got m={m}, d={d}")
    x = _batch(m, d, seed)
    centred = x - x.mean(0)
    return int(torch.linalg.matrix_rank(centred.T @ centred / m, hermitian=True))


def whitened_covariance(m: int, d: int, *, eps: float = 1e-8, seed: int = 0) -> dict:
    """Whiten and standardize one batch of ``m`` correlated samples of ``d`` features.

    Returns ``{"whitened_gap": max |Cov(whitened) - I|, "standardized_gap": max |diag
    Cov(standardized) - 1| (BatchNorm, eps 1e-12), "standardized_offdiag": max |off-diagonal
    correlation left after standardizing|}``."""
    x = _batch(m, d, seed)
    eye = torch.eye(d, dtype=F64)

    def cov(t):
        c = t - t.mean(0)
        return c.T @ c / m

    bn = LF.batch_norm(x, None, None, training=True, eps=1e-12)
    bn_cov = cov(bn)
    return {"whitened_gap": (cov(zca_whiten(x, eps)) - eye).abs().max().item(),
            "standardized_gap": (bn_cov.diagonal() - 1).abs().max().item(),
            "standardized_offdiag": (bn_cov - torch.diag(bn_cov.diagonal())).abs().max().item()}


def feature_coupling(m: int = 32, d: int = 6, *, seed: int = 0) -> dict:
    """Jacobian of sample 0's output features with respect to sample 0's input features,
    under training-mode BatchNorm and under ZCA whitening. Returns ``{"batch_norm": largest
    |off-diagonal entry|, "whitening": largest |off-diagonal entry|}``."""
    x = _batch(m, d, seed)

    def row_jacobian(norm):
        def sample0(row):
            batch = torch.cat([row.unsqueeze(0), x[1:]])
            return norm(batch)[0]
        jac = torch.autograd.functional.jacobian(sample0, x[0].clone())
        return (jac - torch.diag(jac.diagonal())).abs().max().item()

    return {"batch_norm": row_jacobian(lambda t: LF.batch_norm(t, None, None, training=True)),
            "whitening": row_jacobian(zca_whiten)}
