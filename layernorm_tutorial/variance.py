"""Shim: ``layernorm_tutorial.variance`` moved to :mod:`layernorm_tutorial.variance_algorithms`.

shim: removed in the final pass.
"""

from .variance_algorithms import *  # noqa: F401,F403
from .variance_algorithms import __all__  # noqa: F401
