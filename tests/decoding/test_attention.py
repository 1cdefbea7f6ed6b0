"""Eager forwards on CUDA run SDPA without cuDNN's backend (its per-shape plans cost ~40 ms per new cache length on
an H100: spectune/decoding/attention.py); on a CPU nothing changes. Checked through torch's own backend flags, so
no GPU is needed."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from spectune.decoding.attention import eager_attention, model_device
from spectune.decoding.hf_compat import forward

flags = torch.backends.cuda
pytestmark = pytest.mark.skipif(not hasattr(flags, "cudnn_sdp_enabled"), reason="torch without SDPA backend flags")


def _enabled() -> dict[str, bool]:
    return {"cudnn": flags.cudnn_sdp_enabled(), "flash": flags.flash_sdp_enabled(),
            "efficient": flags.mem_efficient_sdp_enabled(), "math": flags.math_sdp_enabled()}


class _Recorder(torch.nn.Module):
    """A model on a chosen device that records which SDPA backends were allowed while its forward ran."""

    def __init__(self, device: str):
        super().__init__()
        self.device = torch.device(device)

    def forward(self, input_ids, past_key_values=None):
        self.seen = _enabled()
        return SimpleNamespace(past_key_values=past_key_values, logits=torch.zeros(1, 1, 2))


def test_cuda_excludes_cudnn_attention_and_restores_the_flags_after():
    before = _enabled()
    with eager_attention("cuda:0"):
        assert _enabled() == {"cudnn": False, "flash": True, "efficient": True, "math": True}
    assert _enabled() == before
    with eager_attention(torch.device("cpu")):
        assert _enabled() == before


def test_every_spectune_forward_runs_under_it_on_the_models_device():
    gpu, cpu = _Recorder("cuda"), _Recorder("cpu")
    forward(gpu, None, input_ids=torch.zeros(1, 1, dtype=torch.long))
    forward(cpu, None, input_ids=torch.zeros(1, 1, dtype=torch.long))
    assert gpu.seen["cudnn"] is False and gpu.seen["flash"] is True
    assert cpu.seen == _enabled()  # untouched on a CPU


def test_model_device_reads_the_attribute_then_the_parameters():
    assert model_device(_Recorder("cuda:1")) == torch.device("cuda:1")
    assert model_device(torch.nn.Linear(2, 2)) == torch.device("cpu")
    assert model_device(torch.nn.Identity()) == torch.device("cpu")


def test_a_backend_the_user_turned_off_stays_off():
    before = flags.flash_sdp_enabled()
    flags.enable_flash_sdp(False)
    try:
        with eager_attention("cuda"):
            assert _enabled() == {"cudnn": False, "flash": False, "efficient": True, "math": True}
    finally:
        flags.enable_flash_sdp(before)


def test_the_compiled_runtimes_eager_steps_run_under_it(monkeypatch, tiny_dirs):
    """The store's allocation and prompts (longer than any k bucket) run the static step eagerly, inside the same
    attention choice, on the runner's device (nothing is compiled: no fed length fits a bucket)."""
    import contextlib

    import spectune.decoding.static_cache as SC
    from spectune.models import load_model

    model = load_model(str(tiny_dirs["m"]), dtype="float32").model  # its own engine: the store is allocated here
    inside, entered = [False], []

    @contextlib.contextmanager
    def spy(device):
        entered.append(torch.device(device).type)
        inside[0] = True
        yield
        inside[0] = False

    step = SC.Engine.step
    steps_inside = []
    monkeypatch.setattr(SC, "eager_attention", spy)
    monkeypatch.setattr(SC.Engine, "step", lambda self, x: steps_inside.append(inside[0]) or step(self, x))
    run = SC.StaticRunner(model, rows=1, max_len=64, compiled=True)
    run.forward({0: [3, 4, 5] * 10})
    assert len(steps_inside) == 2 and all(steps_inside)  # the allocation step and the prompt
    assert entered == ["cpu", "cpu"]
