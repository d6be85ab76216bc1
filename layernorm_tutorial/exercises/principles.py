"""Shim: the LayerNorm checkers are one, :func:`.layer_norm.check_layer_norm`; the Welford
checker moved to :mod:`.variance_algorithms`.

shim: removed in the final pass.
"""

from .layer_norm import check_layer_norm
from .variance_algorithms import check_welford_update  # noqa: F401


def check_layer_norm_forward(forward, *, seed: int = 0):
    """Shim for ``check_layer_norm(forward)``."""
    return check_layer_norm(forward, seed=seed)


def check_layer_norm_backward(forward, backward, *, seed: int = 0):
    """Shim for ``check_layer_norm(forward, backward)``."""
    return check_layer_norm(forward, backward, seed=seed)
