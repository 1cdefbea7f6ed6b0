"""The search: objectives and constraints over the cost model, the best trials, the per-batch-size schedule.

* ``Tuner(cost, space, ...)``: the Optuna objective. One objective (maximise predicted goodput) or two
  (goodput up, per-token latency down: a Pareto front with NSGA-II). Constraints (Optuna ``constraints_func``,
  feasible when <= 0): the models fit the device memory the profile recorded and no model ran out of memory at
  that batch size during calibration; optionally latency per token <= ``max_latency``.
* Every trial stores its config (``config`` user attribute, spectune-native JSON) and its prediction, so a
  study in SQLite / PostgreSQL / MySQL is self-describing and opens in optuna-dashboard. Where studies are kept
  and how trials reach them: ``spectune.tune.study``; measuring the best in the runtime: ``spectune.tune.validation``.
* ``schedule(...)``: the best (method, proposer, gamma) per calibrated batch size, "standard" where nothing beats it.
"""
from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass
from typing import Any, Sequence

import optuna

from spectune.config import DecodeConfig
from spectune.tune.cost import CostModel, Prediction
from spectune.tune.space import SearchSpace
from spectune.tune.study import WORKER_ATTR, WriteBehind, push_trials

def _constraints(trial: optuna.trial.FrozenTrial) -> Sequence[float]:
    return trial.user_attrs.get("constraints", ())  # absent: feasible (see Tuner.__call__)



@dataclass
class Tuner:
    """The objective over a cost model and a search space (see the module docstring)."""

    cost: CostModel
    space: SearchSpace
    pareto: bool = False
    max_latency: float | None = None  # seconds per token of one request
    seed: int = 0

    @property
    def directions(self) -> list[str]:
        return ["maximize", "minimize"] if self.pareto else ["maximize"]

    def sampler(self) -> optuna.samplers.BaseSampler:
        # memory feasibility is enforced by the space (batch sizes the full model set fits); the sampler only
        # needs constraints for a latency bound (and they cost it O(trials) per suggestion)
        kw: dict[str, Any] = ({} if _HAS_SET_CONSTRAINT else {"constraints_func": _constraints}) \
            if self.max_latency is not None else {}
        if self.pareto:
            return optuna.samplers.NSGAIISampler(seed=self.seed, **kw)
        return optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=20, **kw)

    def evaluate(self, cfg: DecodeConfig) -> tuple[Prediction, list[float]]:
        pred = self.cost.predict(cfg)
        cons = [0.0 if self.cost.feasible(cfg.models, cfg.batch_size) else 1.0]
        if self.max_latency is not None:
            cons.append(pred.latency_per_token - self.max_latency)
        return pred, cons

    CONSTRAINT_NAMES = ("memory", "max_latency")

    def __call__(self, trial: optuna.Trial) -> Any:
        cfg = self.space(trial)
        pred, cons = self.evaluate(cfg)
        trial.set_user_attr("config", cfg.to_dict())
        trial.set_user_attr("prediction", _pred_attrs(pred))
        if self.max_latency is not None or any(c > 0 for c in cons):  # a row per trial only where it says
            trial.set_user_attr("constraints", cons)  # something (the space offers only batch sizes that fit)
            if _HAS_SET_CONSTRAINT:
                for name, v in zip(self.CONSTRAINT_NAMES, cons):
                    trial.set_constraint(name, v)
        return (pred.goodput, pred.latency_per_token) if self.pareto else pred.goodput

    def optimize(self, study: optuna.Study, n_trials: int, timeout: float | None = None,
                 sync_every: int = 100, storage: str | None = None) -> list[int]:
        """Run ``n_trials`` trials into ``study``; returns the study's numbers of the trials this call added.

        The sampler runs on an in-memory mirror of the study (a storage round trip per suggestion would cost more
        than the whole prediction); every ``sync_every`` trials the new ones go to the shared storage
        (``push_trials``: Optuna's public ``Study.add_trials``) and the trials other workers wrote meanwhile are
        pulled into the mirror, so every worker samples from all of them. ``storage``: the study's URL; where it
        names a database other processes can open and a second CPU is free, the writes run behind the search
        in a second process (``WriteBehind``).
        """
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        local = optuna.create_study(directions=self.directions, sampler=self.sampler())
        token = uuid.uuid4().hex  # tags this call's trials in the shared study
        writer = WriteBehind(storage, study.study_name, self.directions) if WriteBehind.helps(storage) else None
        seen: set[int] = set()
        added: list[int] = []

        def pull() -> None:  # every trial not seen yet: another worker's goes into the mirror
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
                if t.number not in seen:
                    seen.add(t.number)
                    if t.user_attrs.get(WORKER_ATTR) != token:
                        local.add_trial(t)

        try:
            pull()
            t_end = None if timeout is None else time.monotonic() + timeout
            done = 0
            while done < n_trials and (t_end is None or time.monotonic() < t_end):
                batch = []
                for _ in range(min(sync_every, n_trials - done)):
                    trial = local.ask()
                    batch.append(local.tell(trial, self(trial)))
                    done += 1
                    if t_end is not None and time.monotonic() >= t_end:
                        break
                added += writer.push(batch, token) if writer else push_trials(study, batch, token)
                pull()
        finally:
            added += writer.close() if writer else []
        return sorted(added)


