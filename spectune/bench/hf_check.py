"""``spectune export CONFIG --engine hf --check``: run the exported artifact in HF's own ``generate`` (assisted
generation with its draft-length policy, or prompt lookup) on the workload's held-out prompts and set what it
measures beside what spectune predicts for that configuration.

Measured with ``spectune bench``'s runner (interleaved repeats, EOS held back so every run decodes the same
tokens, batch 1 as assisted generation and prompt lookup run): the artifact, HF ``generate`` of the target alone
and spectune's target alone (the reference of the loop efficiency). Predicted from the profile at batch size 1:
the number ``export`` prints for the plan (spectune's cost model: SD with K drafts, or the prompt lookup / policy
it runs where the cost model prices them; unavailable otherwise) and, for a fixed K, the same step priced as HF
runs it (``hf_price.py``: its assistant re-encodes a token after each rejection). What neither prices is HF's
Python loop; the row's loop efficiency (renewal price at the forward times HF paid / measured) says how much.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable

import pandas as pd

from spectune.artifacts.hf import hf_k, settings_of
from spectune.bench.grid import BenchSpec, Run
from spectune.bench.hf_price import predict_hf_goodput
from spectune.bench.runner import bench
from spectune.config import DecodeConfig
from spectune.errors import ConfigError
from spectune.profile import profile_names
from spectune.tune.cost import CostModel

NAN = float("nan")


@dataclass
class _CheckSpec(BenchSpec):
    """The check's three runs: spectune's target alone, HF ``generate`` of the target alone and the artifact's run
    (one model is enough: prompt lookup needs no draft)."""

    artifact_run: Run | None = None

    def __post_init__(self) -> None:
        self.models = tuple(self.models)

    def runs(self) -> list[Run]:
        t = self.temperatures[0]
        out = [Run("spectune", self.config("standard", self.models[-1:], (1,), 1, t, "target")),
               Run("hf-target", self.config("standard", self.models[-1:], (1,), 1, t, "target"))]
        return out + ([self.artifact_run] if self.artifact_run and self.artifact_run.kind != "hf-target" else [])


@dataclass
class HFCheck:
    k: int  # drafts per step the artifact runs (0: plain generate on the target; the start K of a heuristic)
    workload: str
    prompts: int
    repeats: int
    max_new_tokens: int
    summary: pd.DataFrame  # the bench summary of every measured run
    row: dict[str, Any]  # the artifact's summary row
    predicted: float  # spectune's cost model, decode tok/s (NaN without a profile or where it cannot price)
    predicted_hf: float  # the same with HF's step priced (fixed K only)
    profile: str | None  # the profile's path, None without one
    how: str = ""  # what HF runs, in words ("K = 3", "prompt lookup ngram:1,3, K = 3", ...)
    unpriced: str = ""  # why there is no prediction, where a profile is there but cannot price the plan

    @property
    def measured(self) -> float:
        return float(self.row["decode_goodput"])

    def error(self, predicted: float) -> float:
        """(predicted - measured) / measured."""
        return (predicted - self.measured) / self.measured if self.measured > 0 else NAN

    def to_dict(self) -> dict[str, Any]:
        """What ``--json`` prints under "check"."""
        fin = lambda x: float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None  # noqa: E731
        r = self.row
        return {"k": self.k, "runs": self.how, "workload": self.workload, "prompts": self.prompts,
                "repeats": self.repeats, "unpriced": self.unpriced or None,
                "max_new_tokens": self.max_new_tokens, "measured_decode_goodput": fin(self.measured),
                "measured_goodput": fin(r["goodput"]), "predicted_goodput": fin(self.predicted),
                "predicted_goodput_hf_step": fin(self.predicted_hf), "error": fin(self.error(self.predicted)),
                "error_hf_step": fin(self.error(self.predicted_hf)), "draft_lengths": r["draft_lengths"],
                "alpha": fin(r["alpha"]), "loop_efficiency": fin(r["loop_efficiency"]), "profile": self.profile}

    def report(self) -> str:
        r, pct = self.row, lambda x: f"{x:+.1%}" if math.isfinite(x) else "-"  # noqa: E731
        what = self.how or (f"K = {self.k}" if self.k else "no assistant: plain generate()")
        lines = [f"# check: HF runs this artifact ({what}) on {self.prompts} held-out prompt(s) of {self.workload}, "
                 f"{self.repeats} repeat(s), {self.max_new_tokens} tokens each, batch 1",
                 f"#   measured: {self.measured:.1f} tok/s decoding ({r['goodput']:.1f} with the prompt prefill)"]
        if self.k:
            lines.append(f"#   HF's steps by draft length: {r['draft_lengths']}; accepted per step "
                         f"{r['mean_accepted_length']:.2f}, alpha {r['alpha']:.2f}")
        if self.profile is None:
            lines.append("#   predicted: no profile holds these models (spectune calibrate) -- measured only")
        elif self.unpriced:
            lines.append(f"#   predicted: unavailable ({self.unpriced}) -- measured only")
        else:
            lines += [f"#   predicted by spectune's cost model: {self.predicted:.1f} tok/s "
                      f"({pct(self.error(self.predicted))} vs measured; profile {self.profile})"]
            if math.isfinite(self.predicted_hf):
                lines.append(f"#   predicted with HF's own step (its assistant re-encodes a token after each "
                             f"rejection): {self.predicted_hf:.1f} tok/s ({pct(self.error(self.predicted_hf))})")
        if self.k and math.isfinite(r["loop_efficiency"]):
            lines.append(f"#   not priced, HF's Python loop (an assistant generate() call per step): loop efficiency "
                         f"{r['loop_efficiency']:.2f} (measured / price at the forward times HF paid)")
        for label in ("HF generate (target alone)", "target alone"):
            other = self.summary[self.summary["label"] == label]
            if len(other):
                lines.append(f"#   {label}: {float(other['decode_goodput'].iloc[0]):.1f} tok/s decoding")
        return "\n".join(lines)


def check_hf_export(exp: Any, *, workload: str = "mix", prompts: int = 4, repeats: int = 3, seed: int = 0,
                    out: str | os.PathLike | None = None, say: Callable[[str], None] = lambda s: None) -> HFCheck:
    """Measure ``exp`` (an ``Export`` for engine hf) as described in the module docstring."""
    from spectune.bench.hf_baseline import hf_artifact

    if exp.engine != "hf":
        raise ConfigError(f"--check runs the artifact in HF transformers: use --engine hf, not {exp.engine}")
    plan, k = exp.plan, hf_k(exp.plan)
    run = artifact_run(plan, exp.config)
    _same_artifact(hf_artifact(run), exp.rendered.artifact)
    spec = _CheckSpec(models=run.config.models, methods=(), gammas=(max(k, 1),), temperatures=(plan.temperature,),
                      top_k=plan.top_k, top_p=plan.top_p, max_new_tokens=plan.max_new_tokens, hf_defaults=False,
                      artifact_run=run)
    res = bench(spec, workload=workload, prompts=prompts, repeats=repeats, seed=seed, out=out, say=say)
    row = res.summary.set_index("key").loc[run.key].to_dict()
    predicted, predicted_hf, prof, unpriced = _predictions(exp, k, workload)
    return HFCheck(k, workload, prompts, repeats, plan.max_new_tokens, res.summary, row, predicted, predicted_hf,
                   prof, _how(plan, k), unpriced)


def artifact_run(plan: Any, cfg: Any) -> Run:
    """The bench run of what HF executes for ``plan`` (the export's, at batch 1): prompt lookup, assisted
    generation at the K HF runs with the plan's draft-length policy, or plain generate."""
    k = hf_k(plan)
    common = dict(combine="target", temperature=plan.temperature, top_k=plan.top_k, top_p=plan.top_p,
                  max_new_tokens=plan.max_new_tokens, batch_size=1)
    if plan.ngram is not None:
        return Run("hf-lookup", DecodeConfig(models=(plan.target,), method="sd", gamma=(k,),
                                             proposer=f"ngram:{plan.ngram[0]},{plan.ngram[1]}", **common))
    if k == 0:  # the check's own HF generate row (``_CheckSpec.runs``): the same key
        return Run("hf-target", DecodeConfig(models=(plan.target,), method="standard", gamma=(1,), **common))
    return Run("hf-assisted", DecodeConfig(models=(plan.draft, plan.target), method="sd", gamma=(k, 1),
                                           policy=plan.policy, **common))


def _how(plan: Any, k: int) -> str:
    if plan.ngram is not None:
        return f"prompt lookup ngram:{plan.ngram[0]},{plan.ngram[1]}, K = {k}"
    if k == 0:
        return "no assistant: plain generate()"
    return f"K = {k}" if plan.policy == "fixed" else f"{plan.policy} from K = {k}"


def _same_artifact(run_art: dict[str, Any], exported: dict[str, Any]) -> None:
    """The bench row must run exactly the exported settings (the installed transformers version aside)."""
    if settings_of(run_art) != settings_of(exported):
        raise AssertionError(f"the HF run would not execute the exported artifact: {run_art} != {exported}")


def _predictions(exp: Any, k: int, workload: str) -> tuple[float, float, str | None, str]:
    """(spectune's predicted goodput of the plan HF runs at batch 1, the same with HF's step priced -- fixed K
    only --, the profile's path, why there is no prediction); NaN and None without a profile."""
    from dataclasses import replace

    prof, plan = exp.profile, exp.plan
    if prof is None:
        return NAN, NAN, None, ""
    path = str(getattr(prof, "path", None) or "in memory")
    cm = CostModel(prof, workload, max_new_tokens=exp.config.max_new_tokens)
    base = replace(exp.config, models=profile_names(prof, exp.config.models), batch_size=1)
    cfg = plan.nearest_config(base)
    try:
        predicted = cm.predict(cfg).goodput
        fixed_k = plan.ngram is None and plan.policy == "fixed"
        return predicted, predict_hf_goodput(cm, cfg.models[0], cfg.models[-1], k) if fixed_k else NAN, path, ""
    except (KeyError, ValueError, NotImplementedError) as e:
        return NAN, NAN, path, f"the cost model cannot price it: {e.args[0] if e.args else e}"
