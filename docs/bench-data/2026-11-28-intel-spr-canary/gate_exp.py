"""Canary beside repeated drives in vLLM starts: the target alone, draft-s K = 2 and ngram:1,3 K = 3, ROUNDS starts
each (in turn), DRIVES drives at b = 8 a start (the 8 held-out mix prompts x 48 tokens) with a 16-token b = 1
canary between drives. Rows appended to OUT/rows.csv: round, label, drive, time, tok/s, canary before, after
(gate_an.py analyses them).

Usage: python gate_exp.py OUT ROUNDS DRIVES
"""
import csv
import os
import sys
import time
from pathlib import Path

from spectune.decoder import encode_workload
from spectune.engines import EngineSettings, engine_class, open_engine
from spectune.models import load_tokenizer


def main(out, rounds, nd):
    out.mkdir(parents=True, exist_ok=True)
    exe = os.path.expanduser("~/.cache/spectune-engines/vllm-0.32.0/bin/vllm")
    cls = engine_class("vllm")
    tok = load_tokenizer("smollm2-135m")
    prompts = encode_workload(tok, "mix", "heldout", n=8)
    canary_ids = tok.encode("The weather in the mountains today is")
    s = EngineSettings("vllm", exe, log_dir=out / "logs")
    arts = {"target alone": None, "draft-s K=2": cls.speculation(2, cls.model_file("draft-s", exe)),
            "ngram:1,3 K=3": cls.speculation(3, lookup=True)}
    with open(out / "rows.csv", "a", newline="") as f:
        w = csv.writer(f)
        for r in range(rounds):
            for lab, spec in arts.items():
                with open_engine(s, model=cls.model_file("smollm2-135m", exe), speculative=spec, slots=8) as e:
                    e.drive(prompts[:1], 1, 16)
                    c = 16 / e.complete(canary_ids, 16).seconds
                    for i in range(nd):
                        d = e.drive(prompts, 8, 48)
                        c2 = 16 / e.complete(canary_ids, 16).seconds
                        w.writerow([r, lab, i, time.strftime("%H:%M:%S"), round(d.tokens / d.wall_s, 2), round(c, 2),
                                    round(c2, 2)])
                        f.flush()
                        print(r, lab, i, round(d.tokens / d.wall_s, 1), round(c, 1), round(c2, 1), flush=True)
                        c = c2


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
