"""``export(config, engine)``: a spectune config (+ schedule) as what a serving engine consumes.

Steps: 1. the nearest expressible plan (``_plan.py``: what is exact, what is lost), with the proposer and the
draft-length policy the engine version has (``for_engine``); 2. the profile, when one fits, prices the config and
the plan and derives a target-only schedule where the user's cannot be used (``_predict.py``; a configuration the
cost model cannot price is said so in one line); 3. model names as the engine expects them (``_names.py``); 4. the
engine's renderer writes its artifact; 5. every key / flag is checked against the engine schema (``_schema.py``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spectune.config import DecodeConfig
from spectune.errors import ConfigError
from spectune.artifacts import hf, llamacpp, native, sglang, trtllm, vllm
from spectune.artifacts._names import serve_name
from spectune.artifacts._plan import ServePlan, for_engine, load_schedule, plan_for
from spectune.artifacts._predict import derive_schedule, find_export_profile, predictions
from spectune.artifacts._render import Rendered
from spectune.artifacts._schema import DEFAULT_VERSION, ENGINES, SCHEMAS, EngineSchema, violations

TITLES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM", "hf": "transformers",
          "llamacpp": "llama.cpp", "native": "spectune"}
RENDERERS = {"vllm": vllm.render, "sglang": sglang.render, "trtllm": trtllm.render, "hf": hf.render,
             "llamacpp": llamacpp.render}


@dataclass
class Export:
    engine: str
    schema: EngineSchema  # engine version and the source its keys were taken from
    rendered: Rendered
    plan: ServePlan
    exact: bool  # the engine runs what the config asks for (same output distribution, same method)
    lost: list[str]  # what the config asks for that the engine cannot do
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # model names that will not resolve on a server as-is
    predicted: dict[str, Any] | None = None  # config vs plan, from the profile (see _predict.py)
    config: DecodeConfig | None = None  # the config exported
    profile: Any = None  # the Profile that priced it, if any
    differs: str = ""  # the engine's own rule for this (e.g. "prompt lookup") is not spectune's: see the first note
    served: dict[str, str | None] = field(default_factory=dict)  # "target" / "draft": the names the engine loads

    @property
    def engine_version(self) -> str:
        return self.schema.version

    def header(self) -> list[str]:
        if not self.exact:
            verdict = "NOT exact: " + "; ".join(self.lost)
        elif self.differs:
            verdict = (f"exact: the engine runs this config's method and output distribution; its own {self.differs} "
                       "rule differs in detail (first note)")
        else:
            verdict = "exact: the engine runs this config as tuned"
        return [f"spectune export for {TITLES[self.engine]} {self.engine_version} ({self.schema.source})", verdict]

    def text(self) -> str:
        """The artifact as ``--out`` writes it."""
        return self.rendered.text(self.header())

    def report(self) -> str:
        """What ``spectune export`` prints: the artifact, how to run it, what is lost, the predicted numbers."""
        r = self.rendered
        lines = ([f"# {h}" for h in self.header()] if r.fmt == "json" else []) + [self.text().rstrip()]
        for kind, snippet in r.usage.items():
            if not (r.fmt == "sh" and kind == "shell"):  # a command line is its own usage
                lines += ["", f"# {kind}:", snippet]
        if self.plan.schedule:
            lines += ["", "# schedule (batch size: K, 0 = no speculation): "
                      + ", ".join(f"{b}: {k}" for b, k in self.plan.schedule)]
        for title, items in (("lost", self.lost), ("note", self.notes), ("warning", self.warnings)):
            lines += [f"# {title}: {x}" for x in items]
        p = self.predicted
        if p:
            lines.append(f"# predicted at batch size {p['batch_size']} (profile {p['profile']}):")
            if "config_unpriced" in p:
                lines.append(f"#   the config: not priced by this profile ({p['config_unpriced']})")
            if "config" in p:
                c = p["config"]
                lines.append(f"#   the config: {c['goodput']:.1f} tok/s, {c['speedup_vs_standard']:.2f}x standard, "
                             f"{c['speedup_vs_target']:.2f}x the target alone")
            if "plan_unpriced" in p:
                lines.append(f"#   this export: prediction unavailable ({p['plan_unpriced']})")
            elif not self.exact or "config" not in p:
                n = p["plan"]
                lines.append(f"#   this export (nearest expressible): {n['goodput']:.1f} tok/s, "
                             f"{n['speedup_vs_target']:.2f}x the target alone")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "engine_version": self.engine_version, "schema_source": self.schema.source,
                "schema_release": self.schema.release,
                "format": self.rendered.fmt, "artifact": self.rendered.artifact, "usage": self.rendered.usage,
                "exact": self.exact, "differs": self.differs, "lost": self.lost, "notes": self.notes,
                "warnings": self.warnings,
                "schedule": [list(p) for p in self.plan.schedule], "predicted": self.predicted}


def _load_config(config: DecodeConfig | str | os.PathLike) -> tuple[DecodeConfig, Path | None]:
    if isinstance(config, DecodeConfig):
        return config, None
    return DecodeConfig.load(config), Path(config)


def export(config: DecodeConfig | str | os.PathLike, engine: str, *, engine_version: str | None = None,
           schedule: str | os.PathLike | dict | None = None, profile: Any = None,
           model_paths: dict[str, str] | None = None, workload: str | None = None) -> Export:
    """Translate ``config`` for ``engine`` (see the module docstring).

    ``schedule``: a ``schedule.json`` path or its dict; default: the ``schedule.json`` beside a config file,
    if any. ``profile``: price the config and the plan with this profile (default: the config's, the
    schedule's, or the one found for its models). ``model_paths``: name -> path on the serving machine.
    """
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine '{engine}': use one of {', '.join(ENGINES)}")
    version = engine_version or DEFAULT_VERSION[engine]
    if version not in SCHEMAS[engine]:
        raise ConfigError(f"unknown {engine} version '{version}': known {', '.join(SCHEMAS[engine])}")
    cfg, cfg_path = _load_config(config)
    _check_model_paths(model_paths or {}, cfg)
    if isinstance(schedule, (str, os.PathLike)):
        schedule = load_schedule(schedule)
    elif schedule is None and cfg_path is not None and (cfg_path.parent / "schedule.json").is_file():
        schedule = load_schedule(cfg_path.parent / "schedule.json")
    schema = SCHEMAS[engine][version]
    if engine == "native":
        r = native.render(cfg)
        return _checked(Export(engine, schema, r, plan_for(cfg)[0], True, [], config=cfg))

    # 1. plan (as this engine version runs it); 2. profile: predictions, and a schedule where the user's cannot be used
    plan, notes = plan_for(cfg, schedule)
    combined_ok = plan.exact  # before the engine's proposer / policy: a lost policy keeps the user's schedule usable
    plan, more, differs = for_engine(plan, schema)
    notes = more + notes
    retuned = plan.proposer != cfg.proposer and plan.draft is not None  # the engine dropped the lookup in front
    if retuned and plan.schedule:
        plan.schedule = []
        notes.append("the schedule's K were tuned with the lookup in front of the draft; the engine runs the draft "
                     "alone, so they are not used")
    hints = [cfg.extra.get("profile", ""), (schedule or {}).get("profile", "")]
    prof, more = find_export_profile(cfg, profile, [h for h in hints if isinstance(h, str)], engine)
    notes += more
    predicted = None
    if prof is not None:
        wl = workload or (schedule or {}).get("workload")
        if plan.draft is not None and (not combined_ok or retuned) and schedule is not None:
            plan.schedule = derive_schedule(cfg, prof, wl, plan.proposer, plan.policy)
            notes.append("schedule derived from the profile for target-only SD (best K per calibrated batch size)")
        predicted, more = _predict(cfg, plan, prof, wl)
        notes += more
    # 3. names; 4. render
    overrides = model_paths or {}
    target, w_t = serve_name(plan.target, engine, overrides)
    draft, w_d = serve_name(plan.draft, engine, overrides) if plan.draft else (None, None)
    r = RENDERERS[engine](plan, draft, target, schema, cfg.batch_size)
    out = Export(engine, schema, r, plan, plan.exact, plan.lost, notes + r.notes, [w for w in (w_d, w_t) if w],
                 predicted, cfg, prof, differs, {"target": target, "draft": draft})
    return _checked(out)


def _predict(cfg: DecodeConfig, plan: ServePlan, prof: Any, wl: str | None
             ) -> tuple[dict[str, Any] | None, list[str]]:
    """``predictions`` of the config and the plan (the cost model simulates every method, proposer and policy),
    or (None, [one line]) where this profile cannot price them (e.g. lookup traces it never recorded)."""
    try:
        return predictions(cfg, plan, prof, wl), []
    except (KeyError, ValueError, NotImplementedError) as e:
        why = str(e.args[0] if e.args else e)
        return None, [f"predicted speedups unavailable: the profile cannot price this export ({why})"]


def _check_model_paths(model_paths: dict[str, str], cfg: DecodeConfig) -> None:
    """``--model-path NAME=PATH`` must name a model of the config (a typo would be silently ignored)."""
    unknown = [n for n in model_paths if n not in cfg.models]
    if unknown:
        raise ConfigError(f"--model-path {', '.join(unknown)}: no such model in the config (its models: "
                          f"{', '.join(cfg.models)})")


def _checked(e: Export) -> Export:
    """5. every exported key / flag and enumerated value must belong to the engine version's schema, and no
    removed flag may appear (a bug here, never the user's input)."""
    r = e.rendered
    if e.schema.sections:
        by_section = {sec: Rendered("json", d).keys() for sec, d in r.artifact.items()}
    else:
        by_section = {"": r.keys()}
    bad = violations(e.schema, by_section, r.items())
    if bad:
        raise AssertionError(f"{e.engine} {e.engine_version} export breaks its schema: {'; '.join(bad)}")
    return e
