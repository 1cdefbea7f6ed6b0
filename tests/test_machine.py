"""Machine identity, ``--dtype auto`` and the one profile-matching rule (``spectune.machine``)."""
import json

import pytest

from spectune import machine as M
from spectune.errors import ConfigError

ZEN4_FLAGS = "fpu sse2 avx avx2 fma avx512f avx512bw avx512_vnni avx512_bf16"
ZEN_FLAGS = "fpu sse2 avx avx2 fma"


def cpuinfo(family: int, model: int, flags: str, cores: int = 2, name: str = "AMD EPYC",
            vendor: str = "AuthenticAMD") -> str:
    block = (f"processor\t: {{i}}\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
             f"model name\t: {name}\nstepping\t: 1\nphysical id\t: 0\ncore id\t\t: {{i}}\nflags\t\t: {flags}\n")
    return "\n".join(block.format(i=i) for i in range(cores)) + "\n"


def cpu(family=25, model=17, flags=ZEN4_FLAGS, threads=2, **kw):
    return {"kind": "cpu", "cpu": M.cpu_identity(cpuinfo(family, model, flags, **kw), threads), "gpu": None,
            "torch": "2.13.0+cpu"}


def gpu(name="NVIDIA H100 80GB HBM3", capability="9.0", count=1):
    return {"kind": "cuda", "cpu": cpu()["cpu"], "gpu": {"name": name, "capability": capability, "count": count,
                                                        "cuda": "12.8", "driver": "570.1"}, "torch": "2.13.0"}


def meta_of(ident, dtypes=("bfloat16", "bfloat16"), runtime=None):
    settings = {} if runtime is None else {"runtime": runtime}
    return {"hardware": {"identity": ident}, "models": [{"name": f"m{i}", "dtype": f"torch.{d}"}
                                                        for i, d in enumerate(dtypes)], "settings": settings}


def test_cpu_identity_parses_family_model_flags_and_cores():
    c = M.cpu_identity(cpuinfo(25, 17, ZEN4_FLAGS, cores=2), 2)
    assert (c["vendor"], c["family"], c["model"], c["stepping"], c["microarch"]) == ("AuthenticAMD", 25, 17, 1, "zen4")
    assert c["isa"]["avx512_bf16"] and c["isa"]["avx2"] and not c["isa"]["amx_bf16"]
    assert c["physical_cores"] == 2 and c["torch_threads"] == 2
    old = M.cpu_identity(cpuinfo(23, 49, ZEN_FLAGS), 2)
    assert old["microarch"] == "zen2" and not old["isa"]["avx512f"]
    assert M.microarch("GenuineIntel", 6, 0x8F) == "sapphirerapids" and M.microarch("Acme", 1, 1) is None


@pytest.mark.parametrize("flags,declared,want", [
    (ZEN4_FLAGS, "bfloat16", "bfloat16"),  # avx512_bf16: the model's own dtype
    (ZEN_FLAGS + " amx_tile amx_bf16", "bfloat16", "bfloat16"),  # AMX counts too
    (ZEN_FLAGS, "bfloat16", "float32"),  # AVX2 only: bf16 is emulated, fp32 is faster
    (ZEN4_FLAGS, "float16", "float32"),  # fp16 on a CPU only when asked for
    (ZEN4_FLAGS, "float32", "float32"),
    (ZEN4_FLAGS, None, "float32"),
])
def test_auto_dtype_from_cpu_flags(flags, declared, want):
    dtype, why = M.resolve_dtype("auto", declared, cpu(flags=flags))
    assert dtype == want and why and "\n" not in why


@pytest.mark.parametrize("capability,declared,want", [
    ("9.0", "bfloat16", "bfloat16"), ("8.0", "bfloat16", "bfloat16"), ("7.5", "bfloat16", "float16"),
    ("7.5", "float16", "float16"), ("9.0", "float32", "float32"),
])
def test_auto_dtype_from_cuda_capability(capability, declared, want):
    assert M.resolve_dtype("auto", declared, gpu(capability=capability))[0] == want


