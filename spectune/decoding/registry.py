"""The one registry of decode methods: names, what each needs, which proposers and draft-length policies apply.

Config validation, the CLI's choices, the search space, the exporters, bench and the cost model read it; both the
runtime (``loop.py``) and the simulator (``spectune/tune/simulate.py``) run a method's ``step`` over
:class:`~spectune.decoding.state_machine.Machine`. Adding a method is one module in ``methods/`` plus one entry in
``METHODS``. Proposers have their own registry (``proposers.py``), draft-length policies theirs (``policy.py``).
Importing this module needs no torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from spectune.decoding.state_machine import Machine, SequenceState, Step
from spectune.decoding.methods import cos, sd, standard, sv


@dataclass(frozen=True)
class Method:
    name: str
    step: Callable[[Machine, SequenceState], Step]
    summary: str
    min_models: int = 2
    gammas: str = "first"  # the proposal lengths it uses: "none", "first" (model 0's) or "all" (every model's)
    scorers: str = "uses"  # who scores proposals: "uses" (the models of r) or "all" (every model: cos)
    proposers: tuple[str, ...] = ("model",)  # proposer kinds it runs with (proposers.py)
    policies: bool = True  # model 0's draft length may follow a policy other than fixed (policy.py)
    needs_profile: bool = False  # reads calibrated statistics at run time (sv's bins)
    couples_rows: bool = False  # one decision spans the batch (sv's scheduler): priced by simulating b rows

    def gamma_count(self, n_models: int) -> int:
        """How many of the per-model proposal lengths the method reads."""
        return {"none": 0, "first": 1, "all": n_models}[self.gammas]


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("standard", standard.step, "every model in r, every token: an exact sample from r", min_models=1,
           gammas="none", policies=False),
    Method("sd", sd.step, "model 0 (or a lookup) proposes; every model in r scores the block; bonus token from r",
           proposers=("model", "ngram", "ngram+model")),
    Method("naive-cos", cos.step_naive, "model 0 drafts; the other models score; verified with the drafter's q"),
    Method("cos", cos.step_cos, "naive-cos plus the alternate proposal framework (the verifier's bonus proposal)",
           gammas="all", scorers="all"),
    Method("sv", sv.step, "speculative verification: companion-guided, goodput-optimal verification length",
           min_models=3, policies=False, needs_profile=True, couples_rows=True),
)}
METHOD_NAMES: tuple[str, ...] = tuple(METHODS)
SPECULATIVE: tuple[str, ...] = tuple(n for n in METHODS if n != "standard")


def get_method(name: str) -> Method:
    """The registered method ``name``; ``KeyError`` for an unknown name (config validation says it in one line)."""
    return METHODS[name]


def methods_for(proposer_kind: str) -> tuple[str, ...]:
    """The methods a proposer kind ('model', 'ngram', 'ngram+model') runs with."""
    return tuple(n for n, m in METHODS.items() if proposer_kind in m.proposers)
