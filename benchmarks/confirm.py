"""Fresh rounds for an engine advice campaign that ran without ``--advice-confirm`` (``engines.sh``'s output): each
cell's pick, the grid's 3 fastest and the target alone measured again in the engine, R rounds on the grid's held-out
prompts, and the regret on those rounds alone (``spectune.bench.engine_advice.confirm``). The grid's best is picked
on the repeats it is measured on, so its fastest repeat flatters it; the fresh rounds do not.

Usage: python benchmarks/confirm.py ADVICE_DIR ENGINE OUT [--rounds R] [--top N] [--prompts P]
       [--max-new-tokens T] [--models a,b] [--workload W] [--engine-together S]
(defaults: engines.sh's, 5 rounds, every workload, one start alive at a time; the engine from SPECTUNE_VLLM /
SPECTUNE_LLAMACPP or PATH; OUT gets engine-confirm.csv, engine-advice.csv with the confirm_* columns and the
engine's logs). ``--workload W`` confirms that workload's cells only; ``--engine-together S`` keeps S starts alive at
once and drives them in turn each round (a workload's configurations in one set of starts where S covers them).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from spectune.bench.engine_advice import confirm, save, summary_line
from spectune.bench.engine_runs import EngineBenchSpec, measured_configs
from spectune.engines import EngineSettings

sys.path.insert(0, str(Path(__file__).parent))
from reprice import _option  # noqa: E402


def main(argv: list[str]) -> None:
    opts = {}
    for name, default in (("--rounds", "5"), ("--top", "3"), ("--prompts", "8"), ("--max-new-tokens", "48"),
                          ("--models", "draft-s,smollm2-135m"), ("--workload", ""), ("--engine-together", "1")):
        value, argv = _option(argv, name)
        opts[name] = value or default
    adv_dir, engine, out = Path(argv[0]), argv[1], Path(argv[2])
    models, mnt = opts["--models"].split(","), int(opts["--max-new-tokens"])
    measured = pd.read_csv(adv_dir / "engine-rows.csv", keep_default_na=False)
    table = pd.read_csv(adv_dir / "engine-advice.csv")
    table = table.drop(columns=[c for c in table if c.startswith("confirm_")])  # engines.sh's own fresh rounds
    if opts["--workload"]:
        table = table[table["workload"] == opts["--workload"]].reset_index(drop=True)
    out.mkdir(parents=True, exist_ok=False)  # a new folder: nothing of the campaign's is replaced
    spec = EngineBenchSpec(models=tuple(models), workload=",".join(sorted(set(table["workload"]))),
                           batch_sizes=tuple(sorted(int(b) for b in set(table["batch_size"]))), max_new_tokens=mnt,
                           prompts=int(opts["--prompts"]))
    settings = EngineSettings(name=engine, log_dir=out / "logs", together=int(opts["--engine-together"]))
    got = confirm(table, measured.to_dict("records"), measured_configs(measured, models, mnt), settings,
                  spec.held_out(), int(opts["--rounds"]), top=int(opts["--top"]), n_prompts=spec.prompts, out=out,
                  say=print)
    save(got, out / "engine-advice.csv")
    cols = ["workload", "batch_size", "pick", "best", "regret", "regret_side", "confirm_best", "confirm_regret",
            "confirm_rounds"]
    print(got[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(summary_line(got))


if __name__ == "__main__":
    import signal

    from spectune.errors import SpectuneError

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # unwinds like Ctrl-C: a started engine is stopped
    try:
        main(sys.argv[1:])
    except (SpectuneError, OSError) as e:  # an engine fault, a missing file, OUT already there: the rows so far kept
        sys.exit(f"confirm.py: {e}")
    except KeyboardInterrupt:
        sys.exit("confirm.py: interrupted (the rows measured so far are in OUT/engine-confirm.csv)")
