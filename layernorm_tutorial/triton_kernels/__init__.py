"""A fused LayerNorm in Triton: forward and backward kernels behind an autograd.Function.

``layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5)`` has the semantics of
``torch.nn.functional.layer_norm`` for float32, float16 and bfloat16 inputs.

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

from ._interpreter import arrange_backend

INTERPRETED = arrange_backend()

from .ops import (  # noqa: E402  (the backend must be arranged before triton is imported)
    MAX_BLOCK_N,
    TritonLayerNormFunction,
    layer_norm,
    layer_norm_backward,
    layer_norm_forward,
)

__all__ = [
    "INTERPRETED",
    "MAX_BLOCK_N",
    "TritonLayerNormFunction",
    "layer_norm",
    "layer_norm_backward",
    "layer_norm_forward",
]
