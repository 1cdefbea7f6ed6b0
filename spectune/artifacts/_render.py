"""Shared pieces of the engine renderers: the rendered form, schedule ranges, text formats."""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Rendered:
    """One engine's export: the artifact in the engine's own format plus how to use it."""

    fmt: str  # "json", "yaml" or "sh"
    artifact: Any  # dict (json / yaml) or argv list (sh)
    usage: dict[str, str] = field(default_factory=dict)  # "shell" / "python": ready-to-paste snippets
    notes: list[str] = field(default_factory=list)  # what this engine cannot express of the plan
    program: int = 1  # sh: how many leading argv items name the program (their flags are not the engine's)

    def keys(self) -> set[str]:
        """Every key (json / yaml, nested) or flag (sh) the artifact uses: checked against the engine schema."""
        if self.fmt == "sh":
            return {a for a in self.artifact[self.program:] if a.startswith("-")}
        out: set[str] = set()

        def walk(d: Any) -> None:
            if isinstance(d, dict):
                for k, v in d.items():
                    if isinstance(k, str):
                        out.add(k)
                    if isinstance(v, dict) and not all(isinstance(x, int) for x in v):  # int keys: a schedule
                        walk(v)
        walk(self.artifact)
        return out

    def items(self) -> list[tuple[str, Any]]:
        """(key, value) of every scalar entry (json / yaml, nested) or (flag, its argument) (sh)."""
        if self.fmt == "sh":
            argv = self.artifact[self.program:]
            return [(a, argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("-") else None)
                    for i, a in enumerate(argv) if a.startswith("-")]
        out: list[tuple[str, Any]] = []

        def walk(d: Any) -> None:
            for k, v in d.items():
                if isinstance(v, dict):
                    walk(v)
                elif isinstance(k, str):
                    out.append((k, v))
        walk(self.artifact)
        return out

    def text(self, header: list[str]) -> str:
        """The artifact as a file: JSON (no comments possible), YAML or a shell command with a comment header."""
        if self.fmt == "json":
            return dump_json(self.artifact)
        head = "".join(f"# {h}\n" for h in header)
        if self.fmt == "yaml":
            return head + to_yaml(self.artifact)
        return head + sh_join(self.artifact) + "\n"


def sampling_params(plan: Any) -> str:
    """``SamplingParams(...)`` as vLLM and TensorRT-LLM spell it: these engines take sampling per request."""
    args = [f"temperature={plan.temperature:g}", f"top_p={plan.top_p:g}", f"max_tokens={plan.max_new_tokens}"]
    if plan.top_k > 0:
        args.insert(1, f"top_k={plan.top_k}")
    return f"SamplingParams({', '.join(args)})"


def dump_json(obj: Any) -> str:
    """Indented JSON with lists of numbers kept on one line (schedule ranges stay readable)."""
    text = json.dumps(obj, indent=2)
    return re.sub(r"\[\s*([-\d.,\s]*?)\s*\]", lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]", text) + "\n"


def sh_join(argv: list[str]) -> str:
    """A shell command, one flag (with its value) per line."""
    parts, line = [], []
    for a in argv:
        if a.startswith("-") and line:
            parts.append(" ".join(line))
            line = []
        line.append(shlex.quote(a))
    parts.append(" ".join(line))
    return " \\\n    ".join(parts)


def to_yaml(d: dict[str, Any], indent: int = 0) -> str:
    """Block YAML for nested dicts of scalars (what the engines' config files hold)."""
    out = []
    pad = "  " * indent
    for k, v in d.items():
        if isinstance(v, dict):
            out.append(f"{pad}{k}:\n{to_yaml(v, indent + 1)}")
        else:
            out.append(f"{pad}{k}: {json.dumps(v)}\n")
    return "".join(out)


def ranges(schedule: list[tuple[int, int]]) -> list[list[int]]:
    """(calibrated batch size b_i, K_i) -> inclusive ranges [b_{i-1} + 1, b_i, K_i], the first from 1, equal
    neighbours merged: a batch size between two calibrated ones takes the K of the next larger one."""
    out: list[list[int]] = []
    lo = 1
    for b, k in schedule:
        if out and out[-1][2] == k:
            out[-1][1] = b
        else:
            out.append([lo, b, k])
        lo = b + 1
    return out


def off_above(schedule: list[tuple[int, int]]) -> int | None:
    """N when speculation is on up to batch size N and off above it (the schedule's first K = 0 after a K > 0);
    None when it never turns off."""
    rs = ranges(schedule)
    for i, (lo, hi, k) in enumerate(rs):
        if k == 0 and i > 0:
            return rs[i - 1][1]
    return None
