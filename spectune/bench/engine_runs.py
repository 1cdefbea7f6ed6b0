"""Configurations measured in a serving engine: each exported (``spectune.export``) and served from exactly its
artifact, driven on held-out prompts at its batch size, read back from the engine's counters.

``measure_in_engine`` serves ``recommend --engine --validate`` (the top configurations and the target alone, the
pick being the measured best) and ``bench --engine`` (the engine's rows beside the runtime's). Configurations that
export to the same artifact share one engine start; repeats interleave over the batch sizes of one start.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from spectune.engines import Drive, EngineSettings, open_engine
from spectune.errors import ConfigError, EngineError

NAN = float("nan")


@dataclass
class EngineRun:
    """One configuration's measurements in the engine."""

    config: Any  # the spectune DecodeConfig measured
    artifact: dict[str, Any]  # what the engine was started with ({}: the target alone)
    drives: list[Drive] = field(default_factory=list)

    @property
    def goodput(self) -> float:
        """Median decode goodput over the repeats (tok/s over all clients)."""
        vals = [d.decode_goodput for d in self.drives]
        return float(np.median(vals)) if vals else NAN

    def spread(self) -> float:
        """(max - min) / median of the repeats' decode goodput."""
        vals = [d.decode_goodput for d in self.drives]
        return float((max(vals) - min(vals)) / np.median(vals)) if len(vals) > 1 else 0.0

    def acceptance_per_pos(self) -> list[float]:
        if not self.drives:
            return []
        c = sum((d.counters for d in self.drives[1:]), self.drives[0].counters)
        return c.acceptance_per_pos()

    def row(self) -> dict[str, Any]:
        c = self.config
        return {"method": c.method, "models": list(c.models), "gamma": list(c.gamma), "proposer": c.proposer,
                "batch_size": c.batch_size, "artifact": json.dumps(self.artifact, sort_keys=True),
                "decode_goodput": [d.decode_goodput for d in self.drives], "goodput": self.goodput}


def engine_artifact(cfg: Any, engine: str, local: bool = True) -> tuple[dict[str, Any], str]:
    """(the engine's speculative settings for ``cfg`` at its batch size, the target it serves): ``export``'s
    artifact, bundled models served from their directories here (``local``). A config the engine cannot run as
    tuned is a ``ConfigError``: measuring its nearest plan would measure something else."""
    from spectune.export import export
    from spectune.models import bundled

    paths = {m: str(bundled.resolve(m)) for m in cfg.models if local and m in bundled.names()}
    exp = export(cfg, engine, model_paths=paths)
    if not exp.exact or exp.lost:
        raise ConfigError(f"{engine} cannot run {cfg.method} {cfg.proposer} as tuned: {'; '.join(exp.lost)}")
    return dict(exp.rendered.artifact or {}), str(exp.served["target"])


def measure_in_engine(configs: Sequence[Any], engine: EngineSettings, prompts: Sequence[list[int]], *,
                      repeats: int = 3, seed: int = 0, say: Callable[[str], None] = lambda s: None) -> list[EngineRun]:
    """Each of ``configs`` served from its own artifact and measured ``repeats`` times on ``prompts`` (at least
    the config's batch size of them) at concurrency = its batch size. An engine fault is an ``EngineError``
    carrying the rows measured before it."""
    runs = [EngineRun(c, engine_artifact(c, engine.name)[0]) for c in configs]
    target = engine_artifact(configs[0], engine.name)[1]
    groups: dict[str, list[EngineRun]] = {}
    for r in runs:
        groups.setdefault(json.dumps(r.artifact, sort_keys=True), []).append(r)
    if engine.url and len(groups) > 1:
        raise ConfigError("these configurations need different engine starts: an attached engine (--engine-url) "
                          "runs one speculative setting; let spectune start the engine")
    for i, (key, group) in enumerate(groups.items(), 1):
        say(f"{engine.name} start {i}/{len(groups)}: {key if key != '{}' else 'the target alone'}")
        try:
            with open_engine(engine, target, group[0].artifact) as eng:
                eng.drive([prompts[0]], 1, 4)  # warm-up, not recorded
                for rep in range(repeats):
                    for r in group:
                        b = r.config.batch_size
                        ps = [prompts[j % len(prompts)] for j in range(max(b, len(prompts)))]
                        r.drives.append(eng.drive(ps, b, r.config.max_new_tokens, r.config.temperature, seed))
                        say(f"  b={b} repeat {rep + 1}: {r.drives[-1].decode_goodput:.1f} tok/s")
        except EngineError as e:
            raise EngineError(str(e), [r.row() for r in runs if r.drives]) from None
    return runs


