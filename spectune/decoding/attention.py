"""Which scaled-dot-product-attention kernels an eager forward may use: on CUDA, not cuDNN's.

Measured on an H100 (torch 2.11 + CUDA 13.0, transformers 5.24, docs/gpu.md "Eager attention"): with cuDNN's SDPA
backend enabled, as torch enables it by default there, every forward whose key length the process has not seen
before costs ~40 ms more (cuDNN builds an execution plan per shape), whatever the model's size: draft-s (2
layers) took 42-70 ms per forward instead of 2.0-3.8 ms, SmolLM2 60-70 ms instead of 18-21 ms. A decode loop
feeds a longer cache at every step, so it paid that on every forward, while a calibration that times one shape
again and again did not: the profile and the runtime disagreed by 2-20x. Flash / memory-efficient attention have
no per-shape plan, so every eager forward spectune makes on CUDA (``hf_compat.forward``: the runtime, calibration)
and HF's ``generate`` in the baselines run under :func:`eager_attention`, as do the compiled runtime's eager steps
(prompts, the store's allocation); its compiled steps are not wrapped: the static store gives every bucket one
shape. A CPU is unaffected (no cuDNN).
"""
from __future__ import annotations

import contextlib
from typing import Any, ContextManager

import torch


def eager_attention(device: Any) -> ContextManager[Any]:
    """A context in which SDPA may use the backends enabled now except cuDNN's (flash, memory-efficient, math), on
    a CUDA ``device``; elsewhere (or on a torch without ``torch.nn.attention.sdpa_kernel``) it changes nothing."""
    if torch.device(device).type != "cuda":
        return contextlib.nullcontext()
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # torch < 2.3
        return contextlib.nullcontext()
    on = torch.backends.cuda  # the backends the user left enabled, cuDNN's aside
    keep = [b for b, ok in ((SDPBackend.FLASH_ATTENTION, on.flash_sdp_enabled()),
                            (SDPBackend.EFFICIENT_ATTENTION, on.mem_efficient_sdp_enabled()),
                            (SDPBackend.MATH, on.math_sdp_enabled())) if ok]
    return sdpa_kernel(keep or [SDPBackend.MATH])


def model_device(model: Any) -> torch.device:
    """The device ``model`` runs on: its ``device`` attribute (transformers models), else its first parameter's."""
    dev = getattr(model, "device", None)
    if dev is not None:
        return torch.device(dev)
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")
