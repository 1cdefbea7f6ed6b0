"""``bench --engine vllm --validate-advice``: is engine-priced advice true in the engine?

For each workload and batch size, ``recommend --engine`` (priced on the engine profile, nothing measured) picks a
configuration; the pick is measured in the engine in the same run as the engine's own grid (the target alone, the
draft at each K, each lookup at each K). Reported per workload and batch size: the pick, the best of the grid,
regret = best measured / pick measured (1.0: the pick is the measured best), the MAPE of the predicted engine
goodput over the grid and the pick, and the Spearman rank correlation of predicted vs measured. Beside the MAPE,
that of the speedups over the target alone (``mape_speedup``: measured side by side, the median over repeats of each
repeat's ratio to the target alone's, as ``recommend --engine --validate`` compares): the host's drift between the
calibration and the grid moves every goodput alike and cancels there (llama.cpp on the Emerald Rapids guest: one
calibration ran 5-40 % slower than the grid after it).

"Measured" is the fastest of a configuration's repeats, the quiet host's speed, as ``calibrate --engine`` prices
(the host's interference only slows a run: on the Emerald Rapids guest the target alone's three repeats on one
prompt set ran 18.7 / 18.9 / 25.2 tok/s, its fastest repeat 25.2-26.4 on all three sets). The regret of the
repeats' medians is reported beside it (``regret_median``), and the regret side by side (``regret_side``: the best
ratio to the target alone over the pick's, each the median over repeats of its goodput over the target alone's in
the same repeat; llama.cpp measures repeat i of every configuration in round i).

The grid's best is picked and measured on the same repeats, so it is the winner of a noisy draw and its fastest
repeat flatters it (d1 on the Emerald Rapids guest, code at b = 8: 12 of the 22 configurations' medians lay within
99-111 tok/s, the best's 124.2 was one lucky repeat of a median 108.9). ``confirm`` (``--advice-confirm R``) measures
each cell's pick, the grid's fastest few and the target alone again, R fresh rounds on the same prompts, and reports
the regret on those rounds alone (``confirm_regret``: the largest median over rounds of a configuration's goodput
over the pick's in the same round), which the grid's selection cannot flatter.
"""
from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from spectune.bench.engine_runs import EngineBenchSpec, bench_engine, label, repeat_runs, rows_writer
from spectune.bench.runner import _write_csv
from spectune.errors import ConfigError
from spectune.tune import CostModel

NAN = float("nan")
VALIDATION_FILE = "engine-validation.csv"  # bench --validate-advice --advice-validate N: recommend's measurements
CONFIRM_FILE = "engine-confirm.csv"  # bench --validate-advice --advice-confirm R: the fresh rounds


def engine_picks(spec: EngineBenchSpec, engine: Any, profile: Any, trials: int = 300,
                 say: Callable[[str], None] = lambda s: None, validate: int = 0, out: Any = None,
                 replay: Sequence[dict[str, Any]] | None = None) -> dict[tuple[str, int], Any]:
    """(workload, batch size) -> ``recommend --engine``'s pick. ``validate`` = 0: the predicted best, nothing
    measured; N > 0: ``recommend --engine --validate N``, the N best (the best of each kind first) and the target
    alone measured in the engine, the pick the measured best. They are measured on the workload's calibration
    prompts, the grid on its held-out ones: the pick is judged on prompts it was not chosen on. Every cell's
    validation is measured in one pass (``_Validation``), so one artifact is one engine start for all the cells
    that ask for it (vLLM takes 2 minutes a start); its rows go to ``out/engine-validation.csv`` as measured
    (``ENGINE_ROW_COLUMNS``; each workload's rows on its calibration prompts). ``replay``: an earlier run's
    validation rows (its ``engine-validation.csv``), taken instead of measuring (``benchmarks/reprice.py``)."""
    if not validate:
        return _picks(spec, engine, profile, trials, say, 0, lambda w: None)
    val = _Validation(engine, spec.prompts, Path(out).expanduser() / VALIDATION_FILE if out else None)
    _picks(spec, engine, profile, trials, lambda s: None, validate, val.ask)  # what each cell measures
    val.measure_all(say, replay)
    return _picks(spec, engine, profile, trials, say, validate, val.answer)  # the same search, on those numbers


