"""What machine, dtype and runtime a number was measured on, and the one rule that says whether it applies here.

* :func:`identity` describes the device a run uses: for a CPU its vendor, family / model / stepping, a
  microarchitecture name where known, the ISA features that change kernels (``KERNEL_FLAGS``), physical cores
  and torch threads; for a GPU its name, compute capability, count, driver and CUDA versions. Parsing is pure
  (:func:`cpu_identity` takes the text of ``/proc/cpuinfo``) so tests fake any CPU.
* :func:`resolve_dtype` is ``--dtype auto``: the model's own (half-precision) dtype where the device computes
  it natively -- CUDA with bf16 support, a CPU with ``avx512_bf16`` or ``amx_bf16`` -- else float32.
* :func:`profile_mismatch` is the only place that decides whether a profile describes this machine: every
  profile lookup (generate/sv, recommend, export's prediction, bench) calls it.

Importing this module needs no torch; only :func:`identity` and :func:`here` import it, to read threads and CUDA.
"""
from __future__ import annotations

import os
import re
from typing import Any

KERNEL_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni",
                "amx_tile", "amx_bf16", "amx_int8")
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")  # flags with native bf16 dot products
CPU_MATCH = ("vendor", "family", "model", "physical_cores", "torch_threads")
GPU_MATCH = ("name", "capability", "count")
HALF = ("bfloat16", "float16")
DTYPES = ("auto", "float32", "bfloat16", "float16")
_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}

# (vendor, family) -> [(first model, last model, name)], from the vendors' public model tables
_MICROARCH: dict[tuple[str, int], list[tuple[int, int, str]]] = {
    ("AuthenticAMD", 23): [(0x00, 0x2F, "zen"), (0x30, 0xFF, "zen2")],
    ("AuthenticAMD", 25): [(0x00, 0x0F, "zen3"), (0x10, 0x1F, "zen4"), (0x20, 0x5F, "zen3"), (0x60, 0xAF, "zen4")],
    ("AuthenticAMD", 26): [(0x00, 0xFF, "zen5")],
    ("GenuineIntel", 6): [(0x4F, 0x4F, "broadwell"), (0x55, 0x55, "skylake-sp"), (0x6A, 0x6C, "icelake-sp"),
                          (0x8F, 0x8F, "sapphirerapids"), (0xAD, 0xAE, "graniterapids"),
                          (0xCF, 0xCF, "emeraldrapids")],
}


def microarch(vendor: str | None, family: int | None, model: int | None) -> str | None:
    """A microarchitecture name ('zen4', 'sapphirerapids', ...) or None where this table does not know it."""
    for lo, hi, name in _MICROARCH.get((str(vendor), family if family is not None else -1), []):
        if model is not None and lo <= model <= hi:
            return name
    return None


def _field(text: str, key: str) -> str | None:
    m = re.search(rf"^{re.escape(key)}\s*:\s*(.*)$", text, flags=re.MULTILINE)
    return m.group(1).strip() if m else None


def _int(v: str | None) -> int | None:
    return int(v) if v is not None and v.strip().isdigit() else None


def _physical_cores(text: str) -> int | None:
    pairs = set()
    for block in text.split("\n\n"):
        core = _field(block, "core id")
        if core is not None:
            pairs.add((_field(block, "physical id"), core))
    return len(pairs) or None


def cpu_identity(cpuinfo: str, torch_threads: int | None = None) -> dict[str, Any]:
    """The CPU described by ``cpuinfo`` (the text of ``/proc/cpuinfo``)."""
    vendor, family, model = _field(cpuinfo, "vendor_id"), _int(_field(cpuinfo, "cpu family")), \
        _int(_field(cpuinfo, "model"))
    flags = set((_field(cpuinfo, "flags") or "").split())
    return {
        "vendor": vendor, "family": family, "model": model, "stepping": _int(_field(cpuinfo, "stepping")),
        "model_name": _field(cpuinfo, "model name"), "microarch": microarch(vendor, family, model),
        "isa": {f: f in flags for f in KERNEL_FLAGS}, "physical_cores": _physical_cores(cpuinfo),
        "logical_cpus": os.cpu_count(), "torch_threads": torch_threads,
    }


def _read_cpuinfo() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return f.read()
    except OSError:
        return ""


