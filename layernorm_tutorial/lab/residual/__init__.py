"""The residual chapter (``book/residual.ipynb``): pre-/post-LN stacks, warm-up, traces.

``experiments``  signal and gradient propagation through deep pre-/post-LN stacks
``warmup``       the first training steps of post-LN and pre-LN Transformers
``sweep``        the five-seed runs (``python -m layernorm_tutorial.lab.residual``)
``paths``        live-check tolerance and replication on other numerics paths
                 (``python -m layernorm_tutorial.lab.residual.paths``)
``report``       the chapter's tables and glued values
``block_trace``  the order in which a block's sub-layers run, recorded with hooks
``plots``        its figures
``exercises``    the residual-block drill
"""
