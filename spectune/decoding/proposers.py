"""The one registry of proposers: who proposes the tokens that the models of r verify.

  * ``model``            - model 0 (the first of ``--models``) drafts; every method and draft-length policy.
  * ``ngram:N_MIN,N_MAX`` - prompt lookup (ngram.py): no model proposes; method ``sd`` only (every model of r
                           scores the looked-up tokens in one forward each, bonus token from r), k = gamma_0.
  * ``ngram+model:N_MIN,N_MAX[,K]`` - the lookup proposes up to K tokens (default 8) where it matches, model 0
                           drafts gamma_0 (under its draft-length policy) where it does not; method ``sd``.
"""
from __future__ import annotations

from spectune.decoding.ngram import NgramProposer
from spectune.errors import ConfigError


def _model(args: str) -> None:
    if args:
        raise ConfigError(f"proposer 'model' takes no parameters, got 'model:{args}'")
    return None


# name -> parser of the text after "name:" (None stands for model 0); which methods run each: registry.py
PROPOSERS = {"model": _model, "ngram": NgramProposer.parse, "ngram+model": NgramProposer.parse_fallback}
USAGE = "use model, ngram:N_MIN,N_MAX or ngram+model:N_MIN,N_MAX[,K]"


def parse_proposer(text: str | NgramProposer | None) -> NgramProposer | None:
    """``model`` (or None) -> None; ``ngram:...`` / ``ngram+model:...`` -> NgramProposer; else ``ConfigError``."""
    if text is None or isinstance(text, NgramProposer):
        return text
    if not isinstance(text, str):
        raise ConfigError(f"invalid proposer {text!r}: {USAGE}")
    name, _, args = text.partition(":")
    if name not in PROPOSERS:
        raise ConfigError(f"unknown proposer '{text}': {USAGE}")
    return PROPOSERS[name](args)


def proposer_spec(proposer: NgramProposer | None) -> str:
    return "model" if proposer is None else proposer.spec


def proposer_kind(proposer: NgramProposer | str | None) -> str:
    """'model', 'ngram' or 'ngram+model' (the registry's key: which methods and policies apply)."""
    p = parse_proposer(proposer)
    return "model" if p is None else p.kind
