"""A stand-in ``vllm`` install for the engine layer's tests: a console script whose interpreter runs
``fake_vllm_server.py`` as ``vllm.entrypoints.openai.api_server`` (no model, no vllm package)."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """The path of a fake ``vllm`` script; the fake server module importable by its interpreter."""
    root = tmp_path / "fake-vllm"
    pkg = root / "site" / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (root / "site" / "vllm", root / "site" / "vllm" / "entrypoints", pkg):
        (d / "__init__.py").write_text("")
    shutil.copy(HERE / "fake_vllm_server.py", pkg / "fake_vllm_server.py")
    (pkg / "api_server.py").write_text("from vllm.entrypoints.openai.fake_vllm_server import main\n\n"
                                       "if __name__ == '__main__':\n    main()\n")
    script = root / "bin" / "vllm"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\nraise SystemExit('the fake vllm script is never run itself')\n")
    script.chmod(0o755)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root / "site"), os.environ.get("PYTHONPATH", "")]))
    for var in ("FAKE_VLLM_FAIL", "FAKE_VLLM_DIE_AFTER", "FAKE_VLLM_NO_SPEC", "FAKE_VLLM_LOAD_S"):
        monkeypatch.delenv(var, raising=False)
    return str(script)

