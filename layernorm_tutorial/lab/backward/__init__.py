"""The backward chapter (``book/backward.ipynb``): non-standard variants and the Welford drill.

``nonstandard_layer_norm``  the source notes' variant (unbiased std, eps outside the root)
``exercises``               ``check_welford_update``: the streaming-variance drill
``gradient_checks``         central finite differences, the assumption-free gradient reference
The chapter's figures come from :mod:`layernorm_tutorial.lab.principles.plots`.
"""