ENGINE_ROW_COLUMNS = ["backend", "label", "method", "proposer", "k", "batch_size", "workload", "repeat", "tokens",
                      "seconds", "decode_goodput", "acceptance_per_pos", "tokens_per_draft"]


def engine_grid(models: Sequence[str], ks: Sequence[int], lookups: Sequence[str], batch_sizes: Sequence[int],
                max_new_tokens: int, temperature: float = 0.0) -> list[Any]:
    """The configurations ``bench --engine`` runs in the engine and the runtime alike: the target alone, the
    first model drafting K for each of ``ks``, each lookup proposing K, at every batch size."""
    from spectune.config import DecodeConfig

    common = dict(combine="target", max_new_tokens=max_new_tokens, temperature=temperature)
    out = []
    for b in batch_sizes:
        out.append(DecodeConfig(models=(models[-1],), method="standard", batch_size=b, **common))
        out += [DecodeConfig(models=(models[0], models[-1]), method="sd", gamma=(k, 1), batch_size=b, **common)
                for k in ks if len(models) > 1]
        out += [DecodeConfig(models=(models[-1],), method="sd", gamma=(k,), proposer=p, batch_size=b, **common)
                for p in lookups for k in ks]
    return out


def label(c: Any) -> str:
    if c.method == "standard":
        return "target alone"
    k = c.gamma[0]
    return f"{c.proposer} K={k}" if c.proposer != "model" else f"{c.models[0]} K={k}"


def bench_engine(configs: Sequence[Any], engine: EngineSettings, prompts: dict[str, Sequence[list[int]]], *,
                 repeats: int = 3, seed: int = 0, n_prompts: int = 4,
                 runtime_decoder: Callable[[Any], Any] | None = None,
                 say: Callable[[str], None] = lambda s: None, write: Callable[[list], None] = lambda rows: None
                 ) -> list[dict[str, Any]]:
    """Every config on ``max(batch size, n_prompts)`` of each workload's prompts (``prompts``: workload -> prompts)
    in the engine and, interleaved with it repeat by repeat, in spectune's runtime (``runtime_decoder(config)``,
    None: the engine only); one row per backend, config, workload and repeat, ``write`` called after each (the
    caller checkpoints them). Configs with one artifact share one engine start."""
    rows: list[dict[str, Any]] = []
    runs = [EngineRun(c, engine_artifact(c, engine.name)[0]) for c in configs]
    target = engine_artifact(configs[0], engine.name)[1]
    groups: dict[str, list[EngineRun]] = {}
    for r in runs:
        groups.setdefault(json.dumps(r.artifact, sort_keys=True), []).append(r)
    for i, group in enumerate(groups.values(), 1):
        say(f"{engine.name} start {i}/{len(groups)}: {label(group[0].config)}")
        with open_engine(engine, target, group[0].artifact) as eng:
            eng.drive([next(iter(prompts.values()))[0]], 1, 4)  # warm-up, not recorded
            for rep in range(repeats):
                for r in group:
                    for w, ps in prompts.items():
                        n = max(r.config.batch_size, n_prompts)
                        rows += _measure_both(eng, r.config, w, rep, [ps[j % len(ps)] for j in range(n)], seed,
                                              runtime_decoder, rows)
                        write(rows)
                        say(f"  [{rep + 1}/{repeats}] {w} b={r.config.batch_size} {label(r.config)}: " + ", ".join(
                            f"{x['backend']} {x['decode_goodput']:.1f}" for x in rows[-2:]
                            if x["label"] == label(r.config) and x["workload"] == w))
    return rows


