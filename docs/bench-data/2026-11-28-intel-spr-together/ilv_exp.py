"""Interleaved drives across engine starts that are alive at once: the target alone, draft-s K = 2 and ngram:1,3 K = 3,
each its own server, started one after another and then driven in turn (a round = one b = 8 drive of each, order
rotating), ROUNDS rounds. Per drive also the CPU seconds every server's process tree used (do idle servers spin?).
Rows appended to OUT/rows.csv: round, label, time, tok/s, wall s, then per server CPU s during the drive. Needs
psutil (not a spectune dependency).

Usage: [SETTLE=S] python ilv_exp.py OUT ENGINE ROUNDS [BATCH] [NPROMPTS]   (SETTLE: seconds of pause before each drive)
vLLM starts get --gpu-memory-utilization 0.1 (about 4 GB each) so three fit in the guest's 23 GB.
"""
import contextlib
import csv
import os
import sys
import time
from pathlib import Path

import psutil

from spectune.decoder import encode_workload
from spectune.engines import EngineSettings, engine_class, open_engine
from spectune.models import load_tokenizer

BINS = {"vllm": "~/.cache/spectune-engines/vllm-0.32.0/bin/vllm",
        "llamacpp": "~/.cache/spectune-engines/llamacpp-11434/bin/llama-server"}


def tree_cpu(pid):
    try:
        p = psutil.Process(pid)
        ps = [p] + p.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0.0
    tot = 0.0
    for q in ps:
        with contextlib.suppress(psutil.NoSuchProcess):
            t = q.cpu_times()
            tot += t.user + t.system
    return tot


def main(out, engine, rounds, b, n):
    out.mkdir(parents=True, exist_ok=True)
    exe = os.path.expanduser(BINS[engine])
    cls = engine_class(engine)
    tok = load_tokenizer("smollm2-135m")
    prompts = encode_workload(tok, "mix", "heldout", n=n)
    args = ("--gpu-memory-utilization", "0.1") if engine == "vllm" else ()
    s = EngineSettings(engine, exe, log_dir=out / "logs", args=args)
    arts = {"alone": None, "draft2": cls.speculation(2, cls.model_file("draft-s", exe)),
            "ngram3": cls.speculation(3, lookup=True)}
    with contextlib.ExitStack() as st, open(out / "rows.csv", "a", newline="") as f:
        before = set(psutil.Process().children())
        eng, pids = {}, {}
        for lab, spec in arts.items():
            eng[lab] = st.enter_context(open_engine(s, model=cls.model_file("smollm2-135m", exe), speculative=spec,
                                                    slots=8))
            new = set(psutil.Process().children()) - before
            pids[lab] = [p.pid for p in new][0]
            before |= new
            eng[lab].drive(prompts[:1], 1, 16)
            print("started", lab, pids[lab], flush=True)
        labs = list(arts)
        w = csv.writer(f)
        settle = float(os.environ.get("SETTLE", "0"))
        for r in range(rounds):
            order = labs[r % 3:] + labs[:r % 3]
            for lab in order:
                time.sleep(settle)
                c0 = {k: tree_cpu(p) for k, p in pids.items()}
                d = eng[lab].drive(prompts, b, 48)
                c1 = {k: tree_cpu(p) for k, p in pids.items()}
                cpu = [round(c1[k] - c0[k], 2) for k in labs]
                w.writerow([r, lab, time.strftime("%H:%M:%S"), round(d.tokens / d.wall_s, 2), round(d.wall_s, 2)]
                           + cpu)
                f.flush()
                print(r, lab, round(d.tokens / d.wall_s, 1), round(d.wall_s, 2), cpu, flush=True)


if __name__ == "__main__":
    a = sys.argv
    main(Path(a[1]), a[2], int(a[3]), int(a[4]) if len(a) > 4 else 8, int(a[5]) if len(a) > 5 else 8)
