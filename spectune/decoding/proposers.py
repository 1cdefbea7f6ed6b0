"""The one registry of proposers: who proposes the tokens that the models of r verify.

  * ``model``            - model 0 (the first of ``--models``) drafts; every method and draft-length policy.
  * ``ngram:N_MIN,N_MAX`` - prompt lookup (ngram.py): no model proposes; method ``sd`` only (every model of r
                           scores the looked-up tokens in one forward each, bonus token from r), k = gamma_0.
"""
from __future__ import annotations

from spectune.decoding.ngram import NgramProposer
from spectune.errors import ConfigError


def _model(args: str) -> None:
    if args:
        raise ConfigError(f"proposer 'model' takes no parameters, got 'model:{args}'")
    return None


# name -> parser of the text after "name:" (None stands for model 0); which methods run each: registry.py
PROPOSERS = {"model": _model, "ngram": NgramProposer.parse}


def parse_proposer(text: str | NgramProposer | None) -> NgramProposer | None:
    """``model`` (or None) -> None; ``ngram:N_MIN,N_MAX`` -> NgramProposer; a ``ConfigError`` otherwise."""
    if text is None or isinstance(text, NgramProposer):
        return text
    if not isinstance(text, str):
        raise ConfigError(f"invalid proposer {text!r}: use model or ngram:N_MIN,N_MAX")
    name, _, args = text.partition(":")
    if name not in PROPOSERS:
        raise ConfigError(f"unknown proposer '{text}': use model or ngram:N_MIN,N_MAX")
    return PROPOSERS[name](args)


def proposer_spec(proposer: NgramProposer | None) -> str:
    return "model" if proposer is None else proposer.spec
