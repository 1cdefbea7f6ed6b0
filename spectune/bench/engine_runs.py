"""Configurations measured in a serving engine: each exported (``spectune.export``) and served from exactly its
artifact, driven on held-out prompts at its batch size, read back from the engine's counters.

``bench_engine`` serves ``bench --engine`` (the engine's rows beside the runtime's) and, through
``measure_in_engine``, ``recommend --engine --validate`` (the top configurations and the target alone, the pick
being the measured best). Configurations that export to the same artifact share one engine start; repeats
interleave over the configurations and workloads of one start, and where the engine starts in seconds
(``Engine.quick_start``: llama.cpp) each repeat is a round of starts of its own, so a host that slows over the run
slows every configuration alike (llama.cpp on the Emerald Rapids guest: the three configurations started last ran
their steps 12-27 % slower than the same drafting statistics had 25 minutes before). With ``--engine-together N``
(``EngineSettings.together``) N starts are alive at once and each repeat drives them in turn, so a host whose speed
swings within seconds swings every configuration of the set alike (``open_together``). Where the artifacts take more
than one set, the target alone joins every set (``start_sets``) and a later set's rows are levelled by their own
set's target alone (``levelled``): every ratio to the target alone is then one measured in turn (the mix validation
on the Emerald Rapids guest ran its b = 8 candidates ~12 minutes after the only target alone). A set holds one batch
size's starts where the artifacts differ by batch size (llama.cpp), so a cell's rows lie in one set where its starts
fit and nothing is levelled: one target-alone drive a round as the level of a whole set was noise of the size of the
bar (llama.cpp on the Zen 3 guest: code b = 8's grid regret 1.36 levelled, 1.06 with its starts in one set).
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from spectune.artifacts import export, local_model_paths
from spectune.bench.grid import Run
from spectune.bench.runner import _decoders, _measure_spectune, _write_csv
from spectune.config import DecodeConfig
from spectune.decoding.proposers import proposer_kind
from spectune.engines import EngineSettings, carried_sets, engine_class, open_together, set_of
from spectune.errors import ConfigError, EngineError

NAN = float("nan")


def engine_artifact(cfg: Any, engine: str, executable: str | None = None) -> tuple[Any, str]:
    """(the engine's speculative settings for ``cfg`` at its batch size, the target it serves): ``export``'s
    artifact, bundled models served from their directories here. A config the engine cannot run as tuned is a
    ``ConfigError``: measuring its nearest plan would measure something else."""
    exp = export(cfg, engine, model_paths=local_model_paths(cfg.models, engine=engine, executable=executable))
    if not exp.exact or exp.lost:
        raise ConfigError(f"{engine} cannot run {cfg.method} {cfg.proposer} as tuned: {'; '.join(exp.lost)}")
    return engine_class(engine).speculative_of(exp.rendered.artifact), str(exp.served["target"])


def by_artifact(configs: Sequence[Any], engine: EngineSettings) -> tuple[str, list[tuple[Any, list]]]:
    """(the target served, [(artifact, its configs)]): configurations that export to one artifact share one engine
    start. An attached engine runs one speculative setting, so it can serve one group only."""
    groups: dict[str, tuple[Any, list]] = {}
    target = ""
    for c in configs:
        artifact, target = engine_artifact(c, engine.name, engine.executable)
        groups.setdefault(json.dumps(artifact, sort_keys=True), (artifact, []))[1].append(c)
    if engine.url and len(groups) > 1:
        raise ConfigError("these configurations need different engine starts: an attached engine (--engine-url) "
                          "runs one speculative setting; let spectune start the engine")
    return target, list(groups.values())


def measure_in_engine(configs: Sequence[Any], engine: EngineSettings, prompts: Sequence[list[int]], *,
                      repeats: int = 3, seed: int = 0,
                      say: Callable[[str], None] = lambda s: None) -> list[list[float]]:
    """The decode goodput of each of ``configs``, each served from its own artifact and measured ``repeats`` times
    on ``prompts`` (at least its batch size of them) at concurrency = its batch size (``bench_engine``, the engine
    alone), repeat by repeat (``repeat_runs``). An engine fault is an ``EngineError`` carrying the rows measured
    before it."""
    rows = bench_engine(configs, engine, {"held-out": prompts}, repeats=repeats, seed=seed, n_prompts=len(prompts),
                        say=say)
    runs = repeat_runs(rows)
    return [runs[("held-out", label(c), c.batch_size)] for c in configs]


def repeat_runs(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str, int], list[float]]:
    """(workload, label, batch size) -> the decode goodput of each repeat, in repeat order, of ``bench_engine``'s
    ``rows`` (one label at one batch size is one artifact at one concurrency: one measurement), ``levelled``.
    Repeat i of every configuration ran in round i (side by side where the engine starts in rounds:
    ``bench_engine``)."""
    runs: dict[tuple[str, str, int], list[float]] = {}
    for r, g in sorted(levelled(rows), key=lambda rg: int(rg[0]["repeat"])):
        runs.setdefault((r["workload"], r["label"], int(r["batch_size"])), []).append(g)
    return runs


def levelled(rows: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], float]]:
    """(row, its decode goodput at the level of the first set's target alone) for each of ``rows``, the other
    sets' target-alone rows left out. Each set of starts alive at once carries its own target alone
    (``start_sets``); a row of a later set is scaled by the target alone of the first set that measured it in the
    same repeat (same backend, workload and batch size) over its own set's, so its ratio to the target alone is the
    one measured in turn beside it. Rows of one set (or of older files, without ``set``) are unchanged."""
    def key(r: dict[str, Any]) -> tuple:
        return r["backend"], r["workload"], int(r["batch_size"]), int(r["repeat"])

    alone: dict[tuple, dict[int, float]] = {}
    for r in rows:
        if r["label"] == "target alone":
            alone.setdefault(key(r), {})[set_of(r)] = float(r["decode_goodput"])
    out = []
    for r in rows:
        sets, s, g = alone.get(key(r), {}), set_of(r), float(r["decode_goodput"])
        first = min(sets, default=s)
        if s != first and r["label"] == "target alone":
            continue
        if s != first and sets.get(s, 0) > 0:
            g *= sets[first] / sets[s]
        out.append((r, g))
    return out


ENGINE_ROW_COLUMNS = ["backend", "label", "method", "proposer", "k", "batch_size", "workload", "repeat", "tokens",
                      "seconds", "decode_goodput", "acceptance_per_pos", "tokens_per_draft", "set"]


def rows_writer(path: Path | None) -> Callable[[list], None]:
    """``bench_engine``'s ``write``: its rows so far to the CSV at ``path``, atomically (None: kept nowhere)."""
    if path is None:
        return lambda rows: None
    return lambda rows: _write_csv(pd.DataFrame(rows, columns=ENGINE_ROW_COLUMNS), path)


def engine_config(models: Sequence[str], batch_size: int, max_new_tokens: int, k: int = 0, proposer: str = "model",
                  policy: str = "fixed", temperature: float = 0.0) -> Any:
    """One configuration an engine runs: the target (``models[-1]``) alone (``k`` = 0), the first model drafting K
    under ``policy``, or ``proposer`` (a lookup) proposing K, an ``ngram+model`` chain before the first model."""
    common = dict(combine="target", max_new_tokens=max_new_tokens, temperature=temperature, batch_size=batch_size)
    if k == 0:
        return DecodeConfig(models=(models[-1],), method="standard", **common)
    pair = proposer == "model" or proposer_kind(proposer) == "ngram+model"
    return DecodeConfig(models=(models[0], models[-1]) if pair else (models[-1],), method="sd",
                        gamma=(k, 1) if pair else (k,), proposer=proposer, policy=policy, **common)


def engine_grid(models: Sequence[str], ks: Sequence[int], lookups: Sequence[str], batch_sizes: Sequence[int],
                max_new_tokens: int, temperature: float = 0.0, policies: Sequence[str] = ("fixed",)) -> list[Any]:
    """The configurations ``bench --engine`` runs in the engine and the runtime alike (``engine_config``): the
    target alone, the first model drafting K for each of ``ks`` under each of ``policies`` (``confidence:P``:
    llama.cpp's p-min), each lookup proposing K, at every batch size."""
    out = []
    for b in batch_sizes:
        one = partial(engine_config, models, b, max_new_tokens, temperature=temperature)
        out.append(one())
        out += [one(k, policy=pol) for pol in policies for k in ks if len(models) > 1]
        out += [one(k, p) for p in lookups for k in ks]
    return out


def measured_configs(rows: pd.DataFrame, models: Sequence[str], max_new_tokens: int) -> list[Any]:
    """Every configuration an engine-rows.csv (``rows``) ran, the picks outside the grid (a chain under p-min) among
    them, each rebuilt from its row by ``engine_config`` and checked against its label; in the rows' order."""
    out = {}
    for r in rows.drop_duplicates(["label", "batch_size"]).itertuples(index=False):
        policy = r.label.split(" ", 2)[2] if r.label.count(" ") > 1 else "fixed"
        c = engine_config(models, int(r.batch_size), max_new_tokens, 0 if r.method == "standard" else int(r.k),
                          r.proposer, policy)
        if label(c) != r.label:
            raise ConfigError(f"cannot rebuild the measured configuration '{r.label}' (got '{label(c)}')")
        out[(r.label, int(r.batch_size))] = c
    return list(out.values())


def label(c: Any) -> str:
    if c.method == "standard":
        return "target alone"
    k, pol = c.gamma[0], "" if c.policy == "fixed" else f" {c.policy}"
    return f"{c.proposer} K={k}{pol}" if c.proposer != "model" else f"{c.models[0]} K={k}{pol}"


def bench_engine(configs: Sequence[Any], engine: EngineSettings, prompts: dict[str, Sequence[list[int]]], *,
                 repeats: int = 3, seed: int = 0, n_prompts: int = 4,
                 runtime_decoder: Callable[[Any], Any] | None = None,
                 say: Callable[[str], None] = lambda s: None, write: Callable[[list], None] = lambda rows: None,
                 only: Callable[[Any, str], bool] = lambda config, workload: True) -> list[dict[str, Any]]:
    """Every config on ``max(batch size, n_prompts)`` of each workload's prompts (``prompts``: workload -> prompts;
    ``only(config, workload)``: whether to measure it there) in the engine and, interleaved with it repeat by
    repeat, in spectune's runtime (``runtime_decoder(config)``, None: the engine only); one row per backend, config,
    workload and repeat, ``write`` called after each (the caller checkpoints them). Configs with one artifact share
    one engine start (``Engine.quick_start``: one a repeat, in rounds); ``engine.together`` starts are alive at
    once, each repeat driving them in turn (``open_together``), in the sets of ``start_sets`` (a row's ``set``)."""
    rows: list[dict[str, Any]] = []

    def one_start(eng: Any, group: Sequence[Any], rep: int, s: int, where: Callable[[Any, str], bool]) -> None:
        for c in group:
            for w, ps in [(w, ps) for w, ps in prompts.items() if where(c, w)]:
                n = max(c.batch_size, n_prompts)
                new = _measure_both(eng, c, w, rep, [ps[j % len(ps)] for j in range(n)], seed, runtime_decoder, rows)
                rows.extend({**x, "set": s} for x in new)
                write(rows)
                say(f"  [{rep + 1}/{repeats}] {w} b={c.batch_size} {label(c)}: "
                    + ", ".join(f"{x['backend']} {x['decode_goodput']:.1f}" for x in new))

    target, groups = by_artifact(configs, engine)
    rounds = [[r] for r in range(repeats)] if engine_class(engine.name).quick_start else [list(range(repeats))]
    sets = start_sets(groups, engine.together)
    in_sets = Counter(id(g) for chunk in sets for g in chunk)
    carried = {g for g, n in in_sets.items() if n > 1}  # the target alone, where it joins several sets
    for n_round, reps in enumerate(rounds, 1):
        for s, chunk in enumerate(sets):
            tag = f", round {n_round}/{len(rounds)}" if len(rounds) > 1 else ""
            say(f"{engine.name} start set {s + 1}/{len(sets)}{tag}: " + ", ".join(label(g[0]) for _, g in chunk))
            wheres = [_needed(sets, s, i, prompts, only) if id(g) in carried else only for i, g in enumerate(chunk)]
            try:
                specs = [(a, max(c.batch_size for c in g)) for a, g in chunk]
                with open_together(engine, target, specs, say) as starts:
                    for eng in starts.engines:
                        eng.drive([next(iter(prompts.values()))[0]], 1, 4)  # warm-up, not recorded
                    for rep in reps:  # starts alive at once: driven in turn, from another one each repeat
                        for i, eng in starts.in_turn(rep):
                            one_start(eng, chunk[i][1], rep, s, wheres[i])
            except EngineError as e:  # a later round's start or warm-up: the rows of the rounds before are kept
                raise EngineError(str(e), e.rows or rows) from None
    return rows


def start_sets(groups: Sequence[tuple[Any, list]], together: int) -> list[list[tuple[Any, list]]]:
    """``by_artifact``'s groups in the sets of starts alive at once, ``together`` a set, in order, a set never
    holding starts of different batch sizes where the batch sizes take sets of their own (llama.cpp: one artifact a
    batch size), so the rows of a cell (workload, batch size) lie in as few sets as ``together`` allows: in one, and
    nothing is levelled, where a batch size's starts fit. Where the target alone is among them and they take more
    than one set, it joins every set of the batch sizes it serves, so each set's ratios to it are measured in turn
    (``levelled``), where that set needs it (``_needed``). Starts whose batch sizes overlap are one class (vLLM: an
    artifact serves every batch size, so a pick measured at b = 1 only shares the grid's sets; kept apart, it took a
    set and a target-alone start of its own, and its cell's rows two sets)."""
    is_alone = lambda g: all(c.method == "standard" for c in g[1])  # noqa: E731
    sizes = lambda g: frozenset(c.batch_size for c in g[1])  # noqa: E731
    alone, by_size = next((g for g in groups if is_alone(g)), None), {}
    size_class = _overlapping([sizes(g) for g in groups if g is not alone])
    for g in groups:
        if g is not alone:
            by_size.setdefault(size_class(sizes(g)), []).append(g)
    if len(by_size) < 2 or together < 2:  # one batch size, or one start at a time: nothing to keep apart
        return carried_sets(groups, together, is_alone)
    serves = lambda bs: alone is not None and bool(sizes(alone) & bs)  # noqa: E731
    sets = [chunk for bs, gs in by_size.items()
            for chunk in carried_sets([alone, *gs] if serves(bs) else gs, together, is_alone)]
    return sets if alone is None or any(map(serves, by_size)) else [*sets, [alone]]  # it serves none: a set alone


def _overlapping(size_sets: Sequence[frozenset[int]]) -> Callable[[frozenset[int]], frozenset[int]]:
    """The class of a set of batch sizes among ``size_sets``: the union of every one it overlaps, transitively."""
    classes: list[frozenset[int]] = []
    for bs in size_sets:
        joined = [c for c in classes if c & bs]
        classes = [c for c in classes if not c & bs] + [bs.union(*joined)]
    return lambda bs: next(c for c in classes if c >= bs)


def _needed(sets: Sequence[Sequence[tuple[Any, list]]], s: int, i: int, prompts: dict[str, Any],
            only: Callable[[Any, str], bool]) -> Callable[[Any, str], bool]:
    """``only`` for the target alone (start ``i`` of set ``s``) where it is carried into several sets: where
    another start of set ``s`` measures the same workload and batch size (the level of its ratios), and in the
    first set it joins also where no other start of any set does (every cell keeps its target alone)."""
    def cells(chunk: Sequence[tuple[Any, list]], skip: Any) -> set[tuple[str, int]]:
        return {(w, c.batch_size) for g in chunk if g is not skip for c in g[1] for w in prompts if only(c, w)}

    me = sets[s][i]
    wanted = cells(sets[s], me)
    if not any(g is me for earlier in sets[:s] for g in earlier):
        wanted |= {(w, c.batch_size) for c in me[1] for w in prompts} - set().union(*(cells(x, me) for x in sets))
    return lambda c, w: (w, c.batch_size) in wanted and only(c, w)


def _measure_both(eng: Any, c: Any, workload: str, rep: int, pool: Sequence[list[int]], seed: int,
                  runtime_decoder: Callable[[Any], Any] | None, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``c`` on ``pool`` in the engine, then (``runtime_decoder``) in spectune's runtime: their rows."""
    ps = list(pool)
    try:
        d = eng.drive(ps, c.batch_size, c.max_new_tokens, c.temperature, seed)
    except EngineError as e:
        raise EngineError(str(e), rows) from None
    out = [_row(eng.name, c, workload, rep, d.tokens, d.wall_s, d.decode_goodput, d.counters.acceptance_per_pos(),
                d.counters.tokens_per_draft)]
    if runtime_decoder is not None:  # acceptance by position: accepted at i per block, the engine counters' form
        m = _measure_spectune(runtime_decoder(c), Run("spectune", c), ps, seed)
        out.append(_row("spectune", c, workload, rep, m["tokens"], m["seconds"],
                        m["tokens"] / m["decode_seconds"] if m["decode_seconds"] else NAN,
                        m.get("acceptance_per_pos", []), NAN))
    return out


def _row(backend: str, c: Any, workload: str, rep: int, tokens: int, seconds: float, decode_goodput: float,
         acceptance: Sequence[float], tokens_per_draft: float) -> dict[str, Any]:
    """One ``ENGINE_ROW_COLUMNS`` row: ``c`` measured by ``backend`` (the engine's name, or spectune)."""
    return {"backend": backend, "label": label(c), "method": c.method, "proposer": c.proposer,
            "k": c.gamma[0] if c.method != "standard" else 0, "batch_size": c.batch_size, "workload": workload,
            "repeat": rep, "tokens": tokens, "seconds": seconds, "decode_goodput": decode_goodput,
            "acceptance_per_pos": json.dumps([round(a, 4) for a in acceptance]), "tokens_per_draft": tokens_per_draft}


def engine_summary(rows: Sequence[dict[str, Any]]) -> Any:
    """Per (label, batch size): each backend's median decode tok/s (``levelled``), its speedup over the same
    backend's target alone, and the largest per-position acceptance difference (engine vs runtime)."""
    df = pd.DataFrame([{**r, "decode_goodput": g} for r, g in levelled(rows)])
    keys = ["workload", "label", "batch_size"]
    med = df.groupby(keys + ["backend"], sort=False)["decode_goodput"].median().unstack("backend")
    out = med.copy()
    for be in med.columns:
        alone = {(w, b): v for (w, lab, b), v in med[be].items() if lab == "target alone"}
        out[f"{be} vs its target alone"] = [med.loc[i, be] / alone.get((i[0], i[2]), NAN) for i in med.index]
    acc = df.groupby(keys + ["backend"], sort=False)["acceptance_per_pos"].last().unstack("backend")
    if acc.shape[1] == 2:
        out["acceptance max |diff|"] = [_acc_diff(*acc.loc[i].tolist()) for i in acc.index]
    return out.reset_index()


def _acc_diff(a: str, b: str) -> float:
    x, y = json.loads(a or "[]"), json.loads(b or "[]")
    return max((abs(p - q) for p, q in zip(x, y)), default=NAN)


@dataclass(frozen=True)
class EngineBenchSpec:
    """What ``bench --engine`` measures: ``engine_grid`` over these settings, plus ``picks`` (configs as exported,
    e.g. recommend's), on ``prompts`` held-out prompts of ``workload``."""

    models: tuple[str, ...]
    ks: tuple[int, ...] = (1, 2, 3, 4)
    lookups: tuple[str, ...] = ()
    batch_sizes: tuple[int, ...] = (1,)
    max_new_tokens: int = 64
    workload: str = "mix"  # or a comma list: every config runs on each in the same engine start
    prompts: int = 4
    repeats: int = 3
    picks: tuple[Any, ...] = ()
    policies: tuple[str, ...] = ("fixed",)  # the draft model's policies: fixed, confidence:P (an engine's p-min)

    @property
    def workloads(self) -> list[str]:
        return [w.strip() for w in self.workload.split(",") if w.strip()]

    def configs(self) -> list[Any]:
        grid = engine_grid(self.models, self.ks, self.lookups, self.batch_sizes, self.max_new_tokens,
                           policies=self.policies)
        one: dict[tuple[str, int], Any] = {}
        for c in [*grid, *self.picks]:  # rows are keyed by label and batch size: one start for each, the grid's
            one.setdefault((label(c), c.batch_size), c)
        return list(one.values())

    def held_out(self) -> dict[str, list[list[int]]]:
        """workload -> the held-out prompts its rows run on (``max(prompts, largest batch size)`` of them)."""
        from spectune.decoder import encode_workload
        from spectune.models import load_tokenizer

        tok = load_tokenizer(self.models[-1])
        return {w: encode_workload(tok, w, n=max(self.prompts, max(self.batch_sizes))) for w in self.workloads}


def run_engine_bench(spec: EngineBenchSpec, engine: EngineSettings, *, out: Any = None, runtime: bool = True,
                     dtype: str = "auto", say: Callable[[str], None] = lambda s: None) -> tuple[list[dict], Any]:
    """(rows, summary) of ``spec`` in ``engine`` and, interleaved, spectune's runtime; rows checkpointed to
    ``out/engine-rows.csv`` as measured, the summary to ``out/engine-summary.csv``."""
    from spectune.models import load_models

    prompts = spec.held_out()
    decoder = None
    if runtime:
        loaded = load_models(list(spec.models), dtype=dtype)
        decoder = _decoders(dict(zip(spec.models, loaded)), "cpu", "eager", None)
    out_dir = Path(out).expanduser() if out else None
    rows = bench_engine(spec.configs(), engine, prompts, repeats=spec.repeats, n_prompts=spec.prompts,
                        runtime_decoder=decoder, say=say, write=rows_writer(out_dir and out_dir / "engine-rows.csv"))
    summary = engine_summary(rows)
    if out_dir:
        _write_csv(summary, out_dir / "engine-summary.csv")
    return rows, summary
