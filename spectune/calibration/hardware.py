"""Hardware fingerprint: what a profile was measured on, so advice is only reused where it applies.

* CUDA device: NVML (``pynvml``, package ``nvidia-ml-py``) gives GPU name, memory total/used, driver, SM and memory
  clocks, power limit and temperature; :func:`finish` adds the temperature and memory used at the end of the
  calibration. torch's CUDA version and device name are recorded as well.
* CPU (or no NVML): CPU model, physical cores, logical CPUs, torch intra-op threads, memory.

NVML is optional: a missing module, a failing ``nvmlInit`` (no driver) or any NVML call error yields the CPU path
or a ``null`` field, silently. The NVML module is injectable (``nvml=``) so tests run against a fake.
"""
from __future__ import annotations

import copy
import os
import platform
from typing import Any

from spectune.machine import describe as describe_identity


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _physical_cores() -> int | None:
    try:
        pairs = set()
        phys = core = None
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("physical id"):
                    phys = line.split(":", 1)[1].strip()
                elif line.startswith("core id"):
                    core = line.split(":", 1)[1].strip()
                elif not line.strip():
                    if core is not None:
                        pairs.add((phys, core))
                    phys = core = None
        if core is not None:
            pairs.add((phys, core))
        return len(pairs) or None
    except OSError:
        return None


def _meminfo_bytes(field: str) -> int | None:
    """``field`` of /proc/meminfo in bytes, or None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _mem_total_bytes() -> int | None:
    return _meminfo_bytes("MemTotal")


def mem_available_bytes() -> int | None:
    """Free-for-use host memory (``MemAvailable``), or None where unknown."""
    return _meminfo_bytes("MemAvailable")


def _load_avg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None


class CpuWatch:
    """The share of this machine's CPU time that went elsewhere while a measurement ran: to other processes and
    to the hypervisor (steal), from ``/proc/stat`` less this process's own CPU time. 0.25 on a 2-CPU machine:
    another process kept one CPU busy half the time. ``others()`` is None where ``/proc/stat`` is missing.
    ``clock`` / ``own`` (wall seconds / this process's CPU seconds) are for tests."""

    def __init__(self, stat_path: str = "/proc/stat", clock: Any = None, own: Any = None):
        import time

        self.stat_path, self.clock = stat_path, clock or time.monotonic
        self.own = own or (lambda: sum(os.times()[:2]))
        self._t0, self._busy0, self._own0 = self.clock(), _busy_seconds(stat_path), self.own()

    def others(self) -> float | None:
        t1, busy1, own1 = self.clock(), _busy_seconds(self.stat_path), self.own()
        if busy1 is None or self._busy0 is None or t1 <= self._t0:
            return None
        share = ((busy1 - self._busy0) - (own1 - self._own0)) / ((t1 - self._t0) * (os.cpu_count() or 1))
        return min(max(share, 0.0), 1.0)


def _busy_seconds(stat_path: str = "/proc/stat") -> float | None:
    """CPU seconds every CPU spent not idle (user, nice, system, irq, softirq, steal) since boot."""
    try:
        with open(stat_path) as f:
            head = f.readline().split()
        ticks = [int(x) for x in head[1:9]]
    except (OSError, ValueError, IndexError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (ticks + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def load_nvml(nvml: Any = None) -> Any | None:
    """An initialised NVML module, or None (no module, no driver). Never warns."""
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[no-redef]
        except Exception:  # ImportError, or a broken install
            return None
    try:
        nvml.nvmlInit()
    except Exception:
        return None
    return nvml


def _call(fn, *args):
    try:
        v = fn(*args)
    except Exception:
        return None
    return v.decode() if isinstance(v, bytes) else v


def nvml_snapshot(nvml: Any, index: int) -> dict[str, Any]:
    """Everything NVML tells about GPU ``index``; fields that fail are None."""
    h = _call(nvml.nvmlDeviceGetHandleByIndex, index)
    if h is None:
        return {}
    mem = _call(nvml.nvmlDeviceGetMemoryInfo, h)
    temp_sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
    power = _call(nvml.nvmlDeviceGetPowerManagementLimit, h)
    return {
        "gpu_name": _call(nvml.nvmlDeviceGetName, h),
        "memory_total_bytes": getattr(mem, "total", None),
        "memory_used_bytes": getattr(mem, "used", None),
        "driver_version": _call(nvml.nvmlSystemGetDriverVersion),
        "sm_clock_mhz": _call(nvml.nvmlDeviceGetClockInfo, h, getattr(nvml, "NVML_CLOCK_SM", 1)),
        "memory_clock_mhz": _call(nvml.nvmlDeviceGetClockInfo, h, getattr(nvml, "NVML_CLOCK_MEM", 2)),
        "power_limit_w": None if power is None else power / 1000.0,
        "temperature_c_start": _call(nvml.nvmlDeviceGetTemperature, h, temp_sensor),
    }


def fingerprint(device: str = "cpu", nvml: Any = None, use_nvml: bool = True) -> dict[str, Any]:
    """Describe the machine calibration runs on (see the module docstring); ``identity`` is what profile
    matching compares (``spectune.machine.here``: the identity every lookup in this process compares with)."""
    import torch

    from spectune.machine import here

    dev = str(device)
    hw: dict[str, Any] = {
        "identity": copy.deepcopy(here(dev)),  # the process's cached one is not ours to change
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_model": _cpu_model(),
        "cpu_physical_cores": _physical_cores(),
        "cpu_logical": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "memory_total_bytes": _mem_total_bytes(),
        "load_avg_start": _load_avg(),  # 1-minute load average: other work on the machine skews timings
    }
    if dev.startswith("cuda"):
        index = int(dev.split(":")[1]) if ":" in dev else 0
        hw.update(kind="cuda", device_index=index, cuda_version=torch.version.cuda)
        try:
            hw["name"] = torch.cuda.get_device_name(index)
            hw["count"] = torch.cuda.device_count()
        except Exception:
            hw["name"], hw["count"] = None, None
        mod = load_nvml(nvml) if use_nvml else None
        hw["nvml"] = nvml_snapshot(mod, index) if mod is not None else None
        if hw["nvml"] and hw["nvml"].get("gpu_name"):
            hw["name"] = hw["nvml"]["gpu_name"]
    else:
        hw.update(kind="cpu", name=hw["cpu_model"], count=hw["cpu_logical"], nvml=None)
    return hw


def finish(hw: dict[str, Any], nvml: Any = None) -> dict[str, Any]:
    """Add the end-of-run load average and, with NVML, GPU temperature and memory used."""
    hw["load_avg_end"] = _load_avg()
    if not hw.get("nvml"):
        return hw
    mod = load_nvml(nvml)
    if mod is None:
        return hw
    snap = nvml_snapshot(mod, int(hw.get("device_index", 0)))
    hw["nvml"]["temperature_c_end"] = snap.get("temperature_c_start")
    hw["nvml"]["memory_used_bytes_end"] = snap.get("memory_used_bytes")
    return hw


def describe(hw: dict[str, Any]) -> str:
    """One line naming the machine: its exact identity where recorded ('cpu AuthenticAMD family 25 model 17
    (zen4), 2 cores, 2 threads'), else the old 'cpu: AMD EPYC x2'."""
    if isinstance(hw.get("identity"), dict):
        return describe_identity(hw["identity"])
    return f"{hw.get('kind')}: {hw.get('name')} x{hw.get('count')} (identity unknown: recalibrate)"
