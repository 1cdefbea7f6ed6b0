"""recommend --engine vllm --validate 4 for mix at b = 1 and 8, the candidates' starts alive at once and driven in
turn (--engine-together 5): the picks and the validation rows. Usage: python valturn.py PROFILE OUT"""
import sys
from pathlib import Path

from spectune.bench.engine_advice import engine_picks
from spectune.bench.engine_runs import EngineBenchSpec, label
from spectune.engines import EngineSettings


def main(prof: str, out: str) -> None:
    Path(out).mkdir(parents=True, exist_ok=False)
    spec = EngineBenchSpec(models=("draft-s", "smollm2-135m"), workload="mix", batch_sizes=(1, 8), max_new_tokens=48,
                           prompts=8)
    settings = EngineSettings(name="vllm", log_dir=Path(out) / "logs", together=5)
    picks = engine_picks(spec, settings, prof, validate=4, out=out, say=print)
    for (w, b), c in picks.items():
        print(f"PICK {w} b={b}: {label(c)}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
