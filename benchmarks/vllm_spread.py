"""Where vLLM's repeat-to-repeat spread on a small CPU host comes from (issue 34's "repeats climb inside one start"):
the target alone measured again and again inside vLLM starts, under three designs.

* ``warmup``: a start per arm, in the order given (``--order A,B,C,A,B,C``). A: the engine layer's warm-up (one
  prompt at b = 1); B: every held-out prompt driven once at each batch size first; C: B with
  ``--no-enable-prefix-caching``. Then 4 repeats of b = 1 and b = 8 on code and mix, 8 prompts, 48 tokens.
* ``placement``: one start; rounds alternate vLLM's default placement ("free": its busy-polling engine core and API
  server may run on any CPU, the worker is bound to one) and "pinned" (the engine core and API server kept off the
  worker's CPU), b = 1 and 8 on code, with each process's CPU seconds per drive.
* ``waves``: one start; rounds alternate one wave of 8 requests at b = 8 (~3 s, as the grid and calibration measure)
  and four waves (32 requests, the 8 prompts cycled).

Usage: python benchmarks/vllm_spread.py OUT DESIGN [--rounds N] [--order A,B,C,...]
(vLLM from SPECTUNE_VLLM or PATH; rows to OUT/rows.csv as measured, the spread by arm printed at the end)
"""
from __future__ import annotations

import os
import sys
from itertools import product
from pathlib import Path

import pandas as pd

from spectune.bench.engine_runs import EngineBenchSpec, by_artifact, engine_config
from spectune.engines import EngineSettings, open_engine

sys.path.insert(0, str(Path(__file__).parent))
from reprice import _option  # noqa: E402

MODELS = ["draft-s", "smollm2-135m"]
ARMS = {"A": ((), False), "B": ((), True), "C": (("--no-enable-prefix-caching",), True)}
ROLES = {"worker": "VLLM::Worker", "core": "VLLM::EngineCore", "api": "vllm.entrypoints"}


def processes() -> dict[str, int]:
    """vLLM's processes by role (its worker, engine core and API server) and this client's."""
    out = {"client": os.getpid()}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        out.update({role: int(pid) for role, pat in ROLES.items() if cmd.startswith(pat) or f"-m {pat}" in cmd})
    return out


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    ticks = os.sysconf("SC_CLK_TCK")
    fields = {k: Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split() for k, p in pids.items()}
    return {k: (int(f[11]) + int(f[12])) / ticks for k, f in fields.items()}  # utime + stime


def set_cpus(pid: int, cpus: set[int]) -> None:
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(t), cpus)
        except OSError:
            pass  # a thread that ended meanwhile


def start(out: Path, args: tuple[str, ...] = ()):
    settings = EngineSettings(name="vllm", args=args, log_dir=out / "logs")
    target, groups = by_artifact([engine_config(MODELS, 1, 48)], settings)  # the target alone
    return open_engine(settings, target, groups[0][0])


def measure(eng, ps, b: int, pids: dict[str, int] | None = None, **tags) -> dict:
    c0 = cpu_seconds(pids) if pids else {}
    d = eng.drive(ps, b, 48)
    c1 = cpu_seconds(pids) if pids else {}
    return dict(tags, b=b, requests=len(ps), wall=d.wall_s, decode_goodput=d.decode_goodput, goodput=d.goodput,
                **{f"cpu_{k}": c1[k] - c0[k] for k in c1})


def warmup(out: Path, prompts: dict, rounds: int, order: list[str], rows: list, save) -> None:
    for s, arm in enumerate(order):
        args, warm_all = ARMS[arm]
        with start(out, args) as eng:
            if warm_all:
                for b, ps in product((1, 8), prompts.values()):
                    eng.drive(ps, b, 48)
            else:
                eng.drive([prompts["code"][0]], 1, 4)  # the engine layer's warm-up
            for rep in range(rounds):
                for b, (w, ps) in product((1, 8), prompts.items()):
                    rows.append(measure(eng, ps, b, start=s, arm=arm, round=rep, workload=w))
                    save()


def placement(out: Path, ps: list, rounds: int, rows: list, save) -> None:
    every = os.sched_getaffinity(0)
    with start(out) as eng:
        pids = processes()
        rest = every - os.sched_getaffinity(pids["worker"])
        for b in (1, 8):
            eng.drive(ps, b, 48)
        for rnd in range(rounds):
            for arm in ("free", "pinned") if rnd % 2 == 0 else ("pinned", "free"):
                for role in ("core", "api"):
                    set_cpus(pids[role], rest if arm == "pinned" else every)
                rows.extend(measure(eng, ps, b, pids, arm=arm, round=rnd) for b in (1, 8))
                save()


def waves(out: Path, ps: list, rounds: int, rows: list, save) -> None:
    with start(out) as eng:
        eng.drive(ps * 2, 8, 48)
        for rnd in range(rounds):
            for n in (1, 4) if rnd % 2 == 0 else (4, 1):
                rows.append(measure(eng, ps * n, 8, arm=f"{n} wave{'s' * (n > 1)}", round=rnd))
                save()


def main(argv: list[str]) -> None:
    rounds, argv = _option(argv, "--rounds")
    order, argv = _option(argv, "--order")
    out, design = Path(argv[0]), argv[1]
    out.mkdir(parents=True, exist_ok=False)
    spec = EngineBenchSpec(models=tuple(MODELS), workload="code,mix", batch_sizes=(1, 8), max_new_tokens=48, prompts=8)
    prompts = {w: ps[:8] for w, ps in spec.held_out().items()}
    rows: list[dict] = []

    def save() -> None:
        pd.DataFrame(rows).to_csv(out / "rows.csv", index=False)

    n = int(rounds or (4 if design == "warmup" else 8))
    one_start = {"placement": placement, "waves": waves}  # designs in one start, on code's prompts
    if design == "warmup":
        warmup(out, prompts, n, (order or "A,B,C,A,B,C").split(","), rows, save)
    elif design in one_start:
        one_start[design](out, prompts["code"], n, rows, save)
    else:
        raise SystemExit(f"unknown design {design!r}: warmup, placement or waves")
    d = pd.DataFrame(rows)
    print(d.groupby(["arm", "b"])["decode_goodput"].describe()[["count", "min", "50%", "max"]].round(1).to_string())


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # unwinds like Ctrl-C: a started engine is stopped
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:
        sys.exit("vllm_spread.py: interrupted (the drives so far are in OUT/rows.csv)")
