"""Tuning: cost model (closed forms + predictions by simulating the decode state machine over a profile's traces),
the Optuna search space, studies with shared storage, validation runs, per-batch-size schedules and
``recommend``. Importing it needs no torch."""
from spectune.tune.closed_forms import speedup_sd, speedup_thm31, speedup_thm36, survival_from_betas
from spectune.tune.cost import CostModel, Prediction
from spectune.tune.simulate import SimResult, Traces
from spectune.tune.space import SearchSpace

__all__ = ["CostModel", "Prediction", "SearchSpace", "SimResult", "Traces", "speedup_sd", "speedup_thm31",
           "speedup_thm36", "survival_from_betas"]
