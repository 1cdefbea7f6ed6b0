"""The test tree itself: pytest's default import mode needs every test module's basename to be unique.

Without ``__init__.py`` files each test module is imported under its basename alone, so two ``test_x.py`` in two
folders collide and the second fails to collect ("import file mismatch"), which CI reports as an error.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).parent


def test_every_test_module_basename_is_unique():
    seen: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        if "__pycache__" not in path.parts:
            seen[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"test modules sharing a basename (rename one): {clashes}"
