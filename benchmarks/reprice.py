"""Re-price an engine advice campaign offline (``engines.sh``'s output): the engine profile's latency re-fitted from
its own measured rows by the current ``spectune.calibration.engine.fit_latency``, then ``recommend --engine``'s picks
and the advice table against the rows measured in the engine (a pick outside the grid has no measurement: regret
nan). With ``--validate N`` the picks are ``recommend --engine --validate N``'s, replaying the validation's rows
of ADVICE_DIR/engine-validation.csv (the run measured them there). ``--steps engine|client`` prices the stages on
the engine's own steps or the client's (``EngineGrid.steps``; default: EngineGrid's, whatever the profile was
fitted with); ``--stat fastest|quartile|fastest-start|paired`` makes each stage's step from its measurements so
(``EngineGrid.stat``; default: EngineGrid's). Nothing is measured again.

Usage: python benchmarks/reprice.py PROFILE_DIR ADVICE_DIR ENGINE [ACCEPTANCE_PROFILE] [--validate N] [--steps S]
       [--stat S]
(default acceptance: the runtime profile the engine profile was built from)
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from spectune.bench.engine_advice import advice_table, engine_picks, summary_line
from spectune.bench.engine_runs import EngineBenchSpec, measured_configs
from spectune.calibration.engine import (
    PRICING,
    ROW_COLUMNS,
    EngineGrid,
    engine_profile,
    fit_latency,
    plain_steps,
)
from spectune.engines import EngineSettings
from spectune.profile import load_profile


def _option(argv: list[str], name: str) -> tuple[str | None, list[str]]:
    if name not in argv:
        return None, argv
    i = argv.index(name)
    return argv[i + 1], argv[:i] + argv[i + 2:]


def main(argv: list[str]) -> None:
    validate, argv = _option(argv, "--validate")
    validate = int(validate or 0)
    steps, argv = _option(argv, "--steps")
    stat, argv = _option(argv, "--stat")
    adv_dir, engine = Path(argv[1]), argv[2]
    prof, models, grid, tmp = refit(Path(argv[0]), argv[3] if len(argv) > 3 else None, steps, stat)
    lat = prof.latency
    print(lat[lat["k"].isin([0, 1, 2, 5])].pivot_table(index=["model", "batch"], columns="k", values="median_s")
          .mul(1e3).round(2).to_string())
    measured = pd.read_csv(adv_dir / "engine-rows.csv", keep_default_na=False)
    ws, bs = sorted(set(measured["workload"])), tuple(sorted(int(b) for b in set(measured["batch_size"])))
    one = measured[measured["batch_size"] == min(bs)]  # the prompts a b = 1 repeat ran: its tokens over a request's
    prompts = max(1, round(float(one["tokens"].median()) / grid.max_new_tokens))
    spec = EngineBenchSpec(models=tuple(models), workload=",".join(ws), batch_sizes=bs,
                           max_new_tokens=grid.max_new_tokens, prompts=prompts)
    replay = pd.read_csv(adv_dir / "engine-validation.csv").to_dict("records") if validate else None
    picks = engine_picks(spec, EngineSettings(name=engine), str(tmp), say=print, validate=validate, replay=replay)
    configs = measured_configs(measured, models, grid.max_new_tokens)
    table = advice_table(measured.to_dict("records"), picks, configs, prof, engine)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(summary_line(table))
    print("prediction error by batch size and kind ((predicted - measured) / measured, fastest repeats):")
    print(errors_by_kind(measured, configs, prof).to_string(float_format="{:+.3f}".format))


def refit(prof_dir: Path, acceptance: str | None, steps: str | None = None, stat: str | None = None
          ) -> tuple[Any, list[str], EngineGrid, Path]:
    """(the engine profile re-fitted from its own rows by the current code, loaded; its models; its grid; where it
    is saved): acceptance from ``acceptance`` (default: the runtime profile it was built from), ``steps`` and
    ``stat`` over the grid's (None: EngineGrid's)."""
    meta = json.loads((prof_dir / "profile.json").read_text())
    e = meta["engine"]
    acc = load_profile(acceptance or meta["settings"]["acceptance_from"], check_hardware=False)
    fitted = {k: tuple(v) if isinstance(v, list) else v for k, v in e["grid"].items() if k not in PRICING}
    given = {k: v for k, v in {"steps": steps, "stat": stat}.items() if v}  # the options, else EngineGrid's
    grid = EngineGrid(**fitted, **given).checked()
    rows = pd.DataFrame(e["measured"], columns=ROW_COLUMNS)
    rows["draft"] = rows["draft"].fillna("")
    models = [d for d in dict.fromkeys(rows["draft"]) if d] + [meta["models"][-1]["name"]]
    lat = fit_latency(rows, models, grid)
    kept = {k: v for k, v in e.items() if k not in ("grid", "measured", "plain_step_s")}
    prof = engine_profile(acc, models, lat, dict(kept, plain_step_s=plain_steps(rows, grid)), meta["hardware"], grid,
                          0.0)
    tmp = Path(tempfile.mkdtemp()) / "ep"
    prof.save(tmp)
    return load_profile(tmp, check_hardware=False), models, grid, tmp


def errors_by_kind(measured: pd.DataFrame, configs: list, prof) -> pd.DataFrame:
    """Mean signed and absolute prediction error of each (batch size, kind: target alone, lookup, draft, chain)."""
    from spectune.bench.engine_runs import label
    from spectune.tune import CostModel

    by_label = {(label(c), c.batch_size): c for c in configs}
    models: dict[tuple[str, int], CostModel] = {}  # one per workload and request length: its traces simulated once
    fast = measured.groupby(["workload", "batch_size", "label"])["decode_goodput"].max()
    out = []
    for (w, b, lab), g in fast.items():
        c = by_label.get((lab, int(b)))
        if c is None:
            continue
        kind = ("target alone" if c.method == "standard" else "chain" if "+model" in c.proposer
                else "lookup" if c.proposer.startswith("ngram") else "draft")
        if (w, c.max_new_tokens) not in models:
            models[(w, c.max_new_tokens)] = CostModel(prof, w, max_new_tokens=c.max_new_tokens)
        err = (models[(w, c.max_new_tokens)].predict(c).goodput - g) / g
        out.append({"b": int(b), "kind": kind, "err": err})
    d = pd.DataFrame(out)
    return d.groupby(["b", "kind"])["err"].agg(mean="mean", mean_abs=lambda e: e.abs().mean(), configs="count")


if __name__ == "__main__":
    main(sys.argv[1:])
