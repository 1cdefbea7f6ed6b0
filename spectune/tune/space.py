"""The search space: ``SearchSpace(...)(trial) -> DecodeConfig``, replayable with ``optuna.trial.FixedTrial``.

Parameters (names are stable across trials, so a study's trials replay and samplers share statistics):

* ``method``: ``standard``, ``sd``, ``naive-cos``, ``cos``; ``cos-n`` (CoS over every model, Algorithm 2) when
  r = ``target`` over three or more models (with ``we``/``cd`` over n models ``cos`` already uses all n);
  ``sv`` only when the decoder supports it (``"sv" in spectune.config.METHODS``) *and* the cost model can price it.
* ``proposer``: the default proposer (first model of the config). With ``target`` any model but the target,
  which then runs as the pair (proposer, target); with ``we`` any model, the weights move with it (r does not
  change); with ``cd`` the amateur/expert order is the combination itself, so the proposer is fixed.
* ``gamma_<i>``: proposal length of the config's i-th model, 1..min(10, calibrated gamma_max); only the
  lengths the method uses are suggested (sd / naive-cos: the proposer's; cos: every model's).
* ``batch_size``: among the calibrated batch sizes (or fixed).

The user's combination is never changed: every config decodes exactly the same r (``target`` keeps the same
last model; ``we`` permutes weights with the models).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from spectune.config import DecodeConfig
from spectune.decoding.combine import parse_combination
from spectune.errors import ConfigError

GAMMA_CAP = 10


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

    def __post_init__(self) -> None:
        self.models = tuple(self.models)
        if len(self.models) < 2:
            raise ConfigError(f"tuning needs at least 2 models, got {len(self.models)}")
        self.combination = parse_combination(self.combine, len(self.models))
        self.combine = self.combination.spec
        self.kind = self.combine.split(":")[0]
        self.batch_sizes = tuple(sorted(set(int(b) for b in self.batch_sizes)))
        self.gamma_hi = max(1, min(GAMMA_CAP, int(self.gamma_max)))
        avail = ["standard", "sd", "naive-cos", "cos"]
        if self.kind == "target" and len(self.models) >= 3:
            avail.append("cos-n")
        avail += [m for m in self.extra_methods if m not in avail]
        if self.methods:
            bad = [m for m in self.methods if m not in avail]
            if bad:
                raise ConfigError(f"method(s) {', '.join(bad)} are not available here (available: {', '.join(avail)})")
            avail = [m for m in avail if m in self.methods]
        self.method_choices = tuple(avail)
        if self.kind == "target":
            self.proposers = self.models[:-1]
        elif self.kind == "we":
            self.proposers = self.models
        else:  # cd (order is the combination) or anything else order-dependent
            self.proposers = self.models[:1]

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

    def config(self, method: str, proposer: str, gamma: Sequence[int] | None, batch_size: int) -> DecodeConfig:
        if method == "standard":
            models, comb = self.models, self.combine
        else:
            models, comb = self.arrange(proposer, all_models=(method in ("cos-n", "sv") or self.kind != "target"))
        g = list(gamma or []) + [1] * (len(models) - len(gamma or []))
        return DecodeConfig(models=models, method="cos" if method == "cos-n" else method, combine=comb,
                            gamma=tuple(g[: len(models)]), temperature=self.temperature, top_k=self.top_k,
                            top_p=self.top_p, seed=self.seed, max_new_tokens=self.max_new_tokens,
                            batch_size=batch_size)

    # ------------------------------------------------------------------ the suggest function

    def __call__(self, trial: Any) -> DecodeConfig:
        method = trial.suggest_categorical("method", list(self.method_choices))
        b = (trial.suggest_categorical("batch_size", list(self.batch_sizes)) if len(self.batch_sizes) > 1
             else self.batch_sizes[0])
        if method == "standard":
            return self.config("standard", self.models[0], None, b)
        proposer = (trial.suggest_categorical("proposer", list(self.proposers)) if len(self.proposers) > 1
                    else self.proposers[0])
        n = len(self.arrange(proposer, all_models=(method in ("cos-n", "sv") or self.kind != "target"))[0])
        used = n if method in ("cos", "cos-n") else 1
        gamma = [trial.suggest_int(f"gamma_{i}", 1, self.gamma_hi) for i in range(used)]
        return self.config(method, proposer, gamma, b)


    def enumerate(self) -> list[DecodeConfig]:
        """Every distinct configuration of the space (what ``__call__`` can return), batch sizes included."""
        import itertools

        out, seen = [], set()
        for b in self.batch_sizes:
            for method in self.method_choices:
                for proposer in ([self.models[0]] if method == "standard" else self.proposers):
                    n = len(self.arrange(proposer, all_models=(method in ("cos-n", "sv") or self.kind != "target"))[0])
                    used = 0 if method == "standard" else n if method in ("cos", "cos-n") else 1
                    for gamma in itertools.product(range(1, self.gamma_hi + 1), repeat=used):
                        cfg = self.config(method, proposer, list(gamma), b)
                        key = (cfg.models, cfg.method, cfg.combine, cfg.gamma, cfg.batch_size)
                        if key not in seen:
                            seen.add(key)
                            out.append(cfg)
        return out


def suggest(trial: Any, space: SearchSpace) -> DecodeConfig:
    """``suggest(trial, space)``: the same as ``space(trial)`` (bind with functools.partial)."""
    return space(trial)
