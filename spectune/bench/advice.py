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
* With the HF rows (``spec.hf``): the batch-1 recommendation executed by HF transformers as ``spectune export
  --engine hf`` writes it (target-only SD with its K, or plain ``generate``; measured beside the grid), its regret
  among every HF run at batch 1 (HF's defaults included), and the MAPE over the fixed-K HF rows of spectune's
  cost model and of the same priced with HF's own step (``hf_price.py``) -- against HF's decode goodput.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from spectune.artifacts import plan_for
from spectune.artifacts.hf import hf_k
from spectune.bench.grid import BenchSpec, Run, canonical, is_adaptive_key
from spectune.bench.hf_price import predict_hf_goodput
from spectune.bench.runner import BenchResult, RunSettings, bench, claim_outputs
from spectune.config import DecodeConfig
from spectune.tune.cost import CostModel

NAN = float("nan")


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
    # the recommendation executed by HF transformers (its hf export, batch 1; NaN without HF rows)
    hf_regret: float = float("nan")  # best measured HF run / the HF-executed recommendation
    hf_mape: float = float("nan")  # spectune's cost model vs HF's measured decode goodput, fixed-K HF rows
    hf_mape_priced: float = float("nan")  # the same with HF's own step priced (hf_price.py)
    hf_rows: pd.DataFrame | None = None


def spearman(x: pd.Series, y: pd.Series) -> float:
    """Rank correlation (average ranks for ties), NaN for fewer than 3 points or a constant series."""
    if len(x) < 3:
        return float("nan")
    rx, ry = x.rank(), y.rank()
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(rx.corr(ry))


def validate_advice(spec: BenchSpec, run: RunSettings | None = None, *, profile: str | os.PathLike | None = None,
                    trials: int = 300, out: str | os.PathLike | None = None,
                    calibrate_kwargs: dict[str, Any] | None = None, force: bool = False,
                    say: Callable[[str], None] = lambda s: None, **fields: Any) -> AdviceResult:
    """Calibrate (unless ``profile``), recommend at each of the grid's batch sizes, and measure the picks among the
    grid as ``run`` says (:class:`RunSettings`, its fields by keyword over it): see the module docstring."""
    from spectune.config import check_device, write_text_atomic
    from spectune.profile import load_profile, profile_names

    run = RunSettings.given(run, fields)
    workload, dtype, runtime, device = run.workload, run.dtype, run.runtime, run.device
    out_dir = Path(out).expanduser() if out else Path("spectune-bench")
    check_device(device)  # before anything is calibrated
    # the profile prices the runtime and device measured
    calibrate_kwargs = {"runtime": runtime, "device": device, **(calibrate_kwargs or {})}
    claim_outputs(out_dir, force, ("rows.csv", "summary.csv", "advice.csv", "predicted_vs_measured.csv",
                                   "hf_predicted_vs_measured.csv"))
    # 1. the profile: calibrated here and now unless given; 2. one recommendation per batch size
    prof_path = profile if profile is not None else _calibrated(spec, workload, out_dir, calibrate_kwargs, dtype, say,
                                                                         force)
    recs, prof_path, robust = _recommendations(spec, run, prof_path, trials, out_dir, say, force)
    prof = load_profile(prof_path, check_hardware=False)
    # 3. the grid plus the recommendations (and their HF execution), measured on held-out prompts
    hf_run = _hf_executed(spec, recs)
    if hf_run is not None and hf_run.kind == "hf-assisted":
        spec = replace(spec, hf_gammas=tuple(spec.hf_gammas) + (hf_run.config.gamma[0],))
    spec = replace(spec, extra=list(spec.extra) + list(recs.values()))
    res = bench(spec, run, out=out_dir, resume=True, profile=prof, force=force, say=say)
    # 4. predicted goodput of every spectune run (and of the HF rows), per batch size
    cm = CostModel(prof, workload, max_new_tokens=spec.max_new_tokens)
    to_prof = dict(zip(spec.models, profile_names(prof, spec.models)))
    s = _predicted_vs_measured(res.summary, spec, cm, to_prof)
    rec_keys = {b: Run("spectune", c).key for b, c in recs.items()}
    hf_rows, hf = _hf_validation(res.summary, hf_run, cm, to_prof, spec.models)
    per = [dict(p, recommended_p_near_best=robust.get(p["batch_size"], NAN)) for p in _per_batch(s, rec_keys)]
    per_df = pd.DataFrame([dict(p, **hf) if p["batch_size"] == 1 else p for p in per])
    result = AdviceResult(res, Path(prof_path), rec_keys, per_df, mape=float(s["abs_pct_error"].mean()),
                          mape_speedup=float(s["abs_pct_error_speedup"].mean()),
                          spearman=spearman(s["predicted_goodput"], s["decode_goodput"]),
                          regret=float(per_df["regret"].max()) if len(per_df) else NAN,
                          hf_regret=hf.get("hf_regret", NAN), hf_mape=hf.get("hf_mape", NAN),
                          hf_mape_priced=hf.get("hf_mape_priced", NAN), hf_rows=hf_rows)
    result.files = [write_text_atomic(out_dir / "advice.csv", per_df.to_csv(index=False)),
                    write_text_atomic(out_dir / "predicted_vs_measured.csv", s.to_csv(index=False))]
    if hf_rows is not None:
        result.files.append(write_text_atomic(out_dir / "hf_predicted_vs_measured.csv", hf_rows.to_csv(index=False)))
    return result


def _calibrated(spec: BenchSpec, workload: str, out_dir: Path, calibrate_kwargs: dict[str, Any] | None, dtype: str,
                say: Callable[[str], None], force: bool = False) -> Path:
    """``<out>/profile``, calibrated at the grid's batch sizes unless a finished one is there (an interrupted
    one is resumed)."""
    from spectune.calibration import calibrate

    prof_path = out_dir / "profile"
    if not (prof_path / "profile.json").is_file():
        say(f"calibrating {','.join(spec.models)} on the calibration prompts of {workload} into {prof_path}")
        kw = {"batch_sizes": spec.batch_sizes, **(calibrate_kwargs or {})}
        calibrate(list(spec.models), combine=spec.combine, workload=workload, temperature=spec.temperatures[0],
                  top_k=spec.top_k, top_p=spec.top_p, out=prof_path, dtype=dtype, force=force,
                  resume=prof_path.with_name(prof_path.name + ".partial").exists(), **kw)
    return prof_path


def _recommendations(spec: BenchSpec, run: RunSettings, prof_path: Any, trials: int, out_dir: Path,
                     say: Callable[[str], None], force: bool = False
                     ) -> tuple[dict[int, DecodeConfig], Any, dict[int, float]]:
    """({batch size: the recommended config over the grid's model names}, the profile recommend used, {batch size:
    how often the pick is within 5 % of the best of recommend's top configurations over resampled calibration
    prompts})."""
    from spectune.profile import load_profile, profile_names
    from spectune.tune.recommend import recommend

    recs, robust = {}, {}
    for b in spec.batch_sizes:
        rec = recommend(list(spec.models), combine=spec.combine, workload=run.workload, batch_size=b,
                        n_trials=trials, max_new_tokens=spec.max_new_tokens, temperature=spec.temperatures[0],
                        profile=prof_path, out=out_dir / "advice" / f"b{b}", seed=run.seed, dtype=run.dtype,
                        device=run.device, runtime=run.runtime, force=force, say=say)
        prof_path = rec.profile_path
        names = dict(zip(profile_names(load_profile(prof_path, check_hardware=False), spec.models), spec.models))
        cfg = rec.chosen.config
        cfg = DecodeConfig.from_dict({**cfg.to_dict(), "models": [names.get(m, m) for m in cfg.models],
                                      "top_k": spec.top_k, "top_p": spec.top_p})
        recs[b] = cfg = canonical(cfg)
        robust[b] = (rec.chosen.robustness or {}).get("p_near_best", NAN)
        near = f" (near the best in {robust[b]:.0%} of the resampled calibrations)" if math.isfinite(robust[b]) else ""
        say(f"b={b}: recommended {Run('spectune', cfg).label} over {','.join(cfg.models)}{near}")
    return recs, prof_path, robust


def _predicted_vs_measured(summary: pd.DataFrame, spec: BenchSpec, cm: Any, to_prof: dict[str, str]
                           ) -> pd.DataFrame:
    """The spectune runs the profile prices, with predicted goodput and speedup over standard and their errors."""
    s = summary[summary["kind"] == "spectune"].copy()

    def predicted(row: Any) -> float:
        cfg = DecodeConfig(models=tuple(to_prof[m] for m in row.models.split(",")), method=row.method,
                           combine=row.combine, gamma=tuple(int(x) for x in str(row.gamma).split(",")),
                           temperature=row.temperature, batch_size=int(row.batch_size), proposer=row.proposer,
                           policy=row.policy)
        try:
            return cm.predict(cfg).goodput
        except (KeyError, ValueError):
            return NAN

    s["predicted_goodput"] = [predicted(r) for r in s.itertuples()]
    s = s[s["predicted_goodput"].map(math.isfinite)]
    s["abs_pct_error"] = (s["predicted_goodput"] - s["decode_goodput"]).abs() / s["decode_goodput"]
    std_keys = {(r.config.batch_size, r.config.temperature): r.key for r in spec.runs() if spec.is_standard(r)}
    std = s.set_index("key")
    ref = [std.loc[std_keys[(b, t)]] for b, t in zip(s["batch_size"], s["temperature"])]
    s["measured_speedup"] = s["decode_goodput"].to_numpy() / [r["decode_goodput"] for r in ref]
    s["predicted_speedup"] = s["predicted_goodput"].to_numpy() / [r["predicted_goodput"] for r in ref]
    s["abs_pct_error_speedup"] = (s["predicted_speedup"] - s["measured_speedup"]).abs() / s["measured_speedup"]
    return s


def _per_batch(s: pd.DataFrame, rec_keys: dict[int, str]) -> list[dict[str, Any]]:
    """Per batch size: the recommendation and the best measured run, regret, MAPE and Spearman."""
    per = []
    for b, g in s.groupby("batch_size"):
        rec_row = g[g["key"] == rec_keys[b]]
        best = g.loc[g["decode_goodput"].idxmax()]
        got = float(rec_row["decode_goodput"].iloc[0]) if len(rec_row) else NAN
        per.append(dict(batch_size=int(b), recommended=rec_row["label"].iloc[0] if len(rec_row) else "",
                        recommended_goodput=got, best=best["label"], best_goodput=float(best["decode_goodput"]),
                        regret=float(best["decode_goodput"]) / got, mape=float(g["abs_pct_error"].mean()),
                        mape_speedup=float(g["abs_pct_error_speedup"].mean()),
                        spearman=spearman(g["predicted_goodput"], g["decode_goodput"]), configs=len(g)))
    return per


def _hf_executed(spec: BenchSpec, recs: dict[int, Any]) -> Run | None:
    """The HF run that executes the batch-1 recommendation as ``spectune export --engine hf`` writes it (target-only
    SD with its K, or plain generate), or None: no HF rows, no batch 1, a draft the grid's HF rows do not use, or a
    recommendation with prompt lookup or a draft-length policy."""
    if not spec.hf or 1 not in recs or recs[1].proposer != "model" or recs[1].policy != "fixed":
        return None  # HF's prompt lookup / policy runs are not among the fixed-K rows validated here
    plan, _ = plan_for(recs[1])
    k = hf_k(plan)
    if plan.target != spec.models[-1] or (k > 0 and plan.draft != spec.models[0]):
        return None
    t = recs[1].temperature
    if k == 0:
        return Run("hf-target", spec.config("standard", spec.models[-1:], (1,), 1, t, "target"))
    return Run("hf-assisted", spec.config("sd", (spec.models[0], spec.models[-1]), (k, 1), 1, t, "target"))


def _hf_validation(summary: pd.DataFrame, hf_run: Run | None, cm: Any, to_prof: dict[str, str],
                   models: tuple[str, ...]) -> tuple[pd.DataFrame | None, dict[str, Any]]:
    """HF rows at batch 1 with spectune's prediction and the HF-priced one (fixed-K rows and the target alone),
    and for the batch-1 advice row: the HF-executed recommendation, its regret among every HF run (HF's defaults
    included: a user could run them), and the MAPE of both predictions."""
    h = summary[summary["kind"].isin(["hf-target", "hf-assisted"]) & (summary["batch_size"] == 1)].copy()
    if hf_run is None or h.empty or hf_run.key not in set(h["key"]):
        return None, {}
    d, t = to_prof[models[0]], to_prof[models[-1]]
    fixed = ~h["key"].str.contains("|gHF|", regex=False) & ~h["key"].map(is_adaptive_key)  # K is not fixed there
    ks = [0 if kind == "hf-target" else int(str(g).split(",")[0]) for kind, g in zip(h["kind"], h["gamma"])]

    def pred(k: int, hf_step: bool) -> float:
        try:
            if k == 0 or hf_step:
                return predict_hf_goodput(cm, d, t, k)
            return cm.predict(DecodeConfig(models=(d, t), method="sd", gamma=(k, 1), batch_size=1)).goodput
        except (KeyError, ValueError):
            return NAN

    h["predicted_goodput"] = [pred(k, False) if f else NAN for k, f in zip(ks, fixed)]
    h["predicted_goodput_hf_step"] = [pred(k, True) if f else NAN for k, f in zip(ks, fixed)]
    for col, p in (("abs_pct_error", "predicted_goodput"), ("abs_pct_error_hf_step", "predicted_goodput_hf_step")):
        h[col] = (h[p] - h["decode_goodput"]).abs() / h["decode_goodput"]
    got = float(h.loc[h["key"] == hf_run.key, "decode_goodput"].iloc[0])
    best = h.loc[h["decode_goodput"].idxmax()]
    return h, dict(hf_recommended=hf_run.label, hf_best=best["label"], hf_regret=float(best["decode_goodput"]) / got,
                   hf_mape=float(h["abs_pct_error"].mean()), hf_mape_priced=float(h["abs_pct_error_hf_step"].mean()))
