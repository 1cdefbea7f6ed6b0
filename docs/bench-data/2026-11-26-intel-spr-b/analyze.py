"""Tables for docs/benchmarks.md Part F from camp3.sh's outputs (run: python analyze.py [CAMPAIGN_DIR])."""
import json
import sys
from pathlib import Path

import pandas as pd

C = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent


def grid(rows_csv: Path, engine: str) -> None:
    rows = pd.read_csv(rows_csv)
    med = rows[rows["backend"] == engine].groupby(["workload", "batch_size", "label"])["decode_goodput"]
    med = med.agg(["median", "min", "max"])
    med["spread"] = (med["max"] - med["min"]) / med["median"]
    for (w, b), g in med.groupby(level=[0, 1]):
        g = g.droplevel([0, 1]).sort_values("median", ascending=False)
        alone = g.loc["target alone", "median"]
        print(f"\n{engine} {w} b={b}: target alone {alone:.1f} tok/s")
        print(g.assign(vs_alone=g["median"] / alone).round(3).to_string())


def fit(profile_dir: Path) -> None:
    lat = pd.read_csv(profile_dir / "latency.csv")
    meta = json.loads((profile_dir / "profile.json").read_text())["engine"]
    print(f"\n{profile_dir.name}: {meta['name']} {meta['version']} lookup_match={meta.get('lookup_match')}")
    print(lat[lat["k"].isin([1, 2, 3, 5, 9])].pivot_table(index=["model", "batch"], columns="k",
                                                           values="median_s").mul(1e3).round(2).to_string())
    rows = pd.DataFrame(meta["measured"])
    print(rows.groupby(["stage", "batch"])[["step_s", "tokens_per_row_step", "decode_goodput"]].median()
          .round(4).to_string())


for name, engine in (("llama", "llamacpp"), ("vllm", "vllm")):
    if (C / f"ep-{name}").is_dir():
        fit(C / f"ep-{name}")
    adv = C / f"advice-{name}"
    if (adv / "engine-advice.csv").is_file():
        print(f"\n== {engine}: engine-priced advice vs the engine's grid")
        print(pd.read_csv(adv / "engine-advice.csv").to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        grid(adv / "engine-rows.csv", engine)
vs = C / "versus-llama"
if (vs / "engine-summary.csv").is_file():
    print("\n== llama.cpp vs runtime (mix, 64 tokens)")
    print(pd.read_csv(vs / "engine-summary.csv").to_string(index=False, float_format=lambda x: f"{x:.3f}"))

# the three-way table: llama.cpp and the runtime side by side (versus-llama, this campaign), vLLM and the runtime side
# by side (Part E's versus run on the same machine, 10:05-10:17): each engine's tok/s and its ratio to its own target
# alone, the runtime's from each run
pe = Path(__file__).parent.parent / "2026-11-26-intel-spr" / "versus-engine-summary.csv"
if (vs / "engine-summary.csv").is_file() and pe.is_file():
    lc, vl = pd.read_csv(vs / "engine-summary.csv"), pd.read_csv(pe)
    t = lc.merge(vl, on=["workload", "label", "batch_size"], suffixes=("_l", "_v"))
    cols = ["label", "batch_size", "spectune_l", "spectune vs its target alone_l", "vllm", "vllm vs its target alone",
            "llamacpp", "llamacpp vs its target alone"]
    print("\n== three-way (mix, 64 tokens): runtime (llama run) | vLLM (Part E run) | llama.cpp")
    print(t[[c for c in cols if c in t.columns]].to_string(index=False, float_format=lambda x: f"{x:.2f}"))
