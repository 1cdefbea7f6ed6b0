"""An engine profile's own picks (recommend --engine, nothing measured) for v3's six cells, judged on the rounds in
turn: per cell the price's ranking of the configurations measured there, its pick over the whole search, and each
one's regret in the rounds (the largest median over rounds of a configuration's goodput over it in the same round;
nan where the rounds did not measure it). Usage: python picks_turn.py EP TURN_DIR"""
import sys

import numpy as np
import pandas as pd

from spectune.bench.engine_advice import engine_picks
from spectune.bench.engine_runs import EngineBenchSpec, label, measured_configs
from spectune.engines import EngineSettings
from spectune.profile import load_profile
from spectune.tune.cost import CostModel

MODELS, MNT = ("draft-s", "smollm2-135m"), 48


def regret(g: pd.DataFrame, lab: str) -> float:
    if lab not in g.columns:
        return float("nan")
    return float(max((g[c] / g[lab]).median() for c in g.columns))


def main(ep: str, turn: str) -> None:
    tr = pd.concat([pd.read_csv(f"{turn}/{w}/engine-confirm.csv", keep_default_na=False)
                    for w in ("mix", "code", "edit")])
    by = {(label(c), c.batch_size): c for c in measured_configs(tr, list(MODELS), MNT)}
    prof = load_profile(ep, check_hardware=False)
    spec = EngineBenchSpec(models=MODELS, workload="mix,code,edit", batch_sizes=(1, 8), max_new_tokens=MNT, prompts=8)
    picks = engine_picks(spec, EngineSettings(name="vllm"), ep)
    for (w, b), at in tr.groupby(["workload", "batch_size"]):
        g = at.pivot_table(index="repeat", columns="label", values="decode_goodput")
        cm = CostModel(prof, w, max_new_tokens=MNT)
        pred = {lab: float(cm.predict(by[(lab, b)]).goodput) for lab in g.columns}
        best_priced = max(pred, key=pred.get)
        pick = label(picks[(w, b)])
        print(f"{w} b={b}: search pick {pick} (regret in turn {regret(g, pick):.3f}); best priced of those measured "
              f"{best_priced} (regret {regret(g, best_priced):.3f}); best in turn "
              f"{max(g.columns, key=lambda c: np.median(g[c]))}")
        for lab in sorted(pred, key=lambda x: -pred[x]):
            print(f"    {lab:18s} priced {pred[lab]:6.1f}  measured median {g[lab].median():6.1f}  "
                  f"regret {regret(g, lab):.3f}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
