"""spectune bench with ngram proposers and draft-length policies: their own keys, measured, no theorem rows."""
from __future__ import annotations

import json

import numpy as np

from spectune.bench import BenchSpec, bench


def test_grid_adds_proposer_and_policy_runs_with_their_own_keys():
    spec = BenchSpec(models=("d", "t"), methods=("standard", "sd"), gammas=(2, 4), proposers=("ngram:1,3",),
                     policies=("heuristic",), hf=False)
    runs = {r.key: r for r in spec.runs()}
    assert len(runs) == 1 + 2 + 2 + 2  # target alone, sd fixed, sd ngram (target alone), sd heuristic
    ng = runs["sd|t|target|g4|b1|t0|p=ngram:1,3"].config
    assert (ng.models, ng.proposer, ng.gamma) == (("t",), "ngram:1,3", (4,))
    assert runs["sd|d,t|target|g2,1|b1|t0|policy=heuristic"].label == "sd heuristic gamma=2,1"
    assert "sd|d,t|target|g2,1|b1|t0" in runs  # fixed keys unchanged: older rows.csv files still resume


def test_bench_measures_ngram_and_a_policy(tiny_dirs, tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text("\n".join(json.dumps({"prompt": f"w{i} w4 w5 w{i} w4 w5 w{i}"}) for i in range(4)))
    spec = BenchSpec(models=(str(tiny_dirs["s"]), str(tiny_dirs["l"])), methods=("standard", "sd"), gammas=(3,),
                     proposers=("ngram:1,2",), policies=("confidence:0.5",), max_new_tokens=6, hf=False)
    res = bench(spec, workload=str(p), prompts=2, repeats=1, out=tmp_path / "b", say=lambda s: None)
    s = res.summary.set_index("label")
    assert s.loc["sd ngram:1,2 gamma=3", "goodput"] > 0 and s.loc["sd confidence:0.5 gamma=3,1", "goodput"] > 0
    assert not np.isfinite(s.loc["sd ngram:1,2 gamma=3", "thm_speedup"])  # fixed-gamma theorems do not apply
    assert np.isfinite(s.loc["sd gamma=3,1", "thm_speedup"])
