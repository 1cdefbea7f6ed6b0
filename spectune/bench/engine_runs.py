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
