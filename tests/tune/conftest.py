"""Fixtures for the tuning tests (the synthetic profile lives in tune_synth.py)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tune_synth import make_profile  # noqa: E402


@pytest.fixture
def synth_profile():
    return make_profile()
