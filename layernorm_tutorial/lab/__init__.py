"""The lab: the experiments, figures and exercise checkers behind the book's chapters.

One subpackage per chapter, so that everything a chapter uses sits in one folder:
``principles``, ``backward``, ``norm_family``, ``ln_vs_bn``, ``rnn``, ``residual``,
``evidence``, ``gpu_kernel`` and ``interview``; each holds the chapter's experiments, its
``plots`` module (every helper returns a ``matplotlib.figure.Figure``) and its ``exercises``
checkers. ``common`` holds what several chapters share: the digits data and the small MLP
(``training``), the toy Transformer (``transformer``), the figure factory (``figure``), the
checkers' diagnosis helpers (``checking``) and number formatting (``formatting``).

Rules (enforced by import-linter, ``lint-imports``): the lab may import the library (the
top-level modules of :mod:`layernorm_tutorial`, ``triton_kernels``, ``distributed``) and
other lab subpackages; it never imports :mod:`layernorm_tutorial.publishing`. The library
never imports the lab.
"""
