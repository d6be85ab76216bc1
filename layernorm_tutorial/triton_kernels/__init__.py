"""A fused LayerNorm in Triton: forward and backward kernels behind an autograd.Function.

``layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5)`` has the semantics of
``torch.nn.functional.layer_norm`` for float32, float16 and bfloat16 inputs.

The kernels an LLM runs (``fused``, one kernel source with compile-time variants):
``rms_norm(input, normalized_shape, weight=None, eps=None)`` (``torch.nn.functional.rms_norm``
semantics), and the residual add fused with the norm, ``add_layer_norm(input, residual,
normalized_shape, weight=None, bias=None, eps=1e-5)`` and ``add_rms_norm(input, residual,
normalized_shape, weight=None, eps=None)``, which return ``(norm(s), s)`` with
``s = input + residual``.

Triton has wheels for Linux (x86-64, aarch64) only: without the ``triton`` package,
importing this package raises ImportError (one line); the rest of ``layernorm_tutorial``
does not need it.

Where the kernels run
---------------------
On a machine with a CUDA GPU, Triton compiles the kernels for it and ``layer_norm`` takes
CUDA tensors. Without a GPU, importing this package switches on Triton's CPU interpreter by
setting ``TRITON_INTERPRET=1``; ``layer_norm`` then takes CPU tensors (slowly: each program
runs in Python with NumPy), which is how the tests and the book run the kernels.

Triton reads ``TRITON_INTERPRET`` when a function is decorated with ``@triton.jit``, and it
decorates its own library functions (behind ``tl.sum`` and friends) when ``triton`` is first
imported. So, without a GPU:

- if ``triton`` has not been imported yet, importing this package sets the flag: nothing
  else to do;
- if ``triton`` was already imported with ``TRITON_INTERPRET=1``, all is well;
- if ``triton`` was already imported without it (``torch.compile`` imports triton, for
  example), or ``TRITON_INTERPRET`` is explicitly set to a false value, importing this
  package raises a RuntimeError: set ``TRITON_INTERPRET=1`` before anything imports
  triton (``TRITON_INTERPRET=1 python ...``, or ``os.environ["TRITON_INTERPRET"] = "1"`` in
  the first cell of a notebook), or import this package first.

With a GPU the package leaves Triton alone and the kernels compile for the GPU.
``INTERPRETED`` tells which case applies.

Compiling for a GPU without one: with ``LAYERNORM_TRITON_COMPILE_ONLY=1`` (and no
``TRITON_INTERPRET``) the kernels are defined for Triton's compiler, so that ``aot`` can
build PTX and cubins for sm_80/sm_90 and report their resources; they cannot be launched.
``aot.compile_in_subprocess`` sets this up in a child process.
"""

import importlib.util


def _triton_installed() -> bool:
    """Whether ``triton`` can be imported, without importing it (the interpreter flag must be
    set first). An import blocker (``sys.modules["triton"] = None``, or a finder that
    raises) counts as absent."""
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False


if not _triton_installed():
    raise ImportError(
        "the Triton kernels need the triton package (Linux x86-64/aarch64 only): "
        "`pip install triton` there; on macOS or Windows (use WSL2) the rest of "
        "layernorm_tutorial works without it")

from ._interpreter import arrange_backend  # noqa: E402

INTERPRETED = arrange_backend()

from .fused import (  # noqa: E402
    FusedNormFunction,
    add_layer_norm,
    add_rms_norm,
    fused_norm_backward,
    fused_norm_forward,
    pipelined_layer_norm,
    rms_norm,
)
from .ops import (  # noqa: E402  (the backend must be arranged before triton is imported)
    MAX_BLOCK_N,
    TritonLayerNormFunction,
    layer_norm,
    layer_norm_backward,
    layer_norm_forward,
)

__all__ = [
    "INTERPRETED",
    "FusedNormFunction",
    "add_layer_norm",
    "add_rms_norm",
    "fused_norm_backward",
    "fused_norm_forward",
    "pipelined_layer_norm",
    "rms_norm",
    "MAX_BLOCK_N",
    "TritonLayerNormFunction",
    "layer_norm",
    "layer_norm_backward",
    "layer_norm_forward",
]