def _measure_both(eng: Any, c: Any, workload: str, rep: int, pool: Sequence[list[int]], seed: int,
                  runtime_decoder: Callable[[Any], Any] | None, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``c`` on ``pool`` in the engine, then (``runtime_decoder``) in spectune's runtime: their rows."""
    from spectune.bench.grid import Run
    from spectune.bench.runner import _measure_spectune

    ps = list(pool)
    try:
        d = eng.drive(ps, c.batch_size, c.max_new_tokens, c.temperature, seed)
    except EngineError as e:
        raise EngineError(str(e), rows) from None
    out = [_engine_row(eng.name, c, rep, d) | {"workload": workload}]
    if runtime_decoder is not None:
        m = _measure_spectune(runtime_decoder(c), Run("spectune", c), ps, seed)
        out.append(_runtime_row(c, rep, m) | {"workload": workload})
    return out


def _engine_row(name: str, c: Any, rep: int, d: Drive) -> dict[str, Any]:
    return {"backend": name, "label": label(c), "method": c.method, "proposer": c.proposer,
            "k": c.gamma[0] if c.method != "standard" else 0, "batch_size": c.batch_size, "repeat": rep,
            "tokens": d.tokens, "seconds": d.wall_s, "decode_goodput": d.decode_goodput,
            "acceptance_per_pos": json.dumps([round(a, 4) for a in d.counters.acceptance_per_pos()]),
            "tokens_per_draft": d.counters.tokens_per_draft}


def _runtime_row(c: Any, rep: int, m: dict[str, Any]) -> dict[str, Any]:
    """spectune's runtime measurement of ``c`` as an engine-bench row (acceptance by position: accepted at i per
    block, the engine counters' form)."""
    return {"backend": "spectune", "label": label(c), "method": c.method, "proposer": c.proposer,
            "k": c.gamma[0] if c.method != "standard" else 0, "batch_size": c.batch_size, "repeat": rep,
            "tokens": m["tokens"], "seconds": m["seconds"],
            "decode_goodput": m["tokens"] / m["decode_seconds"] if m["decode_seconds"] else NAN,
            "acceptance_per_pos": json.dumps([round(a, 4) for a in m.get("acceptance_per_pos", [])]),
            "tokens_per_draft": NAN}


def engine_summary(rows: Sequence[dict[str, Any]]) -> Any:
    """Per (label, batch size): each backend's median decode tok/s, its speedup over the same backend's target
    alone, and the largest per-position acceptance difference (engine vs runtime)."""
    import pandas as pd

    df = pd.DataFrame(rows)
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

    @property
    def workloads(self) -> list[str]:
        return [w.strip() for w in self.workload.split(",") if w.strip()]

    def configs(self) -> list[Any]:
        grid = engine_grid(self.models, self.ks, self.lookups, self.batch_sizes, self.max_new_tokens)
        keys = {_key(c) for c in grid}
        return grid + [c for c in self.picks if _key(c) not in keys]


def _key(c: Any) -> str:
    return json.dumps({k: v for k, v in c.to_dict().items() if k not in ("dtype", "seed", "extra")}, sort_keys=True)


def run_engine_bench(spec: EngineBenchSpec, engine: EngineSettings, *, out: Any = None, runtime: bool = True,
                     dtype: str = "auto", say: Callable[[str], None] = lambda s: None) -> tuple[list[dict], Any]:
    """(rows, summary) of ``spec`` in ``engine`` and, interleaved, spectune's runtime; rows checkpointed to
    ``out/engine-rows.csv`` as measured, the summary to ``out/engine-summary.csv``."""
    from pathlib import Path

    import pandas as pd

    from spectune.bench.runner import _decoders, _write_csv
    from spectune.decoder import encode_prompt
    from spectune.models import load_models, load_tokenizer
    from spectune.workloads import load_workload

    tok = load_tokenizer(spec.models[-1])
    prompts = {}
    for w in spec.workloads:
        wl = load_workload(w)
        if not wl.heldout:
            raise ConfigError(f"workload '{w}' has no held-out prompts")
        prompts[w] = [encode_prompt(tok, p) for p in wl.heldout[:max(spec.prompts, max(spec.batch_sizes))]]
    decoder = None
    if runtime:
        loaded = load_models(list(spec.models), dtype=dtype)
        decoder = _decoders(dict(zip(spec.models, loaded)), "cpu", "eager", None)
    out_dir = Path(out).expanduser() if out else None
    write = (lambda rows: _write_csv(pd.DataFrame(rows, columns=ENGINE_ROW_COLUMNS), out_dir / "engine-rows.csv")
             ) if out_dir else (lambda rows: None)
    rows = bench_engine(spec.configs(), engine, prompts, repeats=spec.repeats, n_prompts=spec.prompts,
                        runtime_decoder=decoder, say=say, write=write)
    summary = engine_summary(rows)
    if out_dir:
        _write_csv(summary, out_dir / "engine-summary.csv")
    return rows, summary
