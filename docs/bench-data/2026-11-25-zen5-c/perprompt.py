"""Per prompt: does the runtime's greedy output follow the calibration path, and how do the accepted lengths of
the runtime and the path-walking simulator compare (sd draft-s -> smollm2, gamma 3). /tmp/camp/zen5new was the
calibration of 15:45 that became the bundled Zen 5 profile."""
import numpy as np
from spectune.decoder import build_decoder, encode_prompt
from spectune.models import load_models
from spectune.workloads.registry import load_workload
from spectune.profile import load_profile
from spectune.tune.cost import CostModel
from spectune.tune.simulate import simulate, Paths
from spectune.config import DecodeConfig

prof = load_profile('/tmp/camp/zen5new')
cm = CostModel(prof, workload=None, max_new_tokens=64)
table, along = cm.path_table(), cm.path_draft_table()
models = load_models(["draft-s", "smollm2-135m"])
tok = models[-1].tokenizer
wl = load_workload("mix")
prompts = [encode_prompt(tok, p) for p in wl.split("calibration")[:15]]
keys = sorted(table)  # "workload/prompt"
d = build_decoder(models, method="sd", gamma=[3, 1], ignore_eos=True, runtime="eager")
c = DecodeConfig(models=("draft-s", "smollm2-135m"), method="sd", gamma=(3, 1), max_new_tokens=64)
kw = cm._setup(c)
tot = np.zeros(4)
for i, p in enumerate(prompts):
    match = [k for k in keys if table[k][0][:table[k][1]] == list(p[-192:])]
    d.events = []
    out, st = d.generate(p, 64, seed=i)
    rt_rounds = sum(1 for e in d.events if e[0] == "round")
    if not match:
        print(i, "no path matches this prompt")
        continue
    k = match[0]
    toks, start = table[k]
    same = next((j for j, (a, b) in enumerate(zip(out, toks[start:])) if a != b), min(len(out), len(toks) - start))
    paths = Paths({k: (toks, start)}, None, {0: {k: along['draft-s'][k]}})
    ev = []
    t0 = kw['traces'][0]
    sel = t0.group == k
    from spectune.tune.simulate import Traces
    one = Traces(t0.beta[sel], t0.conf[sel], None, None, t0.group[sel])
    sim = simulate(kw['method'], (3, 1), kw['uses'], [one, None], max_new_tokens=64, events=ev, shuffle=False,
                   as_runtime=True, prompt_len=start, paths=paths)
    sim_rounds = sum(1 for e in ev if e[0] == "round")
    acc_rt = [e[3] for e in d.events if e[0] == "verify"]
    acc_sim = [e[3] for e in ev if e[0] == "verify"]
    tot += [64, rt_rounds, 64, sim_rounds]
    print(f"{i:2d} {k:12s} runtime==path for {same:2d} tokens; rounds runtime {rt_rounds} sim {sim_rounds}; "
          f"accepted runtime {sum(acc_rt)} sim {sum(acc_sim)}", flush=True)
print("tpr runtime", tot[0] / tot[1], "sim walking each path", tot[2] / tot[3])
