"""Confirmatory runs: each registered claim judged again on fresh seeds (issue 42, item 2).

The plans live in the claims registry (:data:`~layernorm_tutorial.lab.common.claims.
CONFIRMATIONS`, committed before any of their data); :mod:`.runs` trains them and writes one
results file per plan (``book/data/*_confirmatory.json``, never the earlier file);
:mod:`.verdicts` judges them and returns each confirmatory verdict with the earlier
(exploratory) one beside it. ``python -m layernorm_tutorial.lab.confirmatory PLAN`` runs a plan.
"""
