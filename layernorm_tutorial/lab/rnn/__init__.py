"""The RNN chapter (``book/rnn.ipynb``): recurrent cells, experiments, figures, checkers.

``cells``        Elman and LSTM cells with and without LN (and per-step BN), a sequence classifier
``experiments``  the chapter's training runs and gradient-flow measurements
``race``         the five-seed race on the digits (``python -m layernorm_tutorial.lab.rnn``)
``paths``        live-check tolerance and replication on other numerics paths
                 (``python -m layernorm_tutorial.lab.rnn.paths``)
``report``       the chapter's tables and glued values
``plots``        its figures
``exercises``    the LN-RNN cell drill
"""
