"""Evidence for (and against) the folk claims about LayerNorm and BatchNorm.

Controlled experiments on scikit-learn's digits: MLP, CNN and row-by-row RNN variants that
differ only in their normalization, a learning-rate sweep per method, several seeds. Run the
full sweep with ``python -m layernorm_tutorial.lab.evidence``; the book's evidence chapter loads
the stored results (:func:`load_results`), summarizes them (:mod:`.analysis`) and re-runs one
stored run live (:func:`rerun`) to show the file is reproducible.
"""

from layernorm_tutorial.lab.evidence.data import EvidenceData, load_evidence_data
from layernorm_tutorial.lab.evidence.experiments import (
    EXPERIMENTS,
    Experiment,
    run_sweep,
    tiny_experiments,
)
from layernorm_tutorial.lab.evidence.models import (
    CNN,
    MLP,
    NORMS,
    ChannelLayerNorm,
    RowRNN,
    build_model,
)
from layernorm_tutorial.lab.evidence.results import (
    compare_runs,
    find_runs,
    load_results,
    rerun,
    save_results,
)
from layernorm_tutorial.lab.evidence.runner import RunSpec, train_run

__all__ = ["CNN", "EXPERIMENTS", "MLP", "NORMS", "ChannelLayerNorm", "EvidenceData",
           "Experiment", "RowRNN", "RunSpec", "build_model", "compare_runs", "find_runs",
           "load_evidence_data", "load_results", "rerun", "run_sweep", "save_results",
           "tiny_experiments", "train_run"]
