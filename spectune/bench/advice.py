"""``validate_advice``: is spectune's advice right? Calibrate on the workload's calibration prompts (in
``<out>/profile``, at the grid's batch sizes, right before measuring, so the machine is in the same state; an
existing finished one is reused, an interrupted one resumed; ``profile=`` uses a given one instead), recommend a
configuration per batch size, then measure the whole grid plus the recommendations on held-out prompts and
compare:

* regret = best measured goodput in the grid / measured goodput of the recommended configuration (1 = the
  advice was the best measured choice), per batch size;
* MAPE = mean |predicted - measured| / measured goodput over every spectune run of the grid; and the same for
  the speedup over ``standard`` (each side over its own standard run), which the machine's drift in speed
  between calibration and measurement cancels out of;

Predicted vs measured compares like with like: the cost model prices the decoding phase, so the measured side
is the decode goodput (output tokens over the run's time without its prompt-prefill forwards). Regret is
judged on the same decode goodput.
* Spearman rank correlation of predicted vs measured goodput, per batch size (ranking is what the search
  needs) and pooled.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from spectune.bench.grid import BenchSpec, Run, canonical
from spectune.bench.runner import BenchResult, bench


@dataclass
class AdviceResult:
    bench: BenchResult
    profile_path: Path
    recommended: dict[int, str]  # batch size -> run key of the recommended configuration
    per_batch: pd.DataFrame  # batch_size, regret, mape, spearman, recommended, best
    mape: float  # of goodput
    mape_speedup: float  # of the speedup over standard (drift of the machine's speed cancels)
    spearman: float
    regret: float  # the worst over batch sizes
    files: list[Path] = field(default_factory=list)


def spearman(x: pd.Series, y: pd.Series) -> float:
    """Rank correlation (average ranks for ties), NaN for fewer than 3 points or a constant series."""
    if len(x) < 3:
        return float("nan")
    rx, ry = x.rank(), y.rank()
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(rx.corr(ry))


def validate_advice(spec: BenchSpec, *, workload: str = "mix", profile: str | os.PathLike | None = None,
                    trials: int = 300, prompts: int = 2, repeats: int = 3, seed: int = 0,
                    out: str | os.PathLike | None = None, calibrate_kwargs: dict[str, Any] | None = None,
                    force: bool = False, say: Callable[[str], None] = lambda s: None) -> AdviceResult:
    from spectune.config import DecodeConfig
    from spectune.profile import load_profile
    from spectune.tune.cost import CostModel
    from spectune.tune.recommend import profile_names, recommend

    from spectune.calibrate import calibrate

    from spectune.bench.runner import claim_outputs

    out_dir = Path(out).expanduser() if out else Path("spectune-bench")
    claim_outputs(out_dir, force, ("rows.csv", "summary.csv", "advice.csv", "predicted_vs_measured.csv"))
    temperature = spec.temperatures[0]
    # 1. the profile: calibrated here and now unless given
    prof_path = profile
    if prof_path is None:
        prof_path = out_dir / "profile"
        if not (prof_path / "profile.json").is_file():
            say(f"calibrating {','.join(spec.models)} on the calibration prompts of {workload} into {prof_path}")
            kw = {"batch_sizes": spec.batch_sizes, **(calibrate_kwargs or {})}
            calibrate(list(spec.models), combine=spec.combine, workload=workload, temperature=temperature,
                      top_k=spec.top_k, top_p=spec.top_p, out=prof_path, force=force,
                      resume=prof_path.with_name(prof_path.name + ".partial").exists(), **kw)
    # 2. one recommendation per batch size
    recs = {}
    for b in spec.batch_sizes:
        rec = recommend(list(spec.models), combine=spec.combine, workload=workload, batch_size=b, n_trials=trials,
                        max_new_tokens=spec.max_new_tokens, temperature=temperature, profile=prof_path,
                        calibrate_kwargs=calibrate_kwargs, out=out_dir / "advice" / f"b{b}", seed=seed, force=force,
                        say=say)
        prof_path = rec.profile_path
        names = dict(zip(profile_names(load_profile(prof_path, check_hardware=False), spec.models), spec.models))
        cfg = rec.chosen.config
        cfg = DecodeConfig.from_dict({**cfg.to_dict(), "models": [names.get(m, m) for m in cfg.models],
                                      "top_k": spec.top_k, "top_p": spec.top_p})
        recs[b] = cfg = canonical(cfg)
        say(f"b={b}: recommended {cfg.method} gamma={list(cfg.gamma)} over {','.join(cfg.models)}")
    prof = load_profile(prof_path, check_hardware=False)
    # 3. the grid plus the recommendations, measured on held-out prompts
    spec = replace(spec, extra=list(spec.extra) + list(recs.values()))
    res = bench(spec, workload=workload, prompts=prompts, repeats=repeats, seed=seed, out=out_dir, resume=True,
                profile=prof, force=force, say=say)
    # 4. predicted goodput of every spectune run
    cm = CostModel(prof, workload)
    to_prof = dict(zip(spec.models, profile_names(prof, spec.models)))
    s = res.summary[res.summary["kind"] == "spectune"].copy()

    def predicted(row: Any) -> float:
        cfg = DecodeConfig(models=tuple(to_prof[m] for m in row.models.split(",")), method=row.method,
                           combine=row.combine, gamma=tuple(int(x) for x in str(row.gamma).split(",")),
                           temperature=row.temperature, batch_size=int(row.batch_size))
        try:
            return cm.predict(cfg).goodput
        except (KeyError, ValueError):
            return float("nan")

    s["predicted_goodput"] = [predicted(r) for r in s.itertuples()]
    s = s[s["predicted_goodput"].map(math.isfinite)]
    s["abs_pct_error"] = (s["predicted_goodput"] - s["decode_goodput"]).abs() / s["decode_goodput"]
    std_keys = {(r.config.batch_size, r.config.temperature): r.key for r in spec.runs() if spec.is_standard(r)}
    std = s.set_index("key")
    ref = [std.loc[std_keys[(b, t)]] for b, t in zip(s["batch_size"], s["temperature"])]
    s["measured_speedup"] = s["decode_goodput"].to_numpy() / [r["decode_goodput"] for r in ref]
    s["predicted_speedup"] = s["predicted_goodput"].to_numpy() / [r["predicted_goodput"] for r in ref]
    s["abs_pct_error_speedup"] = (s["predicted_speedup"] - s["measured_speedup"]).abs() / s["measured_speedup"]
    rec_keys = {b: Run("spectune", c).key for b, c in recs.items()}
    per = []
    for b, g in s.groupby("batch_size"):
        rec_row = g[g["key"] == rec_keys[b]]
        best = g.loc[g["decode_goodput"].idxmax()]
        got = float(rec_row["decode_goodput"].iloc[0]) if len(rec_row) else float("nan")
        per.append(dict(batch_size=int(b), recommended=rec_row["label"].iloc[0] if len(rec_row) else "",
                        recommended_goodput=got, best=best["label"], best_goodput=float(best["decode_goodput"]),
                        regret=float(best["decode_goodput"]) / got, mape=float(g["abs_pct_error"].mean()),
                        mape_speedup=float(g["abs_pct_error_speedup"].mean()),
                        spearman=spearman(g["predicted_goodput"], g["decode_goodput"]), configs=len(g)))
    per_df = pd.DataFrame(per)
    result = AdviceResult(res, Path(prof_path), rec_keys, per_df, mape=float(s["abs_pct_error"].mean()),
                          mape_speedup=float(s["abs_pct_error_speedup"].mean()),
                          spearman=spearman(s["predicted_goodput"], s["decode_goodput"]),
                          regret=float(per_df["regret"].max()) if len(per_df) else float("nan"))
    from spectune.config import write_text_atomic

    result.files = [write_text_atomic(out_dir / "advice.csv", per_df.to_csv(index=False)),
                    write_text_atomic(out_dir / "predicted_vs_measured.csv", s.to_csv(index=False))]
    return result