def _picks(spec: EngineBenchSpec, engine: Any, profile: Any, trials: int, say: Callable[[str], None], validate: int,
           measure_for: Callable[[str], Any]) -> dict[tuple[str, int], Any]:
    """``recommend --engine [--validate N]`` at each workload and batch size, ``measure_for(workload)`` its
    ``EngineAdvice.measure``."""
    from spectune.tune.recommend import EngineAdvice, recommend

    picks = {}
    for w in spec.workloads:
        for b in spec.batch_sizes:
            n = max(spec.prompts, b)
            with tempfile.TemporaryDirectory() as tmp:
                rec = recommend(list(spec.models), workload=w, batch_size=b, profile=profile, n_trials=trials,
                                resamples=0, out=tmp, max_new_tokens=spec.max_new_tokens, validate_n=validate,
                                validate_prompts=n, say=say,
                                engine=EngineAdvice(engine, measure_for(w), f"{n} calibration prompts"))
            picks[(w, b)] = replace(rec.chosen.config, batch_size=b)
            say(f"recommend --engine {engine.name}{f' --validate {validate}' if validate else ''} on {w} at b={b}: "
                f"{label(picks[(w, b)])}")
    return picks


class _Validation:
    """``recommend --validate``'s engine measurements of every cell at once, on the workloads' calibration prompts:
    ``ask(workload)`` records what a cell would measure (nothing measured), ``measure_all`` measures each config
    on the workloads that asked for it (``bench_engine``: one start an artifact), ``answer(workload)`` replays the
    (fastest, median) repeats. recommend's search is seeded, so the replay asks for what was recorded."""

    def __init__(self, engine: Any, n_prompts: int, path: Path | None = None):
        self.engine, self.n_prompts, self.write = engine, n_prompts, rows_writer(path)
        self.asked: dict[tuple[str, int], tuple[Any, set[str]]] = {}  # (label, batch size) -> (config, workloads)
        self.measured: dict[tuple[str, str, int], list[float]] = {}  # (workload, label, b) -> tok/s by repeat

    def ask(self, workload: str) -> Callable[..., list[list[float]]]:
        def measure(configs: Any, prompts: Any, say: Any) -> list[list[float]]:
            for c in configs:
                self.asked.setdefault((label(c), c.batch_size), (c, set()))[1].add(workload)
            return [[NAN]] * len(configs)

        return measure

    def measure_all(self, say: Callable[[str], None], replay: Sequence[dict[str, Any]] | None = None) -> None:
        from spectune.decoder import encode_workload
        from spectune.models import load_tokenizer

        if replay is not None:
            self.measured = repeat_runs(replay)
            lost = [f"{w} b={b} {lab}" for (lab, b), (_, ws) in self.asked.items() for w in sorted(ws)
                    if (w, lab, b) not in self.measured]
            if lost:
                raise ConfigError(f"the replayed validation rows lack what recommend asks for now: {', '.join(lost)}")
            return
        configs = [c for c, _ in self.asked.values()]
        tok = load_tokenizer(configs[0].models[-1])
        n = max([self.n_prompts] + [c.batch_size for c in configs])
        workloads = sorted(set().union(*(ws for _, ws in self.asked.values())))
        say(f"validating recommend's {len(configs)} candidate(s) in {self.engine.name} on the calibration prompts "
            f"of {', '.join(workloads)}")
        rows = bench_engine(configs, self.engine, {w: encode_workload(tok, w, "calibration", n=n) for w in workloads},
                            n_prompts=self.n_prompts, only=lambda c, w: w in self.asked[(label(c), c.batch_size)][1],
                            say=say, write=self.write)
        self.measured = repeat_runs(rows)

    def answer(self, workload: str) -> Callable[..., list[list[float]]]:
        return lambda configs, prompts, say: [self.measured[(workload, label(c), c.batch_size)] for c in configs]


