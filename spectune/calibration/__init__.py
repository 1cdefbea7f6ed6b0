"""Calibration: hardware fingerprint, latency grid, acceptance traces and SV bins -> a
:class:`~spectune.profile.Profile`.

``calibrate(models, combine=..., workload=..., ...)`` runs every stage and writes the profile (see ``run.py``).
Submodules: ``hardware`` (fingerprint, NVML), ``latency`` (timing, cost coefficients, latency model),
``acceptance`` (traces along decoding trajectories), ``bins`` (SV adaptive bins, information gain).
"""
from __future__ import annotations

__all__ = ["CalibrationSettings", "calibrate", "default_out_dir"]


def __getattr__(name: str):  # lazy: spectune.profile imports the table schemas from the submodules
    if name in __all__:
        from spectune.calibration import run

        return getattr(run, name)
    raise AttributeError(f"module 'spectune.calibration' has no attribute '{name}'")
