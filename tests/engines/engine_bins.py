"""Where the engine tests find the real engines."""
import os
import shutil

import pytest


def real_engine(env_var: str, program: str, what: str) -> str:
    """The real engine's executable (``env_var``, else ``program`` on PATH); a one-line skip without it, a failure
    where ``SPECTUNE_REQUIRE_ENGINES`` is set (CI), so an engine test cannot pass there by skipping."""
    exe = os.environ.get(env_var) or shutil.which(program)
    if not exe:
        if os.environ.get("SPECTUNE_REQUIRE_ENGINES"):
            pytest.fail(f"SPECTUNE_REQUIRE_ENGINES is set but no {program} was found ({env_var} or PATH)")
        pytest.skip(f"{what} not installed: set {env_var} to its {program} (README, Engines)")
    return exe
