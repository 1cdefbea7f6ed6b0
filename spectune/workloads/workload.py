"""The :class:`Workload` value: a named prompt set with a fixed calibration / held-out split."""
from __future__ import annotations

from dataclasses import dataclass

CALIBRATION = "calibration"
HELDOUT = "heldout"
SPLITS = (CALIBRATION, HELDOUT)


@dataclass(frozen=True)
class Workload:
    """A prompt set. ``calibration`` prompts drive tuning; ``heldout`` prompts are only for evaluation.

    The two tuples are disjoint and their order is fixed, so runs over the same workload are comparable.
    ``name`` is the built-in set's name or, for a user's file, the path as given.
    """

    name: str
    calibration: tuple[str, ...]
    heldout: tuple[str, ...]

    def __post_init__(self) -> None:
        # Accept lists from callers but store tuples so the value stays immutable and hashable.
        object.__setattr__(self, "calibration", tuple(self.calibration))
        object.__setattr__(self, "heldout", tuple(self.heldout))

    @property
    def all(self) -> tuple[str, ...]:
        """Every prompt: calibration first, then held out."""
        return self.calibration + self.heldout

    def split(self, which: str) -> tuple[str, ...]:
        """The prompts of one split, ``"calibration"`` or ``"heldout"``."""
        if which == CALIBRATION:
            return self.calibration
        if which == HELDOUT:
            return self.heldout
        raise ValueError(f"unknown split {which!r}; expected one of {', '.join(SPLITS)}")

    def __len__(self) -> int:
        return len(self.calibration) + len(self.heldout)
