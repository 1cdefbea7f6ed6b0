"""Tuning: cost model (closed forms + profile-driven predictions), Monte Carlo simulation of the decode loop,
the Optuna search space, studies with shared storage, validation runs, per-batch-size schedules and
``recommend``."""
from spectune.tune.cost import (CostModel, Prediction, speedup_sd, speedup_thm31, speedup_thm36,
                                survival_from_betas)
from spectune.tune.simulate import SimResult, Traces, simulate

__all__ = ["CostModel", "Prediction", "SimResult", "Traces", "simulate", "speedup_sd",
           "speedup_thm31", "speedup_thm36", "survival_from_betas"]
