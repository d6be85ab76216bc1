"""layernorm_tutorial: Layer Normalization and its family, built from elementary tensor ops.

The package has three rooms:

the library (this top level)
    what a reader imports and trusts. ``functional`` (stateless forward functions with
    torch.nn.functional signatures), ``autograd`` (hand-derived backward passes), ``nn``
    (thin modules with torch's arguments and state_dict keys), ``numpy_ref`` (the NumPy
    ``(out, cache)`` reference), ``running_stats``, ``weight_norm``, ``variance_algorithms``,
    ``axes``, ``distributed`` (synchronized batch norm), ``triton_kernels`` (the fused kernel),
    ``bench`` and ``roofline`` (measuring it). The library imports nothing from the other rooms.
:mod:`layernorm_tutorial.lab`
    the experiments, figures and exercise checkers behind the chapters, one subpackage per
    chapter. It imports the library, never publishing.
:mod:`layernorm_tutorial.publishing`
    the tools that build the book, its Chinese edition and the flashcard deck.

``triton_kernels`` is not imported here, because importing it may switch Triton to its CPU
interpreter.
"""

from . import autograd, functional, nn, numpy_ref, running_stats

__all__ = ["autograd", "functional", "nn", "numpy_ref", "running_stats"]
__version__ = "0.1.0"
