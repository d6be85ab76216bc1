"""Shim: ``layernorm_tutorial.variants`` moved to :mod:`layernorm_tutorial.nonstandard_layer_norm`.

shim: removed in the final pass.
"""

from .nonstandard_layer_norm import *  # noqa: F401,F403
from .nonstandard_layer_norm import __all__  # noqa: F401
