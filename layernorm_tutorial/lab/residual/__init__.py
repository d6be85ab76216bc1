"""The residual chapter (``book/residual.ipynb``): pre-/post-LN stacks, warm-up, traces.

``experiments``  signal and gradient propagation through deep pre-/post-LN stacks
``warmup``       the first training steps of post-LN and pre-LN Transformers
``block_trace``  the order in which a block's sub-layers run, recorded with hooks
``plots``        its figures
``exercises``    the residual-block drill
"""
