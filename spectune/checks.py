"""What a valid value is, in one place: numbers that are finite and in range, integers that are integers, text.

Every boundary (a config, a profile, a CLI option, an API argument) checks its values through these helpers,
once, and raises the caller's ``SpectuneError`` subclass with one line naming the value and the problem.
Booleans are not numbers here, and neither are strings that look like numbers: a config file saying
``"temperature": "0.7"`` is an error, not a guess.
"""
from __future__ import annotations

import math
import numbers
from typing import Any

from spectune.errors import ConfigError, SpectuneError

SEED_MAX = 2**32 - 1  # numpy's and Optuna's samplers take seeds in [0, 2**32)
# Upper limits of counts a user types: far above any sensible value, low enough that a typo (an extra zero
# run, 10**12) is an error instead of a run that never ends or exhausts memory.
MAX_BATCH = 4096
MAX_REPEATS = 1000
MAX_TOGETHER = 64  # engine starts kept alive at once (--engine-together): a llama.cpp grid of one batch size is 24
MAX_TRIALS = 1_000_000
MAX_COUNT = 100_000  # prompts, states per prompt, validation prompts, proposal lengths


def show(value: Any, width: int = 40) -> str:
    """A value as it appears in an error message: its repr, on one line, at most ``width`` characters."""
    text = " ".join(repr(value).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def _bounds(v: float, what: str, lo: float | None, hi: float | None, lo_open: bool, hi_open: bool,
            err: type[SpectuneError], shown: str) -> None:
    below = lo is not None and (v <= lo if lo_open else v < lo)
    above = hi is not None and (v >= hi if hi_open else v > hi)
    if below or above:
        if lo is not None and hi is not None:
            rng = f"in {'(' if lo_open else '['}{_num(lo)}, {_num(hi)}{')' if hi_open else ']'}"
        elif lo is not None:
            rng = f"{'>' if lo_open else '>='} {_num(lo)}"
        else:
            rng = f"{'<' if hi_open else '<='} {_num(hi)}"
        raise err(f"{what} must be {rng}, got {shown}")


def real(value: Any, what: str, *, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
         hi_open: bool = False, err: type[SpectuneError] = ConfigError) -> float:
    """``value`` as a finite float within the bounds; else ``err`` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise err(f"{what} must be a number, got {show(value)}")
    v = float(value)
    if not math.isfinite(v):
        raise err(f"{what} must be a finite number, got {show(value)}")
    _bounds(v, what, lo, hi, lo_open, hi_open, err, show(value))
    return v


def integer(value: Any, what: str, *, lo: int | None = None, hi: int | None = None,
            err: type[SpectuneError] = ConfigError) -> int:
    """``value`` as an int within the bounds (an integral float is not an int); else ``err`` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise err(f"{what} must be an integer, got {show(value)}")
    v = int(value)
    _bounds(v, what, lo, hi, False, False, err, show(value))
    return v


def text(value: Any, what: str, *, err: type[SpectuneError] = ConfigError, empty: bool = False) -> str:
    """``value`` as a string (non-empty unless ``empty``); else ``err`` naming ``what``."""
    if not isinstance(value, str):
        raise err(f"{what} must be text, got {show(value)}")
    if not empty and not value.strip():
        raise err(f"{what} must not be empty")
    return value


def choice(value: Any, options: tuple[str, ...], what: str, *, err: type[SpectuneError] = ConfigError) -> str:
    """``value`` if it is one of ``options``; else ``err`` naming ``what`` and the options."""
    if value not in options:
        raise err(f"{what} must be one of {', '.join(options)}, got {show(value)}")
    return value


def seed(value: Any, what: str = "seed") -> int:
    return integer(value, what, lo=0, hi=SEED_MAX)


def integers(values: Any, what: str, hi: int | None = None) -> tuple[int, ...]:
    """Comma-separated text or a sequence of integers >= 1 (and <= ``hi``), sorted and unique."""
    if isinstance(values, str):
        try:
            values = [int(x) for x in values.split(",") if x.strip()]
        except ValueError:
            raise ConfigError(f"invalid {what} '{values}': expected comma-separated integers") from None
    elif not isinstance(values, (list, tuple)):
        values = [values]
    if not values:
        raise ConfigError(f"{what} must be integers >= 1, got none")
    return tuple(sorted({integer(v, what, lo=1, hi=hi) for v in values}))
