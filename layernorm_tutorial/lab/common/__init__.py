"""Pieces several chapters share: data and small models, the figure factory, formatting.

``training``     the digits data split and the small MLP used across chapters
``transformer``  the toy Transformer encoder (pre-/post-LN, LN or RMSNorm)
``figure``       ``new_figure``: a ``matplotlib.figure.Figure`` that never touches pyplot state
``checking``     what the exercise checkers share: comparing a reader's answer, naming the mistake
``formatting``   ``fmt``: numbers for prose and tables
``verdict``      the book's one verdict method: paired seeds, 95% t interval, three words
"""