def advice_table(rows: list[dict[str, Any]], picks: dict[tuple[str, int], Any], configs: list[Any], profile: Any,
                 engine: str) -> pd.DataFrame:
    """One row per (workload, batch size): the pick and the measured best of the engine's rows, regret, MAPE,
    Spearman (see the module docstring)."""
    from spectune.profile import load_profile
    from spectune.tune.recommend import vs_alone

    prof = profile if hasattr(profile, "meta") else load_profile(profile, check_hardware=False)
    reps = repeat_runs([r for r in rows if r["backend"] == engine])
    keys = pd.MultiIndex.from_tuples(list(reps), names=["workload", "label", "batch_size"])
    fast, med = (pd.Series([f(v) for v in reps.values()], index=keys) for f in (max, np.median))
    by_label = {(label(c), c.batch_size): c for c in configs}
    out = []
    for (w, b), pick in picks.items():
        cm = CostModel(prof, w, max_new_tokens=pick.max_new_tokens)
        meas, mid = (m.xs((w, b), level=("workload", "batch_size")) for m in (fast, med))
        pred = pd.Series({lab: _predict(cm, by_label.get((lab, b))) for lab in meas.index})
        ok = pred.notna()
        err = ((pred[ok] - meas[ok]) / meas[ok]).abs()
        best = meas.idxmax()
        alone = reps.get((w, "target alone", b))
        side = pd.Series({lab: vs_alone(reps[(w, lab, b)], alone) if alone else NAN for lab in meas.index})
        sp = (pred / pred.get("target alone", NAN))[ok].drop("target alone", errors="ignore")
        out.append({"workload": w, "batch_size": b, "pick": label(pick), "pick_measured": meas.get(label(pick), NAN),
                    "pick_predicted": pred.get(label(pick), NAN), "best": best, "best_measured": meas[best],
                    "regret": meas[best] / meas.get(label(pick), NAN),
                    "regret_median": mid.max() / mid.get(label(pick), NAN),
                    "regret_side": side.max() / side.get(label(pick), NAN), "mape": float(err.mean()),
                    "mape_speedup": float(((sp - side[sp.index]) / side[sp.index]).abs().mean()),
                    "spearman": float(pred[ok].rank().corr(meas[ok].rank())), "configs": int(ok.sum())})
    return pd.DataFrame(out)


def confirm(table: pd.DataFrame, rows: Sequence[dict[str, Any]], configs: Sequence[Any], engine: Any,
            prompts: dict[str, Sequence[list[int]]], rounds: int, *, top: int = 3, n_prompts: int = 8,
            out: Any = None, say: Callable[[str], None] = lambda s: None) -> pd.DataFrame:
    """``table`` (``advice_table``) with each cell's regret on ``rounds`` fresh rounds: its pick, the ``top`` fastest
    of the grid's ``rows`` there and the target alone, measured again in ``engine`` on ``prompts`` (the grid's own;
    ``bench_engine``, a round of starts each where the engine starts in seconds), rows checkpointed to
    ``out/engine-confirm.csv``. Added: ``confirm_best`` (the fastest over the pick, by the median over rounds of
    its goodput over the pick's in the same round), ``confirm_regret`` (that median; 1.0: none beat the pick) and
    ``confirm_rounds`` (the rounds it beat the pick in, of those measured)."""
    reps = repeat_runs([r for r in rows if r["backend"] == engine.name])
    by_label = {(label(c), c.batch_size): c for c in configs}
    asked: dict[tuple[str, int], tuple[Any, set[str]]] = {}  # (label, batch size) -> (config, workloads)
    for w, b, pick in table[["workload", "batch_size", "pick"]].itertuples(index=False):
        fastest = sorted((lab for (w2, lab, b2) in reps if (w2, b2) == (w, b)), key=lambda lab: -max(reps[(w, lab, b)]))
        for lab in dict.fromkeys([pick, *fastest[:top], "target alone"]):
            if (lab, b) in by_label:
                asked.setdefault((lab, b), (by_label[(lab, b)], set()))[1].add(w)
    say(f"confirming the advice: {len(asked)} configuration(s), {rounds} fresh round(s) in {engine.name}")
    write = rows_writer(Path(out).expanduser() / CONFIRM_FILE if out else None)
    again = repeat_runs(bench_engine([c for c, _ in asked.values()], engine, prompts, repeats=rounds,
                                     n_prompts=n_prompts, only=lambda c, w: w in asked[(label(c), c.batch_size)][1],
                                     say=say, write=write))
    cells = table[["workload", "batch_size", "pick"]].itertuples(index=False)
    return pd.concat([table.reset_index(drop=True), pd.DataFrame([_confirmed(again, reps, *cell) for cell in cells])],
                     axis=1)


