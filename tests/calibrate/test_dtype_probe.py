"""``--dtype auto`` in calibration: the flags rule, then a measured check against float32 on CPUs."""
import json
import shutil

import pytest

from spectune import machine
from spectune.calibration import dtype_probe
from spectune.models import load_model


def test_choose_keeps_the_faster_dtype_and_says_why():
    assert dtype_probe.choose({"bfloat16": 0.010, "float32": 0.020}, "bfloat16")[0] == "bfloat16"
    dtype, why = dtype_probe.choose({"bfloat16": 0.030, "float32": 0.020}, "bfloat16")
    assert dtype == "float32" and "flags rule chose bfloat16" in why and "30.0 ms" in why and "\n" not in why


def test_only_auto_on_a_cpu_with_a_half_dtype_is_probed():
    assert dtype_probe.needs_probe("auto", "cpu", ["bfloat16", "bfloat16"])
    assert not dtype_probe.needs_probe("bfloat16", "cpu", ["bfloat16"])  # asked for: no second guessing
    assert not dtype_probe.needs_probe("auto", "cpu", ["float32"])
    assert not dtype_probe.needs_probe("auto", "cuda", ["bfloat16"])


@pytest.fixture
def bf16_family(tiny_dirs, tmp_path, monkeypatch):
    """Tiny models whose configs declare bfloat16, on a (faked) CPU with avx512_bf16."""
    out = []
    for k in ("s", "l"):
        d = shutil.copytree(tiny_dirs[k], tmp_path / k)
        cfg = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**cfg, "dtype": "bfloat16"}))
        out.append(str(d))
    real = machine.here

    def bf16_cpu(device="cpu"):
        ident = real(device)
        return {**ident, "cpu": {**ident["cpu"], "isa": {**ident["cpu"]["isa"], "avx512_bf16": True}}}

    monkeypatch.setattr(machine, "here", bf16_cpu)
    return out


def test_probe_times_both_dtypes(bf16_family):
    loaded = [load_model(m) for m in bf16_family]
    assert [m.dtype for m in loaded] == ["bfloat16", "bfloat16"] and "avx512_bf16" in loaded[0].dtype_reason
    res = dtype_probe.probe(loaded, bf16_family, "cpu", 2, lambda s, d: [load_model(x, dtype=d) for x in s])
    assert set(res["seconds"]) == {"bfloat16", "float32"} and all(t > 0 for t in res["seconds"].values())
    assert res["dtype"] == min(res["seconds"], key=res["seconds"].get)


def test_calibrate_records_the_choice(bf16_family, tmp_path, monkeypatch):
    from spectune.calibration import calibrate

    monkeypatch.setattr(dtype_probe, "time_dtypes", lambda models, k: {"bfloat16": 0.03, "float32": 0.02})
    wl = tmp_path / "p.txt"
    wl.write_text("w1 w2 w3\nw4 w5\nw6 w7 w8\nw9 w1\n")
    prof = calibrate(bf16_family, workload=str(wl), batch_sizes=(1,), contexts=(4,), max_k=2, repeats=1,
                     prompts_per_workload=1, states_per_prompt=1, prompt_batch=1, progress=False,
                     out=tmp_path / "prof")
    choice = prof.settings["dtype_choice"]
    assert choice["dtype"] == "float32" and "measured faster" in choice["why"]
    assert [m["dtype"] for m in prof.meta["models"]] == ["float32", "float32"]  # reloaded in the faster dtype
    assert prof.meta["hardware"]["identity"]["cpu"]["isa"]["avx512_bf16"]
    assert prof.path.name == "prof" and machine.profile_mismatch(prof.meta, machine.here(), "float32") is None
