"""The principles chapter (``book/principles.ipynb``): initialization sensitivity, figures,
checkers.

``init_sensitivity``  a deep MLP's sensitivity to its initial weight scale, many seeds
``ln_vs_he``          LayerNorm against He initialisation, judged by the verdict method; its
                      runs are stored by ``python -m layernorm_tutorial.lab.principles``
``plots``             its figures (also used by the backward chapter)
``exercises``         ``check_layer_norm``: the layer-norm drill, forward and backward
"""
