"""Fresh rounds for c2's edit b = 1 cell: recommend --engine llamacpp's predicted pick (ngram:2,4 K=4, not in the
grid) beside the validated pick (ngram:1,3 K=3), the grid's and fresh rounds' best (ngram:1,3 K=8) and the target
alone; a start a round (llama.cpp quick start), 8 held-out edit prompts x 48 tokens, 5 rounds."""
import csv
import sys
from spectune.bench.engine_runs import EngineBenchSpec, bench_engine, engine_config
from spectune.engines import EngineSettings

models = ("draft-s", "smollm2-135m")
cfgs = [engine_config(models, 1, 48, 4, "ngram:2,4"), engine_config(models, 1, 48, 3, "ngram:1,3"),
        engine_config(models, 1, 48, 8, "ngram:1,3"), engine_config(models, 1, 48)]
spec = EngineBenchSpec(models=models, workload="edit", batch_sizes=(1,), max_new_tokens=48, prompts=8)
out = sys.argv[1]
rows = bench_engine(cfgs, EngineSettings(name="llamacpp", log_dir=out + "/logs"), spec.held_out(), repeats=5,
                    n_prompts=8, say=lambda s: print(s, flush=True))
with open(out + "/rows.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