def gpu_identity(torch: Any, index: int) -> dict[str, Any]:
    """Name, compute capability, count, driver and CUDA versions of CUDA device ``index`` (fields may be None)."""
    out: dict[str, Any] = {"name": None, "capability": None, "count": None, "cuda": torch.version.cuda,
                           "driver": None}
    try:
        out["name"] = torch.cuda.get_device_name(index)
        out["capability"] = "{}.{}".format(*torch.cuda.get_device_capability(index))
        out["count"] = torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - a broken driver leaves the fields None
        pass
    try:  # NVML is optional (package nvidia-ml-py); it alone knows the driver version
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        out["driver"] = v.decode() if isinstance(v, bytes) else v
    except Exception:  # noqa: BLE001 - no module, no driver: the field stays None
        pass
    return out


def identity(device: str = "cpu") -> dict[str, Any]:
    """This machine as a run on ``device`` sees it: ``{"kind", "cpu", "gpu", "torch"}``."""
    import torch

    dev = str(device)
    gpu = gpu_identity(torch, int(dev.split(":")[1]) if ":" in dev else 0) if dev.startswith("cuda") else None
    return {"kind": "cuda" if gpu else "cpu", "cpu": cpu_identity(_read_cpuinfo(), torch.get_num_threads()),
            "gpu": gpu, "torch": torch.__version__}


def native_bf16(ident: dict[str, Any], cuda_bf16: bool | None = None) -> bool:
    """Whether the device of ``ident`` computes bf16 natively (CUDA: ``cuda_bf16``, i.e. capability >= 8.0)."""
    if ident.get("kind") == "cuda":
        if cuda_bf16 is not None:
            return cuda_bf16
        cap = (ident.get("gpu") or {}).get("capability")
        return cap is not None and float(cap) >= 8.0
    isa = (ident.get("cpu") or {}).get("isa") or {}
    return any(isa.get(f) for f in BF16_CPU_FLAGS)


def resolve_dtype(requested: str | None, declared: str | None, ident: dict[str, Any]) -> tuple[str, str]:
    """``(dtype, why)`` for a model whose config declares ``declared`` on the device of ``ident``."""
    req = str(requested or "auto")
    if req not in DTYPES:
        from spectune.errors import ConfigError

        raise ConfigError(f"unknown dtype '{requested}': use {', '.join(DTYPES)}")
    if req != "auto":
        return req, "asked for"
    kind = ident.get("kind", "cpu")
    if declared not in HALF:
        return "float32", f"the model's config declares {declared or 'no dtype'}"
    if kind == "cuda":
        if declared == "float16" or native_bf16(ident):
            return declared, f"the model's config declares {declared}; the GPU computes it natively"
        return "float16", "the model's config declares bfloat16, which this GPU lacks: its float16"
    if declared == "bfloat16" and native_bf16(ident):
        flag = next(f for f in BF16_CPU_FLAGS if ident["cpu"]["isa"].get(f))
        return "bfloat16", f"the model's config declares bfloat16 and this CPU has {flag}"
    why = "no avx512_bf16/amx_bf16" if declared == "bfloat16" else "float16 runs on a CPU only when asked for"
    return "float32", f"the model's config declares {declared}; {why}: float32"


def short_dtype(dtype: str) -> str:
    return _SHORT.get(str(dtype).replace("torch.", ""), str(dtype))


def describe(ident: dict[str, Any] | None) -> str:
    """One line: 'cpu AuthenticAMD family 25 model 17 (zen4), 2 cores, 2 threads' / 'cuda NVIDIA H100 (9.0) x1'."""
    if not ident:
        return "an unrecorded machine"
    if ident.get("kind") == "cuda":
        g = ident.get("gpu") or {}
        return f"cuda {g.get('name')} (sm {g.get('capability')}) x{g.get('count')}"
    c = ident.get("cpu") or {}
    arch = f" ({c['microarch']})" if c.get("microarch") else ""
    return (f"cpu {c.get('vendor')} family {c.get('family')} model {c.get('model')}{arch}, "
            f"{c.get('physical_cores')} cores, {c.get('torch_threads')} threads")


def slug(ident: dict[str, Any], dtype: str | None = None) -> str:
    """A directory-name part, e.g. ``cpu-amd-zen4-x2-bf16`` or ``cuda-nvidia-h100-80gb-hbm3-x1-bf16``."""
    if ident.get("kind") == "cuda":
        g = ident.get("gpu") or {}
        text = f"cuda-{g.get('name')}-x{g.get('count')}"
    else:
        c = ident.get("cpu") or {}
        vendor = {"AuthenticAMD": "amd", "GenuineIntel": "intel"}.get(str(c.get("vendor")), str(c.get("vendor")))
        arch = c.get("microarch") or f"family{c.get('family')}-model{c.get('model')}"
        text = f"cpu-{vendor}-{arch}-x{c.get('physical_cores')}"
    if dtype:
        text += f"-{short_dtype(dtype)}"
    text = re.sub(r"\((r|tm)\)", "", text.lower())
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")[:80]


