"""layernorm_tutorial: Layer Normalization and its family, built from elementary tensor ops.

Modules
-------
functional     stateless forward functions with torch.nn.functional signatures, built on one
               forward core (``standardize`` / ``layer_norm_forward``)
running_stats  the batch-norm running-statistics update (Bessel, momentum=None)
autograd       LayerNorm / BatchNorm as autograd.Functions with hand-derived backward passes
numpy_ref      NumPy forward/backward reference in the ``(out, cache)`` style
nn             thin nn.Module wrappers with torch's constructor arguments and state_dict keys
plots          figure helpers used by the book (each returns a matplotlib Figure)

The Triton kernel lives in ``layernorm_tutorial.triton_kernels`` and is not imported here,
because importing it may switch Triton to its CPU interpreter.
"""

from . import autograd, functional, nn, numpy_ref, running_stats

__all__ = ["autograd", "functional", "nn", "numpy_ref", "running_stats"]
__version__ = "0.1.0"
