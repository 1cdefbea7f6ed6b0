"""What an export gives up, in numbers: predicted goodput of the config and of its nearest expressible plan.

Both come from the cost model (``spectune.tune.cost``) over the profile of the config's models: the config's
own prediction (speedup vs ``standard`` over its combination and vs the target alone) and the plan's (target-
only SD, or the target alone), at the config's batch size. A plan without a usable schedule of its own gets
one derived here: for every calibrated batch size the K in 0..gamma_max that maximises the predicted goodput
of target-only SD (K = 0: the target alone).
"""
from __future__ import annotations

import warnings
from typing import Any

from spectune.config import DecodeConfig
from spectune.errors import ConfigError
from spectune.artifacts._plan import ServePlan


MEASURED_ENGINES = ("vllm", "llamacpp")  # engines whose own latency ``spectune calibrate --engine`` measures


def find_export_profile(cfg: DecodeConfig, explicit: Any, hints: list[str], engine: str | None = None
                        ) -> tuple[Any, list[str]]:
    """(a profile holding ``cfg``'s models or None, notes): ``explicit`` (``--profile``) must hold them;
    otherwise, for an ``engine`` whose latency spectune measures, its engine profile of this machine first (the
    prediction is then the engine's); else the one finder (``spectune.profile.find_profiles``) over the config's or
    schedule's recorded profile (``hints``), then the user's and the bundled profiles: those that price the config
    itself (its combination over exactly these models at its temperature) before those that only hold its models
    (their pairs carry target-only acceptance, enough for the nearest plan), this machine's before others'."""
    from spectune.profile import ProfileHardwareWarning, find_profiles, load_profile, model_fit

    if explicit is None and engine in MEASURED_ENGINES:
        own = find_profiles(cfg.models, combine=cfg.combine, temperature=cfg.temperature, partial=True,
                            engine=engine, search=[h for h in hints if h])
        if own.best is not None:
            return load_profile(own.best), []
        prof, notes = find_export_profile(cfg, None, hints)
        return prof, notes + ([f"the predictions are spectune's runtime's, not {engine}'s: no {engine} profile of "
                               f"this machine (spectune calibrate --engine {engine} --models "
                               f"{','.join(cfg.models)})"] if prof is not None else [])

    if explicit is not None:
        prof = explicit if hasattr(explicit, "meta") else load_profile(explicit)  # a Profile or its directory
        if model_fit(prof.meta, cfg.models, cfg.combine, cfg.temperature, partial=True)[0] is None:
            raise ConfigError(f"profile '{explicit}' does not hold every model of this config "
                              f"({','.join(cfg.models)}); it has {','.join(prof.models)}")
        return prof, []
    found = find_profiles(cfg.models, combine=cfg.combine, temperature=cfg.temperature, partial=True,
                          other_machines=True, search=[h for h in hints if h])
    for d in found.paths:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ProfileHardwareWarning)
                return load_profile(d), []
        except Exception:  # noqa: BLE001 - a corrupt candidate is skipped, as a missing one
            continue
    return None, [f"no profile holds {','.join(cfg.models)}: predicted speedups need one "
                  f"(spectune calibrate --models {','.join(cfg.models)})"]


def _as_profile_names(cfg: DecodeConfig, prof: Any) -> DecodeConfig:
    from spectune.profile import profile_names

    return DecodeConfig.from_dict({**cfg.to_dict(), "models": list(profile_names(prof, cfg.models))})


def _numbers(p: Any) -> dict[str, float]:
    return {"goodput": p.goodput, "speedup_vs_standard": p.speedup_vs_standard,
            "speedup_vs_target": p.speedup_vs_target, "alpha": p.alpha, "c": p.c,
            "expected_accepted": p.expected_accepted}


def predictions(cfg: DecodeConfig, plan: ServePlan, prof: Any, workload: str | None = None) -> dict[str, Any]:
    """Predicted numbers of ``cfg`` and of ``plan`` (see the module docstring); missing ones are omitted."""
    from spectune.tune import CostModel

    cm = CostModel(prof, workload, max_new_tokens=cfg.max_new_tokens)
    pcfg = _as_profile_names(cfg, prof)
    out: dict[str, Any] = {"profile": str(getattr(prof, "path", None) or "in memory"), "batch_size": cfg.batch_size}
    try:
        out["config"] = _numbers(cm.predict(pcfg))
    except (KeyError, ValueError) as e:
        out["config_unpriced"] = str(e.args[0] if e.args else e)
    out["plan"] = _numbers(cm.predict(plan.nearest_config(pcfg)))
    return out


def derive_schedule(cfg: DecodeConfig, prof: Any, workload: str | None = None, proposer: str = "model",
                    policy: str = "fixed") -> list[tuple[int, int]]:
    """(batch size, best K) for target-only SD with the config's first model as draft, proposed by ``proposer``
    (model, or ngram+model: the lookup in front) under ``policy`` -- what the engine runs -- at every calibrated
    batch size (K = 0: the target alone predicts faster)."""
    from dataclasses import replace

    from spectune.tune import CostModel

    cm = CostModel(prof, workload, max_new_tokens=cfg.max_new_tokens)
    pcfg = _as_profile_names(cfg, prof)
    base = replace(pcfg, models=(pcfg.models[0], pcfg.models[-1]), method="sd", combine="target", gamma=(1, 1),
                   proposer=proposer, policy=policy)
    out = []
    for b in cm.batch_sizes:
        if not cm.feasible(base.models, b):
            continue
        best_k = 0
        alone = replace(base, method="standard", models=base.models[-1:], gamma=(), batch_size=b, proposer="model",
                        policy="fixed")
        best = cm.predict(alone).goodput
        for k in range(1, cm.gamma_max + 1):
            try:  # a profile without that lookup's traces cannot price it: those K stay out
                g = cm.predict(replace(base, gamma=(k, 1), batch_size=b)).goodput
            except (KeyError, ValueError):
                continue
            if g > best:
                best_k, best = k, g
        out.append((b, best_k))
    return out
