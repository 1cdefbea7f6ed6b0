"""From a spectune config to what a draft-model speculative-decoding engine can run (a ``ServePlan``).

Serving engines run one thing: the target model alone, optionally with one draft model proposing K tokens per
step (K possibly chosen per batch size). A spectune config may ask for more. This module decides, plainly:

* ``sd`` over (draft, target) with ``combine=target``: expressible exactly.
* ``cos`` / ``naive-cos`` with ``combine=target`` over two models: the same draft and gamma_q as engine SD
  (naive-cos lacks SD's bonus token; cos with gamma_p > 1 lets the target draft gamma_p - 1 more tokens).
* ``standard`` with ``combine=target``: the target alone, no speculation.
* ``we`` / ``cd`` combinations, ``sv``'s companion, three or more models: not expressible. The nearest
  expressible configuration is target-only SD with the config's first model as draft and its gamma; its
  output follows the target alone, not the combination: ``lost`` says so.

The schedule (``schedule.json`` of ``spectune recommend``) becomes (batch size, K) pairs, K = 0 meaning no
speculation; an entry the engine cannot run (another draft model, another method) keeps the plan's K. A
schedule tuned for a combination is not used (``export`` re-derives one for target-only SD from the profile).

Proposers and draft-length policies (issue 19): ``proposer: ngram:N_MIN,N_MAX`` becomes a prompt-lookup plan over
the target (no draft model, K = gamma_0); ``ngram+model:N_MIN,N_MAX,K`` becomes a plan with both (the lookup of
up to K tokens first, the draft model's gamma_0 where it misses); ``policy: heuristic | confidence:T`` travels with
a draft-model plan.
``for_engine`` then keeps what the engine version has (``EngineSchema.features``, with a note on how its own
differs) and replaces what it lacks by the nearest it has (``EngineSchema.lacks``: one ``lost`` line each): a
fixed K for a policy, the target alone for prompt lookup, the draft model alone for ngram+model.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from spectune.config import DecodeConfig, read_json_object
from spectune.errors import ConfigError

SCHEDULE_SCHEMA = "spectune.schedule/1"


@dataclass
class ServePlan:
    """Target alone (``draft`` None) or one draft proposing ``gamma`` tokens per step for the target."""

    target: str
    draft: str | None
    gamma: int  # draft tokens per step; 0 without a draft
    schedule: list[tuple[int, int]] = field(default_factory=list)  # (batch size, K), ascending; [] = fixed gamma
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 64
    exact: bool = True  # the engine runs what the config asks for (same output distribution, same method)
    lost: list[str] = field(default_factory=list)  # what the config asks for that the plan does not do
    ngram: tuple[int, int] | None = None  # prompt lookup (N_MIN, N_MAX) proposing ``gamma`` tokens; draft is None
    ngram_k: int = 0  # with a draft too (ngram+model): the lookup proposes up to ngram_k, the draft gamma on a miss
    policy: str = "fixed"  # the draft model's draft-length policy: fixed | heuristic | confidence:T

    @property
    def speculates(self) -> bool:
        """A draft model or prompt lookup proposes tokens (else: the target alone)."""
        return self.draft is not None or self.ngram is not None

    @property
    def proposer(self) -> str:
        """The spectune proposer this plan runs: model, ngram:N_MIN,N_MAX or ngram+model:N_MIN,N_MAX,K."""
        if self.ngram is None:
            return "model"
        n = f"{self.ngram[0]},{self.ngram[1]}"
        return f"ngram+model:{n},{self.ngram_k}" if self.draft is not None else f"ngram:{n}"

    @property
    def max_k(self) -> int:
        return max([self.gamma] + [k for _, k in self.schedule])

    def k_at(self, batch_size: int) -> int:
        """The draft length this plan runs at ``batch_size`` (its schedule's K where it has one)."""
        if self.ngram is not None and self.draft is None:
            return self.gamma
        return dict(self.schedule).get(batch_size, self.gamma) if self.draft is not None else 0

    def nearest_config(self, base: DecodeConfig) -> DecodeConfig:
        """This plan at the config's batch size as a spectune config (for its predicted speedup): target-only SD
        with the K (and draft-length policy) it runs there, prompt lookup over the target, or the target alone."""
        k = self.k_at(base.batch_size)
        common = dict(combine="target", temperature=base.temperature, top_k=base.top_k, top_p=base.top_p,
                      max_new_tokens=base.max_new_tokens, batch_size=base.batch_size)
        if self.ngram is not None and self.draft is None:
            return DecodeConfig(models=(base.models[-1],), method="sd", gamma=(k,), proposer=self.proposer, **common)
        if k == 0:
            return DecodeConfig(models=(base.models[-1],), method="standard", **common)
        return DecodeConfig(models=(base.models[0], base.models[-1]), method="sd", gamma=(k, 1), policy=self.policy,
                            proposer=self.proposer, **common)


def load_schedule(path: str | os.PathLike) -> dict[str, Any]:
    """Read a ``schedule.json`` written by ``spectune recommend`` (one-line errors for a bad file)."""
    p = Path(path).expanduser()
    d = read_json_object(p, "schedule")
    if d.get("schema") != SCHEDULE_SCHEMA or not isinstance(d.get("entries"), list):
        raise ConfigError(f"schedule file '{p}' is not a spectune schedule (expected schema {SCHEDULE_SCHEMA})")
    for e in d["entries"]:
        if not isinstance(e, dict) or not {"batch_size", "method", "models", "gamma"} <= set(e):
            raise ConfigError(f"schedule file '{p}' has an entry without batch_size/method/models/gamma")
    return d


def _lost(cfg: DecodeConfig) -> list[str]:
    """Why ``cfg`` is not plain target-only draft-model SD (empty: it is, up to the notes in the module doc)."""
    out = []
    if cfg.combine != "target":
        kind = "weighted ensemble" if cfg.combine.startswith("we:") else "contrastive decoding"
        out.append(f"the combination {cfg.combine} ({kind}): engines sample from the target alone, so the "
                   "served output follows the target's distribution, not the combination's")
    if cfg.method == "sv":
        out.append(f"Speculative Verification (companion {cfg.models[1]} choosing how many drafts to verify): "
                   "engines verify every draft")
    if len(cfg.models) > 2 and not (cfg.proposer != "model" and cfg.combine == "target"):  # lookup: r = target
        dropped = ", ".join(cfg.models[1:-1])
        out.append(f"{len(cfg.models)}-model collaboration: engines take one draft and one target, so "
                   f"{dropped} is dropped")
    if cfg.method == "cos" and len(cfg.models) == 2 and cfg.gamma[1] > 1:
        out.append(f"CoS alternate proposals (the target drafting gamma_p - 1 = {cfg.gamma[1] - 1} more "
                   "token(s) after its bonus token)")
    return out


def _notes(cfg: DecodeConfig) -> list[str]:
    """Differences that do not change the output distribution (the plan stays exact)."""
    out = []
    if cfg.method == "naive-cos" and cfg.combine == "target" and len(cfg.models) == 2:
        out.append("naive-cos has no bonus token; engine SD adds one after a fully accepted draft (never slower)")
    return out


def plan_for(cfg: DecodeConfig, schedule: dict[str, Any] | None = None) -> tuple[ServePlan, list[str]]:
    """(the nearest expressible plan for ``cfg``, notes). See the module docstring."""
    if not cfg.models:
        raise ConfigError("the config names no models")
    lost = _lost(cfg)
    notes = _notes(cfg)
    sampling = dict(temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens)
    look = cfg.proposing
    if not look.drafts:  # prompt lookup over the target (r's other models only combine: lost)
        plan = ServePlan(cfg.models[-1], None, int(cfg.gamma[0]), exact=not lost, lost=lost,
                         ngram=(look.n_min, look.n_max), **sampling)
        if schedule is not None:
            notes.append(f"the schedule is not used with prompt lookup: K = {plan.gamma} at every batch size")
        return plan, notes
    if cfg.method == "standard" and cfg.combine == "target" or len(cfg.models) == 1:
        plan = ServePlan(cfg.models[-1], None, 0, exact=True, **sampling)
    else:
        plan = ServePlan(cfg.models[-1], cfg.models[0], int(cfg.gamma[0]), exact=not lost, lost=lost,
                         policy=cfg.policy, **sampling)
        if look.looks_up:  # ngram+model: the lookup first, the draft where it misses
            plan = replace(plan, ngram=(look.n_min, look.n_max), ngram_k=int(look.k or 0))
        if cfg.method == "standard":  # standard over a combination: the nearest engine run still speculates
            notes.append(f"standard {cfg.combine} runs every model every token; the nearest engine configuration "
                         f"is target-only SD with {cfg.models[0]} as draft (gamma {cfg.gamma[0]})")
    if schedule is not None and plan.draft is not None:
        if cfg.combine == "target":
            plan.schedule, more = _schedule_pairs(plan, cfg, schedule["entries"])
            notes += more
        else:  # its entries were tuned for the combination; the caller re-derives one for target-only SD
            notes.append(f"the schedule was tuned for {cfg.combine}, which engines cannot run: it is replaced by "
                         "one derived for target-only SD where a profile of these models is found, else dropped")
    return plan, notes


def _schedule_pairs(plan: ServePlan, cfg: DecodeConfig, entries: list[dict[str, Any]]
                    ) -> tuple[list[tuple[int, int]], list[str]]:
    """(batch size, K) per schedule entry; entries the engine cannot run keep the plan's gamma (noted)."""
    pairs, kept, cos_p = [], [], []
    for e in sorted(entries, key=lambda e: int(e["batch_size"])):
        b = int(e["batch_size"])
        if e["method"] == "standard":
            pairs.append((b, 0))
        elif (e["models"][0] == cfg.models[0] and e["models"][-1] == cfg.models[-1]
              and e["method"] in ("sd", "cos", "naive-cos") and e.get("combine", cfg.combine) == "target"
              and e.get("proposer", "model") == cfg.proposer and e.get("policy", "fixed") == cfg.policy):
            pairs.append((b, int(e["gamma"][0])))
            if e["method"] == "cos" and len(e["gamma"]) > 1 and int(e["gamma"][-1]) > 1:
                cos_p.append(f"b={b}")
        else:
            pairs.append((b, plan.gamma))
            how = "".join(f", {e[k]}" for k in ("proposer", "policy") if e.get(k, "model") not in ("model", "fixed"))
            kept.append(f"b={b} ({e['method']}, {','.join(e['models'])}{how})")
    notes = []
    if cos_p:
        notes.append("schedule entries with CoS gamma_p > 1 run as engine SD with the same gamma_q (the target's "
                     "extra drafts after its bonus token are dropped): " + ", ".join(cos_p))
    if kept:
        notes.append("schedule entries an engine cannot run keep gamma " f"{plan.gamma}: " + "; ".join(kept))
    return pairs, notes


FEATURE_NAMES = {"ngram": "prompt lookup", "ngram+model": "prompt lookup before the draft model",
                 "heuristic": "heuristic draft length", "confidence": "confidence stop"}


def for_engine(plan: ServePlan, schema: Any) -> tuple[ServePlan, list[str], str]:
    """(``plan`` as ``schema``'s engine version runs it, notes, differs): the proposer and the draft-length policy
    are kept where the version has them (``differs`` names one whose engine rule is not spectune's, and the note
    says how) and replaced by the nearest the version has where it lacks them (one ``lost`` line in the plan):
    prompt lookup -> the target alone, ngram+model -> the draft model alone, a policy -> a fixed K."""
    if plan.ngram is not None and plan.draft is not None:
        return _lookup_first(plan, schema)
    if plan.ngram is not None:
        feature, what = "ngram", f"the ngram:{plan.ngram[0]},{plan.ngram[1]} prompt-lookup proposer"
        instead = "the target alone"
    elif plan.draft is not None and plan.policy != "fixed":
        feature, what = plan.policy.partition(":")[0], f"the {plan.policy} draft-length policy"
        instead = f"a fixed K = {plan.gamma}"
    else:
        return plan, [], ""
    if feature in schema.features:
        note = schema.features[feature]
        return plan, [note] if note else [], FEATURE_NAMES[feature] if note else ""
    why = schema.lacks.get(feature, f"{schema.engine} {schema.version} has none")
    lost = f"{what}: {why}; exported: {instead} (the same output distribution)"
    plan = replace(plan, ngram=None, gamma=0, schedule=[]) if plan.ngram is not None else replace(plan, policy="fixed")
    return replace(plan, exact=False, lost=plan.lost + [lost]), [], ""


def _lookup_first(plan: ServePlan, schema: Any) -> tuple[ServePlan, list[str], str]:
    """``for_engine`` of an ngram+model plan: kept where the version tries a lookup before its draft model, else
    the draft model alone (then its policy as ``for_engine`` decides)."""
    if "ngram+model" in schema.features:
        policy_plan, notes, differs = for_engine(replace(plan, ngram=None, ngram_k=0), schema)
        if policy_plan.policy != plan.policy:  # the version lacks the policy: the lookup stays, the policy goes
            plan = replace(plan, policy=policy_plan.policy, exact=False, lost=policy_plan.lost)
        note = schema.features["ngram+model"]  # the header names the first note's rule: this one where it differs
        return plan, ([note] if note else []) + notes, FEATURE_NAMES["ngram+model"] if note else differs
    n_min, n_max = plan.ngram  # type: ignore[misc]
    why = schema.lacks.get("ngram+model", f"{schema.engine} {schema.version} has none")
    lost = (f"the ngram+model:{n_min},{n_max},{plan.ngram_k} proposer (prompt lookup first, the draft model where "
            f"it misses): {why}; exported: the draft model alone (the same output distribution)")
    alone = replace(plan, ngram=None, ngram_k=0, exact=False, lost=plan.lost + [lost])
    return for_engine(alone, schema)
