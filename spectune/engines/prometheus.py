"""Prometheus text exposition (what an engine's ``/metrics`` serves) as plain numbers: a pure parser.

``parse(text)`` -> ``{(name, labels): value}`` with ``labels`` a sorted tuple of (key, value) pairs, one entry per
sample line (histogram buckets, ``_sum`` and ``_count`` included). ``total(samples, name, **match)`` adds the
samples of ``name`` whose labels include ``match`` (all of them without ``match``: the sum over every model and
engine index an engine reports). A counter is read as ``name`` or ``name_total`` alike, as exporters differ.
"""
from __future__ import annotations

import math
import re

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def _labels(body: str) -> tuple[tuple[str, str], ...]:
    out, pos = [], 0
    while pos < len(body):
        m = _LABEL.match(body, pos)
        if not m:
            raise ValueError(f"bad label set {{{body}}}")
        value = m.group(2).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
        out.append((m.group(1), value))
        pos = m.end()
    return tuple(sorted(out))


def parse(text: str) -> Samples:
    """Every sample of an exposition; comment lines (``# HELP``, ``# TYPE``) and blank lines skipped. A line that
    is not a sample raises ``ValueError`` naming it."""
    out: Samples = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            raise ValueError(f"not a Prometheus sample: {line[:120]!r}")
        value = m.group(4)
        out[(m.group(1), _labels(m.group(3) or ""))] = math.inf if value == "+Inf" else float(value)
    return out


def total(samples: Samples, name: str, **match: str) -> float:
    """Sum of ``name`` (or ``name_total``) over the samples whose labels include ``match``; 0.0 when none."""
    names = {name, name + "_total"} if not name.endswith("_total") else {name, name[:-6]}
    want = set(match.items())
    return sum(v for (n, labels), v in samples.items() if n in names and want <= set(labels))


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    """``name`` (or ``name_total``) summed per value of ``label`` (e.g. acceptance per draft position)."""
    names = {name, name + "_total"}
    out: dict[str, float] = {}
    for (n, labels), v in samples.items():
        lab = dict(labels)
        if n in names and label in lab:
            out[lab[label]] = out.get(lab[label], 0.0) + v
    return out
