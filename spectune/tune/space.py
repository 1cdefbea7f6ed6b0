"""The search space: ``SearchSpace(...)(trial) -> DecodeConfig``, replayable with ``optuna.trial.FixedTrial``.

Parameters (names are stable across trials, so a study's trials replay and samplers share statistics; each
parameter always has the same choices):

* ``method``: the registered methods (``spectune/decoding/registry.py``) that apply, plus two space-only
  variants: ``cos-n`` (CoS over every model, Algorithm 2) when r = ``target`` over three or more models (with
  ``we``/``cd`` over n models ``cos`` already uses all n), and ``sd-ngram`` (sd with a lookup proposer) when
  ``lookups`` are given. Methods the cost model cannot price are left out by the caller (``methods`` /
  ``extra_methods``; ``sv`` only when asked for). With ``lookups`` also ``sd-ngram+model``: sd whose lookup
  proposes where it matches and whose default proposer model drafts where it does not (``ngram+model``).
* ``proposer``: the default proposer model (first model of the config). With ``target`` any model but the
  target, which then runs as the pair (proposer, target); with ``we`` any model, the weights move with it (r does
  not change); with ``cd`` the amateur/expert order is the combination itself, so the proposer is fixed.
* ``ngram``: the lookup proposer of ``sd-ngram`` (one of ``lookups``, e.g. ``ngram:1,3``); it proposes up to
  ``gamma_0`` tokens and every model of r verifies (r = ``target``: the target alone). In ``sd-ngram+model`` the
  lookup proposes up to the longest calibrated length (``gamma_max``, at most 10) and ``gamma_0`` is the draft's.
* ``gamma_<i>``: proposal length of the config's i-th model, 1..min(10, calibrated gamma_max); only the
  lengths the method uses are suggested (sd / naive-cos: the proposer's; cos: every model's).
* ``policy``: model 0's draft-length policy (``policies``; e.g. fixed, heuristic, confidence:0.4) for the methods
  that take one.
* ``batch_size``: among the calibrated batch sizes (or fixed).

The user's combination is never changed: every config decodes exactly the same r (``target`` keeps the same
last model; ``we`` permutes weights with the models).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Sequence

from spectune.config import DecodeConfig
from spectune.decoding.combine import parse_combination
from spectune.decoding.registry import METHODS
from spectune.errors import ConfigError

GAMMA_CAP = 10
SPACE_ONLY = {"cos-n": "cos", "sd-ngram": "sd", "sd-ngram+model": "sd"}  # space variants -> the method they run
LOOKUP_METHODS = {"sd-ngram": "ngram", "sd-ngram+model": "ngram+model"}  # space method -> its proposer kind


@dataclass
class SearchSpace:
    models: tuple[str, ...]  # the user's models, smallest first
    combine: str = "target"
    batch_sizes: tuple[int, ...] = (1,)
    gamma_max: int = GAMMA_CAP
    methods: tuple[str, ...] | None = None  # default: every method that applies
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 64
    seed: int = 0
    extra_methods: tuple[str, ...] = field(default_factory=tuple)  # e.g. ("sv",) when supported
    lookups: tuple[str, ...] = ()  # lookup proposers to search (sd-ngram), e.g. ("ngram:1,3",)
    policies: tuple[str, ...] = ("fixed",)  # draft-length policies to search

    def __post_init__(self) -> None:
        self.models = tuple(self.models)
        if len(self.models) < 2:
            raise ConfigError(f"tuning needs at least 2 models, got {len(self.models)}")
        self.combination = parse_combination(self.combine, len(self.models))
        self.combine = self.combination.spec
        self.kind = self.combine.split(":")[0]
        self.batch_sizes = tuple(sorted(set(int(b) for b in self.batch_sizes)))
        self.gamma_hi = max(1, min(GAMMA_CAP, int(self.gamma_max)))
        self.lookups, self.policies = tuple(self.lookups), tuple(self.policies) or ("fixed",)
        self.method_choices = self._methods()
        if self.kind == "target":
            self.proposers = self.models[:-1]
        elif self.kind == "we":
            self.proposers = self.models
        else:  # cd (order is the combination) or anything else order-dependent
            self.proposers = self.models[:1]

    def _methods(self) -> tuple[str, ...]:
        avail = [n for n, m in METHODS.items() if not m.needs_profile and m.min_models <= len(self.models)]
        if self.kind == "target" and len(self.models) >= 3:
            avail.append("cos-n")
        if self.lookups:
            avail += ["sd-ngram", "sd-ngram+model"]
        avail += [m for m in self.extra_methods if m not in avail]
        if self.methods:
            bad = [m for m in self.methods if m not in avail]
            if bad:
                raise ConfigError(f"method(s) {', '.join(bad)} are not available here (available: {', '.join(avail)})")
            avail = [m for m in avail if m in self.methods]
        return tuple(avail)

    # ------------------------------------------------------------------ helpers

    def arrange(self, proposer: str, all_models: bool) -> tuple[tuple[str, ...], str]:
        """(models, combination text) with ``proposer`` first; r unchanged."""
        if self.kind == "target":
            if all_models:
                rest = [m for m in self.models[:-1] if m != proposer]
                return (proposer, *rest, self.models[-1]), "target"
            return (proposer, self.models[-1]), "target"
        if self.kind == "we":
            w = dict(zip(self.models, self.combine[3:].split(",")))
            order = (proposer, *[m for m in self.models if m != proposer])
            return order, "we:" + ",".join(w[m] for m in order)
        return self.models, self.combine

    def _models(self, method: str, proposer: str) -> tuple[tuple[str, ...], str]:
        """The config's (models, combination) for a space method and default proposer."""
        if method == "standard":
            return self.models, self.combine
        if method == "sd-ngram":  # the models of r verify the lookups: the target alone for r = target
            return (self.models[-1:], "target") if self.kind == "target" else (self.models, self.combine)
        return self.arrange(proposer, all_models=(method in ("cos-n", "sv") or self.kind != "target"))

    def lookup_proposer(self, method: str, lookup: str) -> str:
        """The config's proposer for a lookup of ``lookups`` (``ngram:N_MIN,N_MAX``) under a space method."""
        if method != "sd-ngram+model":
            return lookup
        return f"ngram+model:{lookup.partition(':')[2]},{self.gamma_hi}"

    def config(self, method: str, proposer: str, gamma: Sequence[int] | None, batch_size: int,
               lookup: str = "model", policy: str = "fixed") -> DecodeConfig:
        models, comb = self._models(method, proposer)
        g = list(gamma or []) + [1] * (len(models) - len(gamma or []))
        return DecodeConfig(models=models, method=SPACE_ONLY.get(method, method), combine=comb,
                            gamma=tuple(g[: len(models)]), temperature=self.temperature, top_k=self.top_k,
                            top_p=self.top_p, seed=self.seed, max_new_tokens=self.max_new_tokens,
                            batch_size=batch_size, proposer=self.lookup_proposer(method, lookup), policy=policy)

    def _gammas_used(self, method: str, proposer: str) -> int:
        """How many gamma_<i> the method reads (sd-ngram: gamma_0, the lookup's length)."""
        run = METHODS[SPACE_ONLY.get(method, method)]
        return run.gamma_count(len(self._models(method, proposer)[0])) if method != "sd-ngram" else 1

    def _takes_policy(self, method: str) -> bool:
        return method != "sd-ngram" and METHODS[SPACE_ONLY.get(method, method)].policies

    # ------------------------------------------------------------------ the suggest function

    def __call__(self, trial: Any) -> DecodeConfig:
        method = trial.suggest_categorical("method", list(self.method_choices))
        b = (trial.suggest_categorical("batch_size", list(self.batch_sizes)) if len(self.batch_sizes) > 1
             else self.batch_sizes[0])
        if method == "standard":
            return self.config("standard", self.models[0], None, b)
        lookup, proposer = "model", self.proposers[0]
        if method in LOOKUP_METHODS:
            lookup = (trial.suggest_categorical("ngram", list(self.lookups)) if len(self.lookups) > 1
                      else self.lookups[0])
        if method != "sd-ngram" and len(self.proposers) > 1:
            proposer = trial.suggest_categorical("proposer", list(self.proposers))
        gamma = [trial.suggest_int(f"gamma_{i}", 1, self.gamma_hi) for i in range(self._gammas_used(method, proposer))]
        policy = "fixed"
        if self._takes_policy(method) and len(self.policies) > 1:
            policy = trial.suggest_categorical("policy", list(self.policies))
        elif self._takes_policy(method):
            policy = self.policies[0]
        return self.config(method, proposer, gamma, b, lookup, policy)

    def probes(self, method: str, batch_size: int | None = None) -> list[DecodeConfig]:
        """One configuration of ``method`` per default proposer (or lookup), gamma 1, fixed policy: what a caller
        prices to learn whether the method can be priced at all."""
        b = self.batch_sizes[0] if batch_size is None else batch_size
        if method in LOOKUP_METHODS:
            return [self.config(method, self.proposers[0], [1], b, lookup=x) for x in self.lookups]
        heads = self.models[:1] if method == "standard" else self.proposers
        return [self.config(method, p, None, b) for p in heads]

    def enumerate(self) -> list[DecodeConfig]:
        """Every distinct configuration of the space (what ``__call__`` can return), batch sizes included."""
        out, seen = [], set()
        for b, method in itertools.product(self.batch_sizes, self.method_choices):
            heads = ([(self.models[0], "model")] if method == "standard" else
                     [(self.proposers[0], x) for x in self.lookups] if method == "sd-ngram" else
                     [(p, x) for p in self.proposers for x in self.lookups] if method == "sd-ngram+model" else
                     [(p, "model") for p in self.proposers])
            policies = self.policies if self._takes_policy(method) else ("fixed",)
            for (proposer, lookup), policy in itertools.product(heads, policies):
                used = 0 if method == "standard" else self._gammas_used(method, proposer)
                for gamma in itertools.product(range(1, self.gamma_hi + 1), repeat=used):
                    cfg = self.config(method, proposer, list(gamma), b, lookup, policy)
                    key = (cfg.models, cfg.method, cfg.combine, cfg.gamma, cfg.batch_size, cfg.proposer, cfg.policy)
                    if key not in seen:
                        seen.add(key)
                        out.append(cfg)
        return out


def suggest(trial: Any, space: SearchSpace) -> DecodeConfig:
    """``suggest(trial, space)``: the same as ``space(trial)`` (bind with functools.partial)."""
    return space(trial)
