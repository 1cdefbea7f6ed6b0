"""Hardware fingerprint: NVML against a fake module, and the clean no-NVML path."""
import sys
import warnings
from types import SimpleNamespace

from spectune.calibration import hardware


class FakeNVML:
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2

    def __init__(self):
        self.temp = 40
        self.inits = 0

    def nvmlInit(self):
        self.inits += 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"h{i}"

    def nvmlDeviceGetName(self, h):
        return b"Fake GPU 80GB"

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=80 * 2**30, used=2**30)

    def nvmlSystemGetDriverVersion(self):
        return "550.1"

    def nvmlDeviceGetClockInfo(self, h, which):
        return {1: 1980, 2: 2619}[which]

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return 700000

    def nvmlDeviceGetTemperature(self, h, sensor):
        self.temp += 5
        return self.temp


def test_nvml_path_with_fake_module():
    fake = FakeNVML()
    hw = hardware.fingerprint("cuda:0", nvml=fake)
    assert hw["kind"] == "cuda" and hw["name"] == "Fake GPU 80GB"
    n = hw["nvml"]
    assert n["gpu_name"] == "Fake GPU 80GB" and n["driver_version"] == "550.1"
    assert n["memory_total_bytes"] == 80 * 2**30 and n["sm_clock_mhz"] == 1980 and n["memory_clock_mhz"] == 2619
    assert n["power_limit_w"] == 700.0 and n["temperature_c_start"] == 45
    hardware.finish(hw, nvml=fake)
    assert hw["nvml"]["temperature_c_end"] == 50
    assert "torch" in hw and "cuda_version" in hw


def test_nvml_call_failures_become_none():
    fake = FakeNVML()

    def boom(*a):
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    fake.nvmlDeviceGetPowerManagementLimit = boom
    hw = hardware.fingerprint("cuda", nvml=fake)
    assert hw["nvml"]["power_limit_w"] is None and hw["nvml"]["gpu_name"] == "Fake GPU 80GB"


def test_no_nvml_is_silent(monkeypatch):
    class NoDriver:
        def nvmlInit(self):
            raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert hardware.load_nvml() is None
        assert hardware.load_nvml(NoDriver()) is None
        hw = hardware.fingerprint("cuda", nvml=NoDriver())
        assert hw["nvml"] is None
        hardware.finish(hw, nvml=NoDriver())


def test_cpu_fingerprint():
    hw = hardware.fingerprint("cpu")
    assert hw["kind"] == "cpu" and hw["nvml"] is None
    assert hw["name"] and hw["cpu_logical"] >= 1 and hw["torch_threads"] >= 1
    assert hw["identity"]["kind"] == "cpu" and hw["identity"]["cpu"]["family"] is not None
    assert hardware.describe(hw).startswith("cpu ") and "family" in hardware.describe(hw)
    assert "identity unknown" in hardware.describe({"kind": "cpu", "name": "AMD EPYC", "count": 2})


def test_cpu_watch_share_of_others(tmp_path):
    """Others' share = (busy CPU seconds of the machine - this process's) / (wall seconds x CPUs); steal counts."""
    import os

    stat = tmp_path / "stat"
    hz, cpus = os.sysconf("SC_CLK_TCK"), os.cpu_count() or 1
    stat.write_text("cpu  100 0 50 1000 0 0 0 0 0 0\ncpu0 1 2 3\n")
    clock, own = iter([10.0, 12.0]), iter([5.0, 6.0])
    w = hardware.CpuWatch(str(stat), clock=lambda: next(clock), own=lambda: next(own))
    extra = 2.0 * cpus * 0.25 + 1.0  # over 2 s: others a quarter of every CPU, this process 1 CPU second
    stat.write_text(f"cpu  {100 + extra * hz / 2:.0f} 0 50 1000 0 0 0 {extra * hz / 2:.0f} 0 0\n")
    assert abs(w.others() - 0.25) < 0.01
    assert hardware.CpuWatch(str(tmp_path / "missing")).others() is None