def test_explicit_dtype_wins_and_unknown_is_one_line_error():
    assert M.resolve_dtype("float16", "bfloat16", cpu()) == ("float16", "asked for")
    assert M.resolve_dtype("float32", "bfloat16", cpu())[0] == "float32"
    with pytest.raises(ConfigError, match="unknown dtype 'int3'"):
        M.resolve_dtype("int3", "bfloat16", cpu())


def test_same_name_other_family_does_not_match_and_names_the_field():
    here = cpu(25, 17, ZEN4_FLAGS)
    assert M.profile_mismatch(meta_of(cpu(25, 17, ZEN4_FLAGS)), here) is None
    why = M.profile_mismatch(meta_of(cpu(23, 49, ZEN_FLAGS)), here)  # both say "AMD EPYC"
    assert why and "family 23" in why and "this machine: 25" in why and "\n" not in why
    assert "model 16" in M.profile_mismatch(meta_of(cpu(25, 16, ZEN4_FLAGS)), here)
    assert "avx512_bf16" in M.profile_mismatch(meta_of(cpu(25, 17, ZEN4_FLAGS.replace(" avx512_bf16", ""))), here)
    assert "torch_threads" in M.profile_mismatch(meta_of(cpu(threads=1)), here)


def test_dtype_runtime_and_kind_are_part_of_the_match():
    here = cpu()
    assert M.profile_mismatch(meta_of(cpu()), here, "bfloat16") is None
    assert M.profile_mismatch(meta_of(cpu()), here, ["bfloat16", "bfloat16"]) is None
    assert "measured in bfloat16, this run uses float32" in M.profile_mismatch(meta_of(cpu()), here, "float32")
    assert M.profile_mismatch(meta_of(cpu()), here, runtime="eager") is None  # no runtime recorded: eager
    assert "compiled" in M.profile_mismatch(meta_of(cpu(), runtime="compiled"), here, runtime="eager")
    assert "measured on cuda" in M.profile_mismatch(meta_of(gpu()), here)
    assert M.profile_mismatch(meta_of(gpu()), gpu()) is None
    assert "capability" in M.profile_mismatch(meta_of(gpu(capability="8.0")), gpu())


def test_profile_without_identity_is_identity_unknown():
    old = {"hardware": {"kind": "cpu", "name": "AMD EPYC", "count": 2}, "models": [], "settings": {}}
    assert M.profile_mismatch(old, cpu()).startswith("identity unknown")


def test_slug_carries_microarch_and_dtype():
    assert M.slug(cpu(), "bfloat16") == "cpu-amd-zen4-x2-bf16"
    assert M.slug(cpu(23, 1, ZEN_FLAGS), "float32") == "cpu-amd-zen-x2-fp32"
    assert M.slug(gpu(), "bfloat16") == "cuda-nvidia-h100-80gb-hbm3-x1-bf16"


def test_this_machine_identity_is_complete():
    here = M.here("cpu")
    assert here["kind"] == "cpu" and here["cpu"]["torch_threads"] >= 1 and here["torch"]
    assert set(M.KERNEL_FLAGS) == set(here["cpu"]["isa"])
    assert json.loads(json.dumps(here)) == here  # recordable as JSON


def test_here_reads_each_gpu_apart(monkeypatch):
    """cuda:1 may be another card than cuda:0: each device index gets its own identity, read once."""
    import spectune.machine as M

    reads = []
    monkeypatch.setattr(M, "_HERE", {})
    monkeypatch.setattr(M, "identity", lambda d: reads.append(str(d)) or {"cpu": {}, "gpu": {"name": str(d)}})
    assert M.here("cuda:1")["gpu"]["name"] == "cuda:1" and M.here("cuda:0")["gpu"]["name"] == "cuda:0"
    assert M.here("cuda:1") is M.here("cuda:1") and reads == ["cuda:1", "cuda:0"]
    assert M.here("cpu")["gpu"]["name"] == "cpu"
    assert M.here("cuda") is M.here("cuda:0")  # no CUDA here: the current card is 0
