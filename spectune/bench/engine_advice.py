"""``bench --engine vllm --validate-advice``: is engine-priced advice true in the engine?

For each workload and batch size, ``recommend --engine`` (priced on the engine profile, nothing measured) picks a
configuration; the pick is measured in the engine in the same run as the engine's own grid (the target alone, the
draft at each K, each lookup at each K). Reported per workload and batch size: the pick, the best of the grid,
regret = best measured / pick measured (1.0: the pick is the measured best), the MAPE of the predicted engine
goodput over the grid and the pick, and the Spearman rank correlation of predicted vs measured.

"Measured" is the fastest of a configuration's repeats, the quiet host's speed, as ``calibrate --engine`` prices
(the host's interference only slows a run: on the Emerald Rapids guest the target alone's three repeats on one
prompt set ran 18.7 / 18.9 / 25.2 tok/s, its fastest repeat 25.2-26.4 on all three sets). The regret of the
repeats' medians is reported beside it (``regret_median``).
"""
from __future__ import annotations

import tempfile
from dataclasses import replace
from typing import Any, Callable

import numpy as np
import pandas as pd

from spectune.bench.engine_runs import EngineBenchSpec, label, measure_in_engine
from spectune.bench.runner import _write_csv
from spectune.tune import CostModel

NAN = float("nan")


def engine_picks(spec: EngineBenchSpec, engine: Any, profile: Any, trials: int = 300,
                 say: Callable[[str], None] = lambda s: None, validate: int = 0) -> dict[tuple[str, int], Any]:
    """(workload, batch size) -> ``recommend --engine``'s pick. ``validate`` = 0: the predicted best, nothing
    measured; N > 0: ``recommend --engine --validate N``, the N best (the best of each kind first) and the target
    alone measured in the engine, the pick the measured best. They are measured on the workload's calibration
    prompts, the grid on its held-out ones: the pick is judged on prompts it was not chosen on."""
    from spectune.tune.recommend import EngineAdvice, recommend

    picks = {}
    for w in spec.workloads:
        for b in spec.batch_sizes:
            measure = _on_calibration_prompts(engine, w) if validate else None
            with tempfile.TemporaryDirectory() as tmp:
                rec = recommend(list(spec.models), workload=w, batch_size=b, profile=profile, n_trials=trials,
                                resamples=0, out=tmp, max_new_tokens=spec.max_new_tokens, validate_n=validate,
                                validate_prompts=max(spec.prompts, b), engine=EngineAdvice(engine, measure), say=say)
            picks[(w, b)] = replace(rec.chosen.config, batch_size=b)
            say(f"recommend --engine {engine.name}{f' --validate {validate}' if validate else ''} on {w} at b={b}: "
                f"{label(picks[(w, b)])}")
    return picks


def _on_calibration_prompts(engine: Any, workload: str) -> Callable[..., list[float]]:
    """``EngineAdvice.measure`` on as many of ``workload``'s calibration prompts as recommend asks held-out ones."""
    from spectune.decoder import encode_workload
    from spectune.models import load_tokenizer

    def measure(configs: Any, prompts: Any, say: Callable[[str], None]) -> list[float]:
        ids = encode_workload(load_tokenizer(configs[0].models[-1]), workload, "calibration", n=len(prompts))
        return measure_in_engine(configs, engine, ids, say=say)

    return measure


def advice_table(rows: list[dict[str, Any]], picks: dict[tuple[str, int], Any], configs: list[Any], profile: Any,
                 engine: str) -> pd.DataFrame:
    """One row per (workload, batch size): the pick and the measured best of the engine's rows, regret, MAPE,
    Spearman (see the module docstring)."""
    from spectune.profile import load_profile

    prof = profile if hasattr(profile, "meta") else load_profile(profile, check_hardware=False)
    df = pd.DataFrame(rows)
    runs = df[df["backend"] == engine].groupby(["workload", "label", "batch_size"])["decode_goodput"]
    fast, med = runs.max(), runs.median()
    by_label = {(label(c), c.batch_size): c for c in configs}
    out = []
    for (w, b), pick in picks.items():
        cm = CostModel(prof, w, max_new_tokens=pick.max_new_tokens)
        meas, mid = (m.xs((w, b), level=("workload", "batch_size")) for m in (fast, med))
        pred = pd.Series({lab: _predict(cm, by_label.get((lab, b))) for lab in meas.index})
        ok = pred.notna()
        err = ((pred[ok] - meas[ok]) / meas[ok]).abs()
        best = meas.idxmax()
        out.append({"workload": w, "batch_size": b, "pick": label(pick), "pick_measured": meas.get(label(pick), NAN),
                    "pick_predicted": pred.get(label(pick), NAN), "best": best, "best_measured": meas[best],
                    "regret": meas[best] / meas.get(label(pick), NAN),
                    "regret_median": mid.max() / mid.get(label(pick), NAN), "mape": float(err.mean()),
                    "spearman": float(pred[ok].rank().corr(meas[ok].rank())), "configs": int(ok.sum())})
    return pd.DataFrame(out)


def _predict(cm: Any, cfg: Any) -> float:
    if cfg is None:
        return NAN
    try:
        return float(cm.predict(cfg).goodput)
    except (KeyError, ValueError):
        return NAN


def save(table: pd.DataFrame, path: Any) -> Any:
    """``table`` as CSV at ``path``, atomically (bench's writer)."""
    return _write_csv(table, path)


def summary_line(table: pd.DataFrame) -> str:
    worst = table["regret"].max()
    return (f"engine advice: regret {worst:.3f} at worst ({(table['regret'] <= 1.05).sum()}/{len(table)} within "
            f"1.05; of medians {table['regret_median'].max():.3f}, {(table['regret_median'] <= 1.05).sum()}/"
            f"{len(table)}), MAPE {np.nanmean(table['mape']):.1%} mean, Spearman {np.nanmean(table['spearman']):.2f} "
            "mean (fastest repeats)")
