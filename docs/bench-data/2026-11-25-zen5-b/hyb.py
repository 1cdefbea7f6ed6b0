"""The first experiment (12:48, before the proposer existed): sd whose step looks up first and lets draft-s draft
DRAFT tokens on a miss (a patched step), beside sd / the lookup alone, on N held-out prompts of WORKLOAD x 32
tokens, 3 interleaved repeats. Usage: python hyb.py DRAFT WORKLOAD N (ran: 3 mix 8; output hyb_mix.log)."""
import dataclasses
import statistics
import sys

from spectune.decoder import build_decoder, encode_prompt
from spectune.models import load_models
from spectune.workloads.registry import load_workload

DRAFT = int(sys.argv[1]) if len(sys.argv) > 1 else 3
WL = sys.argv[2] if len(sys.argv) > 2 else "mix"
NP = int(sys.argv[3]) if len(sys.argv) > 3 else 8


def hybrid_step(m, s):
    m.new_round(s)
    m.lookup(s)
    drafted = False
    if not s.pending:
        n = yield from m.draft(s, 0, DRAFT)
        drafted = n > 0
    for i in m.uses:
        if i == 0 and drafted:
            m.rewind(s, 0, s.n_committed - 1)
        yield from m.feed(s, i, s.end)
    proposed = bool(s.pending)
    if m.verify(s) and not s.done:
        s.stats.bonus_tokens += proposed
        m.sample(s)


models = load_models(["draft-s", "smollm2-135m"])
prompts = [encode_prompt(models[-1].tokenizer, p) for p in load_workload(WL).heldout[:NP]]
cfgs = {"target": dict(method="standard", gamma=None), "sd3": dict(method="sd", gamma=[3, 1]),
        "sd2": dict(method="sd", gamma=[2, 1]),
        "sdconf4": dict(method="sd", gamma=[4, 1], policy="confidence:0.4"),
        "look8": dict(method="sd", gamma=[8, 1], proposer="ngram:1,3"),
        "hyb8": dict(method="sd", gamma=[8, 1], proposer="ngram:1,3", hybrid=True)}
decs = {}
for name, c in cfgs.items():
    c = dict(c)
    hyb, gam = c.pop("hybrid", False), c.pop("gamma")
    d = build_decoder(models, combine="target", ignore_eos=True, gamma=gam, runtime="eager", **c)
    if hyb:
        d.spec = dataclasses.replace(d.spec, step=hybrid_step)
    decs[name] = d
res = {n: [] for n in decs}
for rep in range(3):
    for n in (list(decs) if rep % 2 == 0 else list(decs)[::-1]):
        toks, secs = 0, 0.0
        for i, p in enumerate(prompts):
            out, st = decs[n].generate(p, 32, seed=i)
            toks, secs = toks + len(out), secs + st.wall_seconds
        res[n].append(toks / secs)
        print(rep, n, round(toks / secs, 1), flush=True)
for n, v in res.items():
    ratio = statistics.median([a / b for a, b in zip(v, res["target"])])
    print(f"{n:10s} tok/s median {statistics.median(v):6.1f}  x target {ratio:.3f} "
          f"spread {(max(v) - min(v)) / statistics.median(v):.0%}")
