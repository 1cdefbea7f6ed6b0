"""Every profile lookup -- generate/sv (``spectune.decoder``), recommend, export's prediction -- asks the one
finder, ``spectune.profile.find_profiles``, and through it the one matching rule,
``spectune.machine.profile_mismatch``; load_profile's warning asks the rule too."""
import pytest

from spectune import machine as M
from spectune import profile as P
from spectune.profile import lookup
from tune_synth import make_profile


@pytest.fixture
def spies(tmp_path, monkeypatch, tiny_dirs):
    """Profiles of the tiny pair and of all three tiny models in the user's directory; the finder wrapped (it
    still runs), the rule replaced by one that refuses every profile."""
    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(lookup, "BUNDLED_DIR", tmp_path / "none")
    models = [str(tiny_dirs["s"]), str(tiny_dirs["l"])]
    make_profile(models=tuple(models), combine="target", temperature=0.0).save(P.user_profiles_dir() / "p")
    three = tuple(str(tiny_dirs[k]) for k in ("s", "m", "l"))
    make_profile(models=three, combine="target", temperature=0.0, sv_beta=0.5).save(P.user_profiles_dir() / "sv")
    calls = {"finder": [], "rule": []}
    real = P.find_profiles

    def finder(*a, **k):
        calls["finder"].append(a)
        return real(*a, **k)

    monkeypatch.setattr(P, "find_profiles", finder)
    monkeypatch.setattr(lookup, "find_profiles", finder)
    monkeypatch.setattr(M, "profile_mismatch", lambda *a, **k: calls["rule"].append(a) or "spy says no")
    return models, calls


def test_every_profile_lookup_goes_through_the_one_finder_and_the_one_rule(spies, tiny_models, tmp_path):
    from spectune.config import DecodeConfig
    from spectune.decoder import build_decoder
    from spectune.errors import ProfileError
    from spectune.artifacts import export
    from spectune.tune.recommend import recommend

    models, calls = spies
    cfg = DecodeConfig(models=tuple(models), method="sd")
    lookups = {  # each entry point as a user reaches it; the refusing rule makes two of them fail
        "generate/sv": lambda: build_decoder([tiny_models[k] for k in ("s", "m", "l")], method="sv"),
        "recommend": lambda: recommend(models, n_trials=1, out=tmp_path / "rec"),
        "export": lambda: export(cfg, "vllm"),
    }
    for name, fn in lookups.items():
        calls["finder"].clear()
        calls["rule"].clear()
        if name == "export":
            fn()
        else:  # the finder's answer is the rule's: no profile, and the error names the rule's reason
            with pytest.raises(ProfileError, match="no profile.*spy says no"):
                fn()
        assert calls["finder"], f"{name} did not ask spectune.profile.find_profiles"
        assert calls["rule"], f"{name} did not ask spectune.machine.profile_mismatch"
    exp = export(cfg, "vllm")  # refused here, so export prices from another machine's profile and says so
    assert exp.predicted and exp.predicted["profile"] == str(P.user_profiles_dir() / "p")


def test_load_profile_warns_through_the_one_rule(spies):
    _, calls = spies
    with pytest.warns(P.ProfileHardwareWarning, match="spy says no"):
        P.load_profile(P.user_profiles_dir() / "p")
    assert calls["rule"] and not calls["finder"]