_HAS_SET_CONSTRAINT = hasattr(optuna.trial.Trial, "set_constraint")


def _pred_attrs(p: Prediction) -> dict[str, Any]:
    d = p.to_dict()
    out = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items() if k != "extra"}
    out.update({k: v for k, v in p.extra.items()})
    return out


def feasible_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    ok = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
          if "config" in t.user_attrs and all(c <= 0 for c in _constraints(t))]
    return ok


def top_trials(study: optuna.Study, n: int) -> list[optuna.trial.FrozenTrial]:
    """The n best feasible trials by predicted goodput, one per distinct configuration."""
    seen, out = set(), []
    for t in sorted(feasible_trials(study), key=lambda t: -t.values[0]):
        key = _cfg_key(t.user_attrs["config"])
        if key in seen:
            continue
        seen.add(key)
        out.append(t)
        if len(out) >= n:
            break
    return out


def pareto_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Feasible trials not dominated in (goodput up, latency down), sorted by goodput."""
    ts = feasible_trials(study)
    pts = [(t.user_attrs["prediction"]["goodput"], t.user_attrs["prediction"]["latency_per_token"], t) for t in ts]
    front = [p for p in pts if not any(q[0] >= p[0] and q[1] <= p[1] and (q[0] > p[0] or q[1] < p[1]) for q in pts)]
    seen, out = set(), []
    for _, _, t in sorted(front, key=lambda p: -p[0]):
        key = _cfg_key(t.user_attrs["config"])
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def _cfg_key(d: dict[str, Any]) -> tuple:
    """What makes two trials' configurations distinct (a config dict omits the default proposer and policy)."""
    return (tuple(d["models"]), d["method"], d["combine"], tuple(d["gamma"]), d["batch_size"],
            d.get("proposer", "model"), d.get("policy", "fixed"))


# ---------------------------------------------------------------------------------------------- schedule


@dataclass
class ScheduleEntry:
    batch_size: int
    config: DecodeConfig
    prediction: Prediction
    standard: Prediction

    def to_dict(self) -> dict[str, Any]:
        c = self.config
        return {"batch_size": self.batch_size, "method": c.method, "models": list(c.models), "combine": c.combine,
                "gamma": list(c.gamma), "proposer": c.proposer, "policy": c.policy, "speculate": c.method != "standard",
                "predicted_goodput": self.prediction.goodput,
                "predicted_latency_per_token": self.prediction.latency_per_token,
                "predicted_speedup_vs_standard": self.prediction.goodput / self.standard.goodput}


def schedule(tuner: Tuner, study: optuna.Study, candidates: int = 64) -> list[ScheduleEntry]:
    """For every calibrated batch size, the best of: ``standard`` and the ``candidates`` best distinct
    (method, models, gamma, proposer, policy) of the study, each re-predicted at that batch size (memory
    constraint applied): the schedule may switch method, proposer or policy with the batch size."""
    from dataclasses import replace

    seen, shapes = set(), []
    for t in sorted(feasible_trials(study), key=lambda t: -t.values[0]):
        d = dict(t.user_attrs["config"])
        key = (tuple(d["models"]), d["method"], d["combine"], tuple(d["gamma"]), d.get("proposer"), d.get("policy"))
        if key not in seen and d["method"] != "standard":
            seen.add(key)
            shapes.append(DecodeConfig.from_dict(d))
        if len(shapes) >= candidates:
            break
    out = []
    sp = tuner.space
    for b in sp.batch_sizes:
        std_cfg = sp.config("standard", sp.models[0], None, b)
        if not tuner.cost.feasible(std_cfg.models, b):
            continue
        std = tuner.cost.predict(std_cfg)
        best_cfg, best = std_cfg, std
        for cfg in shapes:
            c = replace(cfg, batch_size=b)
            if not tuner.cost.feasible(c.models, b):
                continue
            p, cons = tuner.evaluate(c)
            if all(x <= 0 for x in cons) and p.goodput > best.goodput:
                best_cfg, best = c, p
        out.append(ScheduleEntry(b, best_cfg, best, std))
    return out
