"""Reading prompt files: the bundled ``data/<name>.jsonl`` sets and a user's ``.jsonl`` or ``.txt`` file.

JSONL: one JSON object per line, ``{"prompt": "...", "split": "calibration" | "heldout"}``; ``split`` is
optional and other keys are ignored. Blank lines are skipped. ``.txt``: one prompt per non-blank line.
Prompts without a split are assigned deterministically: of those, every third (the 3rd, 6th, ...) is held
out and the rest are calibration. Every problem raises :class:`~spectune.errors.ConfigError` with a one-line
message naming the file and, where it applies, the line number.
"""
from __future__ import annotations

import json
from pathlib import Path

from spectune.errors import ConfigError
from spectune.workloads.workload import CALIBRATION, HELDOUT, SPLITS, Workload

HELDOUT_EVERY = 3  # without an explicit split, every HELDOUT_EVERY-th prompt is held out


def read_prompt_file(path: str | Path, name: str | None = None) -> Workload:
    """Load the prompt file at ``path`` as a :class:`Workload` named ``name`` (default: the path as given)."""
    path = Path(path)
    return _split(_rows(path), path, str(path) if name is None else name)


def read_prompts(path: str | Path) -> list[str]:
    """Every prompt of a JSONL (or .txt) file in file order, ignoring splits (for ``generate --prompts``)."""
    return [prompt for _, prompt, _ in _rows(Path(path))]


def _rows(path: Path) -> list[tuple[int, str, str | None]]:
    text = _read_text(path)
    rows = _parse_txt(text) if path.suffix.lower() == ".txt" else _parse_jsonl(text, path)
    if not rows:
        raise ConfigError(f"workload file {path} has no prompts")
    return rows


def parse_prompt_text(text: str, source: str) -> Workload:
    """Parse JSONL ``text`` (the bundled sets); ``source`` names it in error messages and is the name."""
    rows = _parse_jsonl(text, Path(source))
    if not rows:
        raise ConfigError(f"workload file {source} has no prompts")
    return _split(rows, Path(source), Path(source).stem)


def _read_text(path: Path) -> str:
    if not path.exists():
        raise ConfigError(f"workload file not found: {path}")
    if not path.is_file():
        raise ConfigError(f"workload path is not a file: {path}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"workload file {path} is not UTF-8 text (byte {err.start})") from None
    except OSError as err:
        raise ConfigError(f"cannot read workload file {path}: {err.strerror or err}") from None


def _parse_txt(text: str) -> list[tuple[int, str, str | None]]:
    return [(n, line, None) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def _parse_jsonl(text: str, path: Path) -> list[tuple[int, str, str | None]]:
    """Rows ``(line number, prompt, split or None)`` of a JSONL text."""
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path}:{n}: not valid JSON ({err.msg})") from None
        if not isinstance(obj, dict) or "prompt" not in obj:
            raise ConfigError(f'{path}:{n}: expected a JSON object with a "prompt" key')
        prompt = obj["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise ConfigError(f'{path}:{n}: "prompt" must be a non-empty string')
        split = obj.get("split")
        if split is not None and split not in SPLITS:
            raise ConfigError(f'{path}:{n}: "split" must be "calibration" or "heldout", got {split!r}')
        rows.append((n, prompt, split))
    return rows


def _split(rows: list[tuple[int, str, str | None]], path: Path, name: str) -> Workload:
    """Assign missing splits, reject duplicates (they would leak calibration into held-out) and build."""
    seen: dict[str, int] = {}
    parts: dict[str, list[str]] = {CALIBRATION: [], HELDOUT: []}
    unsplit = 0
    for n, prompt, split in rows:
        if prompt in seen:
            raise ConfigError(f"{path}:{n}: duplicate prompt (first on line {seen[prompt]})")
        seen[prompt] = n
        if split is None:
            unsplit += 1
            split = HELDOUT if unsplit % HELDOUT_EVERY == 0 else CALIBRATION
        parts[split].append(prompt)
    cal, held = parts[CALIBRATION], parts[HELDOUT]
    if not cal or not held:
        raise ConfigError(
            f"workload file {path} needs at least one calibration and one held-out prompt "
            f"(has {len(cal)} and {len(held)}; add prompts or set \"split\")"
        )
    return Workload(name=name, calibration=cal, heldout=held)
