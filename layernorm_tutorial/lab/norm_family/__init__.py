"""The norm-family chapter (``book/norm_family.ipynb``): invariances, figures, checkers.

``norm_invariances``       what instance norm (style) and group norm (the batch) are blind to
``plots``                  the family's figures (also used by the ln_vs_bn chapter)
``tables``                 the family's printed tables
``group_norm_exercises``   ``check_group_norm``: the group-norm drill
``weight_norm_exercises``  ``check_weight_norm``: the weight-norm drill
"""
