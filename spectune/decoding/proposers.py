"""The one registry of proposers: who proposes the tokens that the models of r verify, one small object each.

  * ``model``            - model 0 (the first of ``--models``) drafts; every method and draft-length policy
                           (``ModelProposer``: the drafting itself is the state machine's draft step).
  * ``ngram:N_MIN,N_MAX`` - prompt lookup (ngram.py): no model proposes; method ``sd`` only (every model of r
                           scores the looked-up tokens in one forward each, bonus token from r), k = gamma_0.
  * ``ngram+model:N_MIN,N_MAX[,K]`` - the lookup proposes up to K tokens (default 8) where it matches, model 0
                           drafts gamma_0 (under its draft-length policy) where it does not; method ``sd``.

Every proposer says what the decoder, the cost model and the exporters ask of it: ``kind`` (the registry key:
which methods and policies run it, ``registry.py``), ``spec`` (its text form), ``looks_up`` (tokens come from the
context), ``drafts`` (model 0 drafts, alone or where the lookup misses), ``fallback`` (both: the lookup first, model
0 where it misses) and ``k`` (the longest lookup; None: gamma_0). ``parse_proposer`` turns the text into one;
``spec`` turns it back.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from spectune.decoding.ngram import MATCHES, find_continuation
from spectune.errors import ConfigError


class Proposer:
    """A proposer (see the module docstring); subclasses set the attributes."""

    kind: ClassVar[str]
    spec: ClassVar[str]
    looks_up: ClassVar[bool]
    drafts: ClassVar[bool]
    k: int | None = None
    fallback: bool = False


@dataclass(frozen=True)
class ModelProposer(Proposer):
    """Model 0 drafts gamma_0 tokens a turn, under the draft-length policy."""

    kind: ClassVar[str] = "model"
    spec: ClassVar[str] = "model"
    looks_up: ClassVar[bool] = False
    drafts: ClassVar[bool] = True

    @classmethod
    def parse(cls, args: str) -> "ModelProposer":
        if args:
            raise ConfigError(f"proposer 'model' takes no parameters, got 'model:{args}'")
        return MODEL


MODEL = ModelProposer()


LOOKUP_K = 8  # ngram+model's default longest lookup (the calibration's gamma_max)


@dataclass(frozen=True)
class NgramProposer(Proposer):
    """Prompt lookup with suffix lengths n_min..n_max. ``ngram``: the proposal length k is the decode's gamma_0.
    ``ngram+model`` (``fallback``): up to ``k`` looked-up tokens, and model 0 drafts gamma_0 on a miss."""

    n_min: int
    n_max: int
    fallback: bool = False
    k: int | None = None  # the longest lookup of ngram+model (default LOOKUP_K); ngram: None (gamma_0)
    match: str = "recent"  # which occurrence it copies after (MATCHES); the spec string does not carry it
    looks_up: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.fallback and self.k is None:
            object.__setattr__(self, "k", LOOKUP_K)
        if self.match not in MATCHES:
            raise ConfigError(f"unknown lookup match {self.match!r}: one of {', '.join(MATCHES)}")

    @property
    def kind(self) -> str:  # type: ignore[override]
        return "ngram+model" if self.fallback else "ngram"

    @property
    def drafts(self) -> bool:  # type: ignore[override]
        return self.fallback

    @property
    def spec(self) -> str:  # type: ignore[override]
        return f"ngram+model:{self.n_min},{self.n_max},{self.k}" if self.fallback else self.lookup_spec

    @property
    def lookup_spec(self) -> str:
        """The lookup alone (``ngram:N_MIN,N_MAX``): what calibration traces and engines' n-gram options name."""
        return f"ngram:{self.n_min},{self.n_max}"

    def propose(self, context: Sequence[int], k: int) -> list[int]:
        return find_continuation(context, self.n_min, self.n_max, k, self.match)

    @classmethod
    def parse(cls, args: str) -> "NgramProposer":
        """``N_MIN,N_MAX`` (both >= 1, N_MIN <= N_MAX) -> NgramProposer; a ``ConfigError`` otherwise."""
        try:
            n_min, n_max = (int(x) for x in args.split(","))
        except ValueError:
            raise ConfigError(f"invalid ngram proposer 'ngram:{args}': expected ngram:N_MIN,N_MAX") from None
        if not 1 <= n_min <= n_max:
            raise ConfigError(f"invalid ngram proposer 'ngram:{args}': need 1 <= N_MIN <= N_MAX")
        return cls(n_min, n_max)

    @classmethod
    def parse_fallback(cls, args: str) -> "NgramProposer":
        """``N_MIN,N_MAX[,K]`` -> the ngram+model proposer (K: its longest lookup, default LOOKUP_K)."""
        parts = args.split(",")
        name = f"ngram+model:{args}"
        if len(parts) not in (2, 3):
            raise ConfigError(f"invalid proposer '{name}': expected ngram+model:N_MIN,N_MAX[,K]")
        if not all(p.strip().isdigit() for p in parts):
            raise ConfigError(f"invalid proposer '{name}': expected ngram+model:N_MIN,N_MAX[,K] (integers)")
        base = cls.parse(",".join(parts[:2]))
        k = int(parts[2]) if len(parts) == 3 else LOOKUP_K
        if k < 1:
            raise ConfigError(f"invalid proposer '{name}': the lookup length K must be >= 1")
        return cls(base.n_min, base.n_max, True, k)


# name -> parser of the text after "name:"; which methods run each: registry.py
PROPOSERS = {"model": ModelProposer.parse, "ngram": NgramProposer.parse, "ngram+model": NgramProposer.parse_fallback}
USAGE = "use model, ngram:N_MIN,N_MAX or ngram+model:N_MIN,N_MAX[,K]"


def parse_proposer(text: str | Proposer | None) -> Proposer:
    """``model`` (or None) -> ``MODEL``; ``ngram:...`` / ``ngram+model:...`` -> an ``NgramProposer``; a proposer as
    given; else ``ConfigError``."""
    if text is None:
        return MODEL
    if isinstance(text, Proposer):
        return text
    if not isinstance(text, str):
        raise ConfigError(f"invalid proposer {text!r}: {USAGE}")
    name, _, args = text.partition(":")
    if name not in PROPOSERS:
        raise ConfigError(f"unknown proposer '{text}': {USAGE}")
    return PROPOSERS[name](args)


def proposer_kind(proposer: Proposer | str | None) -> str:
    """'model', 'ngram' or 'ngram+model' (the registry's key: which methods and policies apply)."""
    return parse_proposer(proposer).kind