def _confirmed(again: dict[tuple[str, str, int], list[float]], grid: dict[tuple[str, str, int], list[float]],
               w: str, b: int, pick: str) -> dict[str, Any]:
    """``confirm``'s columns for one cell from its fresh rounds (``again``, ``grid``: ``repeat_runs``).
    ``confirm_repeat_error``: how far the fastest of a configuration's grid repeats lay from the fastest of as many
    fresh rounds, |grid - fresh| / fresh, the mean over the cell's configurations measured again: the error a
    prediction of the quiet host's speed cannot go below (the grid's MAPE is of its fastest repeats)."""
    from spectune.tune.recommend import vs_alone

    keys = [k for k in again if (k[0], k[2]) == (w, b)]
    fresh = {k: max(again[k][:len(grid[k])]) for k in keys if k in grid}  # as many rounds as the grid's repeats
    rep = [abs(max(grid[k]) - f) / f for k, f in fresh.items()]
    out = {"confirm_best": None, "confirm_regret": NAN, "confirm_rounds": "",
           "confirm_repeat_error": float(np.mean(rep)) if rep else NAN}
    mine = again.get((w, pick, b))
    if not mine:  # the pick could not be measured again (not a configuration of the grid or the picks)
        return out
    vs = {k[1]: vs_alone(again[k], mine) for k in keys}
    best = max(vs, key=lambda lab: -np.inf if np.isnan(vs[lab]) else vs[lab])  # nan last
    won = sum(a > p for a, p in zip(again[(w, best, b)], mine))
    return {**out, "confirm_best": best, "confirm_regret": vs[best], "confirm_rounds": f"{won}/{len(mine)}"}


def _predict(cm: Any, cfg: Any) -> float:
    if cfg is None:
        return NAN
    try:
        return float(cm.predict(cfg).goodput)
    except (KeyError, ValueError):
        return NAN


def save(table: pd.DataFrame, path: Any) -> Any:
    """``table`` as CSV at ``path``, atomically (bench's writer)."""
    return _write_csv(table, path)


def summary_line(table: pd.DataFrame) -> str:
    worst = table["regret"].max()
    return (f"engine advice: regret {worst:.3f} at worst ({(table['regret'] <= 1.05).sum()}/{len(table)} within "
            f"1.05; of medians {table['regret_median'].max():.3f}, {(table['regret_median'] <= 1.05).sum()}/"
            f"{len(table)}; side by side {table['regret_side'].max():.3f}, {(table['regret_side'] <= 1.05).sum()}/"
            f"{len(table)}), MAPE {np.nanmean(table['mape']):.1%} mean (of speedups over the target alone, side by "
            f"side: {np.nanmean(table['mape_speedup']):.1%}), Spearman {np.nanmean(table['spearman']):.2f} mean "
            "(fastest repeats)" + (_confirm_line(table) if "confirm_regret" in table else ""))


def _confirm_line(table: pd.DataFrame) -> str:
    reg = table["confirm_regret"]
    return (f"; on fresh rounds regret {reg.max():.3f} at worst ({(reg <= 1.05).sum()}/{len(table)} within 1.05), "
            f"the grid's fastest repeats {np.nanmean(table['confirm_repeat_error']):.1%} from theirs (mean)")
