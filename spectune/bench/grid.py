"""What ``spectune bench`` measures: a grid of spectune configurations plus the baselines a user would run
instead (the target alone, HF transformers assisted generation), each identified by a stable key."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Sequence

from spectune import checks
from spectune.config import DecodeConfig
from spectune.decoding.proposers import proposer_kind
from spectune.decoding.registry import METHODS
from spectune.errors import ConfigError
from spectune.tune.space import SearchSpace


def canonical(cfg: DecodeConfig) -> DecodeConfig:
    """``standard`` with r = target runs only the target: the same run as the target alone."""
    from dataclasses import replace

    if cfg.method == "standard" and cfg.combine == "target" and len(cfg.models) > 1:
        return replace(cfg, models=cfg.models[-1:], gamma=(1,))
    return cfg


@dataclass(frozen=True)
class Run:
    """One measured thing at one batch size: a spectune config, or an HF baseline (``kind`` hf-*)."""

    kind: str  # "spectune", "hf-target" (plain generate), "hf-assisted" (assistant_model=draft), "hf-lookup"
    config: DecodeConfig  # hf-*: models, gamma (assisted: gamma[0] drafts per step), sampling, batch size
    hf_defaults: bool = False  # hf-assisted with HF's own draft-length defaults instead of gamma[0]

    @property
    def key(self) -> str:
        c = self.config
        g = ",".join(map(str, c.gamma)) if self.kind == "spectune" else ("HF" if self.hf_defaults else str(c.gamma[0]))
        method = c.method if self.kind == "spectune" else self.kind
        return f"{method}|{','.join(c.models)}|{c.combine}|g{g}|b{c.batch_size}|t{c.temperature:g}" + _adaptive(c)

    @property
    def label(self) -> str:
        c = self.config
        if self.kind == "hf-target":
            return "HF generate (target alone)"
        if self.kind == "hf-assisted":
            policy = f" {c.policy}" if c.policy != "fixed" else ""
            return "HF assisted (HF defaults)" if self.hf_defaults else f"HF assisted{policy} gamma={c.gamma[0]}"
        if self.kind == "hf-lookup":
            return f"HF prompt lookup {c.proposer} gamma={c.gamma[0]}"
        if c.method == "standard":
            return "target alone" if len(c.models) == 1 else f"standard {c.combine}"
        how = f" {c.proposer}" if c.proposer != "model" else ""
        how += f" {c.policy}" if c.policy != "fixed" else ""
        return f"{c.method}{how} gamma={','.join(map(str, c.gamma))}" + (f" {c.combine}" if c.combine != "target"
                                                                         else "")


def _adaptive(c: DecodeConfig) -> str:
    """Key suffix of a non-default proposer or draft-length policy (none for model + fixed: old keys stay)."""
    return (f"|p={c.proposer}" if c.proposer != "model" else "") + (f"|policy={c.policy}" if c.policy != "fixed"
                                                                     else "")


def is_adaptive_key(key: str) -> bool:
    """A run whose proposal length is not a fixed gamma of model 0 (ngram lookups, adaptive policies): the
    closed-form theorems do not describe it."""
    return "|p=" in key or "|policy=" in key


@dataclass
class BenchSpec:
    """The grid: methods x proposal lengths x batch sizes x temperatures over one model set and combination."""

    models: tuple[str, ...]
    combine: str = "target"
    methods: tuple[str, ...] = ("standard", "sd", "naive-cos", "cos")
    gammas: tuple[int, ...] = (1, 2, 3, 4)  # the first model's proposal length
    gamma_rest: tuple[int, ...] = (1,)  # every other model's (cos: gamma_p)
    batch_sizes: tuple[int, ...] = (1,)
    temperatures: tuple[float, ...] = (0.0,)
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 32
    hf: bool = True  # HF assisted generation and plain HF generate of the target, side by side
    hf_defaults: bool = True  # also HF assisted generation with HF's own draft-length defaults
    hf_gammas: tuple[int, ...] = ()  # more K for HF assisted generation (e.g. the recommended one)
    proposers: tuple[str, ...] = ()  # ngram:N_MIN,N_MAX (sd over r's models, k = each of gammas) or
    #                                  ngram+model:N_MIN,N_MAX,K (sd over the models, draft gamma = each, policies)
    policies: tuple[str, ...] = ()  # draft-length policies beside fixed, for each method of sd, naive-cos, cos
    extra: list[DecodeConfig] = field(default_factory=list)  # more configs (e.g. the recommended one)

    def __post_init__(self) -> None:
        self.models = tuple(self.models)
        if len(self.models) < 2:
            raise ConfigError(f"bench needs at least 2 models (smallest first), got {len(self.models)}")
        if not self.gammas or min(self.gammas) < 1 or not self.gamma_rest or min(self.gamma_rest) < 1:
            raise ConfigError("every proposal length in the grid must be an integer >= 1")
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise ConfigError("batch sizes must be integers >= 1")
        if "sv" in self.methods and len(self.models) < 3:
            raise ConfigError("sv needs a draft, a companion and a target (3+ models)")

        for m in self.methods:
            if m not in METHODS:
                raise ConfigError(f"unknown method {checks.show(m)}: use some of {', '.join(METHODS)}")
        if not self.temperatures:
            raise ConfigError("give at least one temperature")
        for t in self.temperatures:
            checks.real(t, "temperature", lo=0)
        checks.integer(self.max_new_tokens, "max-new-tokens", lo=1)

    def with_search_space(self) -> "BenchSpec":
        """This spec measuring recommend's whole search space (every method, proposer and gamma up to
        max(gammas), at each batch size and temperature) instead of the methods x gammas grid."""
        from dataclasses import replace

        extra = []
        for t in self.temperatures:
            space = SearchSpace(self.models, self.combine, self.batch_sizes, max(self.gammas), temperature=t,
                                top_k=self.top_k, top_p=self.top_p, max_new_tokens=self.max_new_tokens)
            extra += space.enumerate()
        return replace(self, methods=(), extra=list(self.extra) + extra)

    def config(self, method: str, models: Sequence[str], gamma: Sequence[int], b: int, t: float,
               combine: str | None = None, **how: str) -> DecodeConfig:
        """A configuration of this grid's sampling settings and length (``how``: proposer, policy)."""
        return DecodeConfig(models=tuple(models), method=method, combine=combine or self.combine, gamma=tuple(gamma),
                            temperature=t, top_k=self.top_k, top_p=self.top_p, max_new_tokens=self.max_new_tokens,
                            batch_size=b, **how)

    def _adaptive_runs(self, b: int, t: float) -> list[Run]:
        """ngram proposers (over r's models: the target alone for r = target), ngram+model proposers (over every
        model, each policy) and adaptive policies."""
        n = len(self.models)
        r_models = self.models[-1:] if self.combine == "target" else self.models
        out = []
        for p, g in itertools.product(self.proposers, self.gammas):
            if proposer_kind(p) == "ngram":
                out.append(Run("spectune", self.config("sd", r_models, (g,) + (1,) * (len(r_models) - 1), b, t,
                                                     proposer=p)))
                continue
            for pol in ("fixed",) + tuple(x for x in self.policies if x != "fixed"):  # ngram+model: g = the draft's
                gam = (g,) + self.gamma_rest[:1] * (n - 1)
                out.append(Run("spectune", self.config("sd", self.models, gam, b, t, proposer=p, policy=pol)))
        for pol, m, g in itertools.product(self.policies, self.methods, self.gammas):
            if METHODS[m].policies:
                out.append(Run("spectune", self.config(m, self.models, (g,) + self.gamma_rest[:1] * (n - 1), b, t,
                                                     policy=pol)))
        return out

    def is_standard(self, run: Run) -> bool:
        """Standard collaborative decoding over the grid's models and combination (the speedup reference)."""
        c = run.config
        if run.kind != "spectune" or c.method != "standard":
            return False
        return self.is_target(run) if self.combine == "target" else (c.models == self.models and
                                                                     c.combine == self.combine)

    def is_target(self, run: Run) -> bool:
        c = run.config
        return run.kind == "spectune" and c.method == "standard" and c.models == self.models[-1:]

    def runs(self) -> list[Run]:
        """Every run of the grid, baselines first: the target alone, standard over the combination, then each
        method x gamma, then the HF rows (assisted generation runs one sequence at a time: batch size 1 only)."""
        n = len(self.models)
        out: list[Run] = []
        for t, b in itertools.product(self.temperatures, self.batch_sizes):
            out.append(Run("spectune", self.config("standard", self.models[-1:], (1,), b, t, "target")))
            if self.combine != "target":  # with r = target, standard runs the target alone: the run above
                out.append(Run("spectune", self.config("standard", self.models, (1,) * n, b, t)))
            for m in self.methods:
                if m == "standard":
                    continue
                rests = self.gamma_rest if m == "cos" else self.gamma_rest[:1]
                for g, r in itertools.product(self.gammas, rests):
                    out.append(Run("spectune", self.config(m, self.models, (g,) + (r,) * (n - 1), b, t)))
            out += self._adaptive_runs(b, t)
            for c in self.extra:
                if c.batch_size == b and c.temperature == t:
                    out.append(Run("spectune", canonical(c)))
            if self.hf and b == 1:
                pair = (self.models[0], self.models[-1])
                out.append(Run("hf-target", self.config("standard", self.models[-1:], (1,), b, t, "target")))
                if self.hf_defaults:
                    out.append(Run("hf-assisted", self.config("sd", pair, (1, 1), 1, t, "target"), hf_defaults=True))
                for g in sorted(set(self.gammas) | set(self.hf_gammas)):
                    out.append(Run("hf-assisted", self.config("sd", pair, (g, 1), 1, t, "target")))
                # HF prompt lookup / policies beside ngram / policy rows
                from spectune.bench.hf_baseline import hf_adaptive_runs

                out += hf_adaptive_runs(self, t)
        seen, uniq = set(), []
        for r in out:
            if r.key not in seen:
                seen.add(r.key)
                uniq.append(r)
        return uniq
