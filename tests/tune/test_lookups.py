"""Every profile lookup -- generate/sv (api), recommend, export's prediction, load_profile -- asks the one
matching function, ``spectune.machine.profile_mismatch``."""
from spectune import machine as M
from tune_synth import make_profile


def test_every_profile_lookup_goes_through_profile_mismatch(tmp_path, monkeypatch, tiny_dirs):
    """generate/sv (api), recommend, export's prediction and load_profile's warning all ask the one function."""
    from spectune import api
    from spectune import profile as P
    from spectune.config import DecodeConfig
    from spectune.export._predict import find_export_profile
    from spectune.tune import recommend as R

    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(P, "BUNDLED_DIR", tmp_path / "none")
    models = [str(tiny_dirs["s"]), str(tiny_dirs["l"])]
    make_profile(models=tuple(models), combine="target", temperature=0.0).save(P.user_profiles_dir() / "p")
    calls = []
    monkeypatch.setattr(M, "profile_mismatch", lambda *a, **k: calls.append(a) or "spy says no")
    lookups = {
        "load_profile": lambda: P.load_profile(P.user_profiles_dir() / "p"),
        "api/sv": lambda: api.find_profile(models),
        "recommend": lambda: R.find_profile(models, "target"),
        "export": lambda: find_export_profile(DecodeConfig(models=tuple(models), method="sd"), None, []),
    }
    for name, fn in lookups.items():
        calls.clear()
        try:
            fn()
        except Exception:  # noqa: BLE001 - a lookup refusing every profile may raise; it must have asked first
            pass
        assert calls, f"{name} did not ask spectune.machine.profile_mismatch"
