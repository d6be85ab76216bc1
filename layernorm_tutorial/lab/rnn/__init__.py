"""The RNN chapter (``book/rnn.ipynb``): recurrent cells, experiments, figures, checkers.

``cells``        Elman and LSTM cells with and without LN (and per-step BN), a sequence classifier
``experiments``  the chapter's training runs and gradient-flow measurements
``plots``        its figures
``exercises``    the LN-RNN cell drill
"""
