"""c2's mix b = 8 miss: the validated ngram:1,3 K = 2 against the target alone, side by side in rounds of starts, on
the 8 calibration prompts --validate measured, on 40 calibration prompts, and on the 8 held-out prompts."""
import csv
import sys

from spectune.bench.engine_runs import bench_engine, engine_config
from spectune.decoder import encode_workload
from spectune.engines import EngineSettings
from spectune.models import load_tokenizer

models = ("draft-s", "smollm2-135m")
cfgs = [engine_config(models, 8, 48), engine_config(models, 8, 48, 2, "ngram:1,3")]
tok = load_tokenizer(models[-1])
sets = {"cal8": encode_workload(tok, "mix", "calibration", n=8),
        "cal40": encode_workload(tok, "mix", "calibration", n=40),
        "held8": encode_workload(tok, "mix", "heldout", n=8)}
out, rows = sys.argv[1], []
for name, ps in sets.items():
    got = bench_engine(cfgs, EngineSettings(name="llamacpp", log_dir=out + "/logs"), {"mix": ps}, repeats=5,
                       n_prompts=len(ps), say=lambda s: print(s, flush=True))
    rows += [dict(r, prompts=name) for r in got]
with open(out + "/rows-mix8.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
