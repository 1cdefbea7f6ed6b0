"""Where the error of engine-priced advice comes from (docs/benchmarks.md, "The error budget"): the MAPE of the
predicted engine goodput over an advice campaign's grid (``engines.sh``'s output; the engine profile re-fitted from
its own rows, as ``reprice.py`` does), taken apart by replacing one input of the prediction at a time with what the
grid itself saw:

* ``as priced``: the profile's latency and the calibration prompts' acceptance (``reprice.py``'s MAPE);
* ``level: validation``: every prediction at (workload, b) scaled by the validation's fastest target alone over its
  price (measured by ``recommend --engine --validate`` before the grid, on the calibration prompts);
* ``level: grid`` (an oracle): scaled by the grid's own fastest target alone over its price: what is left is the
  speedups' error;
* ``acceptance: held-out`` (with ``--heldout-acceptance P``, an oracle): the acceptance of the grid's own prompts
  instead of the calibration prompts' -- P is a runtime profile of the same models calibrated on them, each
  workload a prompt file named after it (``code.jsonl``: the grid's held-out ``code`` prompts, as its calibration
  split); what is left is the latency's error;
* ``both``: the held-out acceptance at the grid's level: what is left is the error of the speedups' latency (each
  configuration's step against the target alone's) and the host's noise between configurations.

Then the acceptance the grid's fixed-K drafts saw at b = 1 (tokens a round: 1 + the sum of the engine's
per-position counters, the median over repeats) beside the cost model's tokens a round on each acceptance, and
every draft's and lookup's acceptance by position at b = 1, the engine's counters beside the cost model's
prediction of them (issue 34's "acceptance per position, engine vs runtime": its simulated rounds that proposed, on
the calibration prompts' traces and, with ``--heldout-acceptance``, on the grid's own prompts').
``--prompt-spread K`` measures, on spectune's runtime, each prompt's accepted tokens a round drafting K on both
splits of each workload (greedy, the grid's tokens a request): how far the mean of the grid's held-out prompts is
from the calibration prompts', and how far it is expected to be over random splits of the same prompts (the
sampling floor of the acceptance a calibration can know).

``--stage-acceptance P`` prices the calibration's own target-alone and draft stages on P, a runtime profile
calibrated on the prompts they ran (the first 8 calibration prompts of the grid's workload, one prompt file), beside
their fastest measured goodput: how well the fit and the simulator reproduce what they were fitted on.

Usage: python benchmarks/error_budget.py PROFILE_DIR ADVICE_DIR ENGINE [ACCEPTANCE_PROFILE]
       [--heldout-acceptance P] [--stage-acceptance P] [--steps S] [--stat S] [--prompt-spread K]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reprice import _option, refit  # noqa: E402

from spectune.bench.engine_runs import label, measured_configs, repeat_runs  # noqa: E402
from spectune.profile import load_profile  # noqa: E402
from spectune.tune import CostModel  # noqa: E402


def main(argv: list[str]) -> None:
    heldout, argv = _option(argv, "--heldout-acceptance")
    steps, argv = _option(argv, "--steps")
    stat, argv = _option(argv, "--stat")
    spread, argv = _option(argv, "--prompt-spread")
    own, argv = _option(argv, "--stage-acceptance")
    prof_dir, adv_dir = Path(argv[0]), Path(argv[1])
    prof, models, grid, _ = refit(prof_dir, argv[3] if len(argv) > 3 else None, steps, stat)
    measured = pd.read_csv(adv_dir / "engine-rows.csv", keep_default_na=False)
    workloads = sorted(set(measured["workload"]))
    configs = {(label(c), c.batch_size): c for c in measured_configs(measured, models, grid.max_new_tokens)}
    held = None
    if heldout:  # the same latency, the acceptance of the grid's own prompts
        names = {Path(w).stem: w for w in load_profile(heldout, check_hardware=False).meta["settings"]["workloads"]}
        if missing := [w for w in workloads if w not in names]:
            raise SystemExit(f"{heldout} has no workload named after {', '.join(missing)} (a prompt file "
                             f"{missing[0]}.jsonl of the grid's prompts)")
        held = (refit(prof_dir, heldout, steps, stat)[0], names)
    cm = cost_models(prof, held)
    d = predictions(measured, configs, cm, held is not None)
    val = adv_dir / "engine-validation.csv"
    alone = repeat_runs(pd.read_csv(val, keep_default_na=False).to_dict("records")) if val.is_file() else {}
    print("MAPE of the predicted engine goodput (fastest repeats; the mean over cells of each cell's mean):")
    print(budget(d, {(w, b): max(r) for (w, lab, b), r in alone.items() if lab == "target alone"})
          .to_string(float_format="{:.3f}".format))
    print("tokens a round of the fixed-K drafts at b = 1: the engine's on the grid's prompts, the cost model's:")
    print(acceptance(measured, configs, cm, held is not None).to_string(index=False, float_format="{:.3f}".format))
    print("acceptance by position at b = 1: the engine's counters, the cost model's prediction of them (its rounds "
          "that proposed; on the calibration prompts, and with --heldout-acceptance on the grid's):")
    print(by_position(measured, configs, cm, held is not None).to_string(index=False, float_format="{:.3f}".format))
    if own:
        print("the calibration's own stages (the fastest of each), priced on the acceptance of their prompts:")
        print(stages(prof_dir, own, steps, stat).to_string(index=False, float_format="{:.1f}".format))
    if spread:
        n = max(1, int(measured[measured["batch_size"] == 1]["tokens"].max()) // grid.max_new_tokens)
        print(f"accepted tokens a round drafting K = {spread} on spectune's runtime, prompt by prompt:")
        print(prompt_spread(models, workloads, int(spread), grid.max_new_tokens, n)
              .to_string(index=False, float_format="{:.3f}".format))


def cost_models(prof: Any, held: tuple[Any, dict] | None) -> Callable[[str, bool, int], CostModel]:
    """(workload, on the held-out acceptance, tokens a request) -> its CostModel, built once a workload (its traces
    are simulated once; a campaign's requests are all as long)."""
    cms: dict[tuple[str, bool], CostModel] = {}

    def get(w: str, on_held: bool, n: int) -> CostModel:
        if (w, on_held) not in cms:
            p, name = (held[0], held[1][w]) if on_held and held else (prof, w)
            cms[(w, on_held)] = CostModel(p, name, max_new_tokens=n)
        return cms[(w, on_held)]

    return get


def predictions(measured: pd.DataFrame, configs: dict, cm: Callable[[str, bool, int], CostModel], held: bool
                ) -> pd.DataFrame:
    """One row per measured (workload, b, configuration) of the grid: the fastest repeat and the predictions."""
    out = []
    for (w, lab, b), reps in repeat_runs(measured.to_dict("records")).items():
        c = configs.get((lab, b))
        if c is not None:
            price = lambda on_held: float(cm(w, on_held, c.max_new_tokens).predict(c).goodput)  # noqa: E731
            out.append({"workload": w, "b": b, "label": lab, "measured": max(reps), "pred": price(False),
                        "pred_held": price(True) if held else np.nan})
    return pd.DataFrame(out)


def budget(d: pd.DataFrame, val_alone: dict[tuple[str, int], float]) -> pd.DataFrame:
    """The MAPE (over all cells, and at each batch size) of each replacement (the module docstring)."""
    alone = d[d["label"] == "target alone"].set_index(["workload", "b"])
    cells = pd.MultiIndex.from_arrays([d["workload"], d["b"]])
    at = lambda col: alone[col].reindex(cells).to_numpy()  # noqa: E731 - each row's cell's target alone
    val = np.array([val_alone.get(k, np.nan) for k in cells])
    rows = {"as priced": d["pred"], "level: validation": d["pred"] * val / at("pred"),
            "level: grid": d["pred"] * at("measured") / at("pred"), "acceptance: held-out": d["pred_held"],
            "both: grid level, held-out acceptance": d["pred_held"] * at("measured") / at("pred_held")}
    out = {}
    for name, pred in rows.items():
        err = ((pred - d["measured"]) / d["measured"]).abs().groupby([d["workload"], d["b"]]).mean()
        out[name] = {"all": err.mean(), **{f"b={b}": err.xs(b, level=1).mean() for b in sorted(set(d["b"]))}}
    return pd.DataFrame(out).T


def acceptance(measured: pd.DataFrame, configs: dict, cm: Callable[[str, bool, int], CostModel], held: bool
               ) -> pd.DataFrame:
    """Per workload and fixed-K draft at b = 1: the tokens a round gains, the engine's (1 + accepted tokens a
    draft, its per-position counters on the grid's prompts: the draft runs every round) and the cost model's
    (its simulation on the calibration / held-out prompts' acceptance)."""
    rows = measured[(measured["batch_size"] == 1) & (measured["method"] == "sd") & (measured["proposer"] == "model")
                    & ~measured["label"].str.contains("confidence:")]
    out = []
    for (w, lab), g in rows.groupby(["workload", "label"]):
        seen = [sum(json.loads(a)) for a in g["acceptance_per_pos"] if a not in ("", "[]")]
        c = configs[(lab, 1)]
        row = {"workload": w, "config": lab, "engine": 1 + float(np.median(seen)) if seen else np.nan,
               "calibration": cm(w, False, c.max_new_tokens).predict(c).tokens_per_round}
        if held:
            row["held-out"] = cm(w, True, c.max_new_tokens).predict(c).tokens_per_round
        out.append(row)
    return pd.DataFrame(out)


def by_position(measured: pd.DataFrame, configs: dict, cm: Callable[[str, bool, int], CostModel], held: bool
                ) -> pd.DataFrame:
    """Per workload and configuration that drafts, at b = 1: the engine's acceptance by position (accepted tokens at
    position i over its drafts, the mean over repeats) beside the cost model's prediction of that counter
    (``CostModel.acceptance_by_position``: over its simulated rounds that proposed a token) on the calibration
    prompts' acceptance ("priced") and, with ``held`` (``--heldout-acceptance``), on the grid's own prompts'
    ("held-out": the engine and the runtime on the same prompts), and the largest difference of each."""
    rows = measured[(measured["batch_size"] == 1) & ~measured["acceptance_per_pos"].isin(["", "[]"])]
    out = []
    show = lambda a: " ".join(f"{x:.3f}" for x in a)  # noqa: E731
    for (w, lab), g in rows.groupby(["workload", "label"], sort=False):
        c = configs[(lab, 1)]
        engine = np.array([json.loads(a)[:c.gamma[0]] for a in g["acceptance_per_pos"]]).mean(axis=0)
        row = {"workload": w, "config": lab, "engine": show(engine)}
        for name, on_held in (("priced", False), ("held-out", True))[: 1 + held]:
            pred = np.array(cm(w, on_held, c.max_new_tokens).acceptance_by_position(c))
            row.update({name: show(pred), f"max |diff| {name}": float(np.abs(engine - pred).max())})
        out.append(row)
    return pd.DataFrame(out)


def stages(prof_dir: Path, acceptance: str, steps: str | None, stat: str | None) -> pd.DataFrame:
    """Each target-alone and draft stage the engine profile was fitted on, its fastest goodput against the profile's
    prediction of it with ``acceptance`` (a runtime profile calibrated on the stages' own prompts, one workload):
    how well the latency fit and the simulator reproduce what they were fitted on."""
    from spectune.calibration.engine import ROW_COLUMNS
    from spectune.config import DecodeConfig

    prof, models, grid, _ = refit(prof_dir, acceptance, steps, stat)
    cm = CostModel(prof, prof.meta["settings"]["workloads"][0], max_new_tokens=grid.max_new_tokens)
    measured = json.loads((prof_dir / "profile.json").read_text())["engine"]["measured"]
    rows = pd.DataFrame(measured, columns=ROW_COLUMNS)
    rows = rows[(rows["stage"] == "target") | (rows["draft"].fillna("") != "")]
    out = []
    for (stage, b), g in rows.groupby(["stage", "batch"], sort=False):
        k, common = int(g["spec_k"].iloc[0]), dict(batch_size=int(b), combine="target",
                                                   max_new_tokens=grid.max_new_tokens)
        c = DecodeConfig(models=tuple(models), method="sd", gamma=(k, 1), **common) if k else \
            DecodeConfig(models=(models[-1],), method="standard", **common)
        meas, pred = float(g["decode_goodput"].max()), float(cm.predict(c).goodput)
        out.append({"stage": stage, "b": int(b), "measured": meas, "predicted": pred,
                    "error %": 100 * (pred / meas - 1)})
    return pd.DataFrame(out).sort_values(["b", "stage"])


def prompt_spread(models: list[str], workloads: list[str], k: int, tokens: int, n_held: int,
                  draws: int = 20000) -> pd.DataFrame:
    """Per workload: the runtime's accepted tokens a round drafting ``k`` (greedy, ``tokens`` a request), the mean
    over the calibration prompts and over the grid's ``n_held`` held-out prompts, the error in tokens a round
    (1 + accepted) that calibrating on the one makes of the other, and its mean and 90th percentile over random
    splits of the same prompts into as many of each."""
    from spectune.api import generate_batch
    from spectune.decoder import encode_workload
    from spectune.models import load_tokenizer

    tok, rng, out = load_tokenizer(models[-1]), np.random.default_rng(0), []
    for w in workloads:
        acc = {}
        for split, n in (("calibration", None), ("heldout", n_held)):
            ids = encode_workload(tok, w, split, n)
            res = generate_batch(list(models), ids, method="sd", gamma=[k, 1], max_new_tokens=tokens,
                                 batch_size=len(ids), ignore_eos=True, temperature=0.0)
            acc[split] = np.array([r.stats.mean_accepted_length for r in res.results])
        cal, held = acc["calibration"], acc["heldout"]
        pool = np.concatenate([cal, held])
        perm = np.array([rng.permutation(len(pool)) for _ in range(draws)])
        errs = np.abs((1 + pool[perm[:, :len(cal)]].mean(1)) / (1 + pool[perm[:, len(cal):]].mean(1)) - 1)
        out.append({"workload": w, "prompts": f"{len(cal)} / {len(held)}", "calibration": cal.mean(),
                    "held-out": held.mean(), "error": (1 + cal.mean()) / (1 + held.mean()) - 1,
                    "random mean": errs.mean(), "random p90": np.quantile(errs, 0.9)})
    return pd.DataFrame(out)


if __name__ == "__main__":
    main(sys.argv[1:])