def _diff(kind: str, rec: dict[str, Any], cur: dict[str, Any]) -> str | None:
    keys = GPU_MATCH if kind == "gpu" else CPU_MATCH
    for k in keys:
        if rec.get(k) != cur.get(k):
            return f"{kind} {k} {rec.get(k)!r} (this machine: {cur.get(k)!r})"
    if kind == "cpu":
        for f in KERNEL_FLAGS:
            if bool((rec.get("isa") or {}).get(f)) != bool((cur.get("isa") or {}).get(f)):
                return f"cpu flag {f} {'present' if (rec.get('isa') or {}).get(f) else 'absent'} " \
                       f"(this machine: {'present' if (cur.get('isa') or {}).get(f) else 'absent'})"
    return None


def profile_dtypes(meta: dict[str, Any]) -> set[str]:
    """The dtypes a profile's models ran in (``torch.`` prefix dropped)."""
    return {str(m.get("dtype", "float32")).replace("torch.", "") for m in meta.get("models", []) or []}


def engine_name(meta: dict[str, Any]) -> str | None:
    """The serving engine whose latency a profile (its ``profile.json``) holds; None: spectune's runtime."""
    rec = meta.get("engine")
    return rec.get("name") if isinstance(rec, dict) else None


def engine_mismatch(meta: dict[str, Any], engine: str | None) -> str | None:
    """Whose latency the profile holds against whose the request prices: spectune's runtime (``engine`` None) or
    a serving engine's (its name); one phrase where they differ."""
    name = engine_name(meta)
    if name == engine:
        return None
    if name is None:
        return f"measured with spectune's {(meta.get('settings') or {}).get('runtime', 'eager')} runtime, not {engine}"
    what = f"{name} {meta['engine'].get('version', '')}".strip()
    return f"measured through {what}" + (f", not {engine}" if engine else ", not spectune's runtime")


def profile_mismatch(meta: dict[str, Any], here: dict[str, Any], dtypes: Any = None,
                     runtime: str | None = None, engine: str | None = None) -> str | None:
    """None when the profile (its ``profile.json`` as a dict) was measured on this machine (``here``, from
    :func:`identity`), in ``dtypes`` (one dtype, the run's dtypes, or None: any), through ``engine`` (None:
    spectune's runtime, then ``runtime``, None: any runtime) -- an engine profile never prices the runtime, nor a
    runtime profile an engine; else one phrase naming the first field that differs. A profile without an
    identity block cannot be matched: 'identity unknown'."""
    ident = (meta.get("hardware") or {}).get("identity")
    if not isinstance(ident, dict):
        return "identity unknown (calibrated before spectune recorded machine identities): recalibrate"
    if ident.get("kind") != here.get("kind"):
        return f"measured on {ident.get('kind')}, this run uses {here.get('kind')}"
    part = "gpu" if here.get("kind") == "cuda" else "cpu"
    why = _diff(part, ident.get(part) or {}, here.get(part) or {})
    if why:
        return f"measured on {describe(ident)}: {why}"
    dts = profile_dtypes(meta)
    want = None if dtypes is None else {str(d).replace("torch.", "") for d in
                                        ([dtypes] if isinstance(dtypes, str) else dtypes)}
    if want is not None and dts != want:
        return f"measured in {','.join(sorted(dts))}, this run uses {','.join(sorted(want))}"
    why = engine_mismatch(meta, engine)
    if why or engine is not None:
        return why
    rt = (meta.get("settings") or {}).get("runtime", "eager")
    if runtime is not None and rt != runtime:
        return f"measured with the {rt} runtime, this run uses {runtime}"
    return None


_HERE: dict[str, dict[str, Any]] = {}


def here(device: str = "cpu") -> dict[str, Any]:
    """:func:`identity` of ``device``, read once per process and GPU (threads are read again: they can change)."""
    import torch

    key = "cpu"
    if str(device).startswith("cuda"):  # one entry per GPU: cuda:1 may be another card than cuda:0
        idx = torch.device(device).index
        key = f"cuda:{idx if idx is not None else (torch.cuda.current_device() if torch.cuda.is_available() else 0)}"
    if key not in _HERE:
        _HERE[key] = identity(key if key != "cpu" else device)  # "cuda" read as the card it names now
    _HERE[key]["cpu"]["torch_threads"] = torch.get_num_threads()
    return _HERE[key]
