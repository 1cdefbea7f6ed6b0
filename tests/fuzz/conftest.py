"""Fixtures of the fuzz suite: one valid saved profile, a tiny prompt file, a model with pickle weights."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tune")]  # fuzz_helpers, tune_synth


@pytest.fixture(scope="session")
def valid_profile(tmp_path_factory) -> Path:
    """A valid profile of models a, b (combination target, temperature 0) measured on this machine."""
    from tune_synth import make_profile

    from spectune.calibration.hardware import fingerprint

    prof = make_profile(models=("a", "b"), combine="target", temperature=0.0, batch_sizes=(1, 2))
    prof.meta["hardware"] = fingerprint("cpu")
    return prof.save(tmp_path_factory.mktemp("valid") / "prof")


@pytest.fixture(scope="session")
def prompt_file(tmp_path_factory) -> Path:
    """Six prompts of the tiny models' words (every third is held out)."""
    f = tmp_path_factory.mktemp("prompts") / "prompts.txt"
    f.write_text("\n".join(f"w{i} w{i + 1} w{i + 2}" for i in range(1, 7)) + "\n")
    return f


@pytest.fixture(scope="session")
def pickle_model(tmp_path_factory, tiny_dirs) -> Path:
    """The small tiny model with its weights as pytorch_model.bin only (a pickle file)."""
    import shutil

    import torch
    from safetensors.torch import load_file

    d = tmp_path_factory.mktemp("pickled") / "m"
    shutil.copytree(tiny_dirs["s"], d)
    torch.save(load_file(d / "model.safetensors"), d / "pytorch_model.bin")
    (d / "model.safetensors").unlink()
    return d
