"""A stand-in for vLLM's OpenAI server, for the engine layer's fault and protocol tests (no model, no vllm).

Run as ``python -m vllm.entrypoints.openai.api_server --model M --port P [--speculative-config JSON] ...`` from a
directory that holds a ``vllm/entrypoints/openai/api_server.py`` importing this file (the tests lay it out), it
serves /health, /version, /v1/models, /v1/completions and /metrics in vLLM 0.32.0's exposition format (names and
labels from a real server's /metrics). A speculative config with ``num_speculative_tokens`` K makes each
completion count ceil(max_tokens / 2) drafts of K tokens, half of them accepted at position 0, and each step take
the time ``STEP_S + PER_TOKEN_S * (1 + K) (+ DRAFT_STEP_S + DRAFT_TOKEN_S * K for a draft model)``; a request
takes its time to first token, ``TTFT_S``, then sleeps its steps (as many as its tokens take at the tokens a step
its counters say), so a client's decode goodput shows the engine's step, as a quiet engine's does. Faults, by
environment variable: FAKE_VLLM_FAIL=1 exits at start with an error line; FAKE_VLLM_DIE_AFTER=N exits after N
completions; FAKE_VLLM_NO_SPEC=1 ignores the speculative config (a silent fallback); FAKE_VLLM_LOAD_S=S loads for
S seconds before it serves. ``--api-key KEY`` makes /v1/* ask for the bearer token, as vLLM's does.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE = {"completions": 0, "generated": 0, "prompt": 0, "steps": 0, "drafts": 0, "draft_tokens": 0,
         "accepted": 0, "per_pos": [], "intervals": 0, "interval_s": 0.0}
# the stand-in's step time: 2 ms + 0.5 ms per token a row feeds the target (+ with a draft model 3 ms a step and
# 1 ms per draft-model token)
STEP_S, PER_TOKEN_S, DRAFT_STEP_S, DRAFT_TOKEN_S = 0.002, 0.0005, 0.003, 0.001
TTFT_S = 0.04  # a request's time to first token (long enough that the requests of concurrent clients overlap)
LOCK = threading.Lock()


def metrics(model: str, k: int) -> str:
    lab = f'engine="0",model_name="{model}"'
    s = STATE
    lines = ["# HELP vllm:generation_tokens_total Number of generation tokens processed.",
             "# TYPE vllm:generation_tokens_total counter",
             f"vllm:generation_tokens_total{{{lab}}} {float(s['generated'])}",
             f"vllm:prompt_tokens_total{{{lab}}} {float(s['prompt'])}",
             "# TYPE vllm:iteration_tokens_total histogram",
             f'vllm:iteration_tokens_total_bucket{{engine="0",le="+Inf",model_name="{model}"}} {float(s["steps"])}',
             f"vllm:iteration_tokens_total_count{{{lab}}} {float(s['steps'])}",
             f"vllm:iteration_tokens_total_sum{{{lab}}} {float(s['generated'] + s['prompt'])}",
             f"vllm:time_to_first_token_seconds_count{{{lab}}} {float(s['completions'])}",
             f"vllm:time_to_first_token_seconds_sum{{{lab}}} {TTFT_S * s['completions']}",
             f"vllm:inter_token_latency_seconds_count{{{lab}}} {float(s['intervals'])}",
             f"vllm:inter_token_latency_seconds_sum{{{lab}}} {s['interval_s']}"]
    if k:
        lines += [f"vllm:spec_decode_num_drafts_total{{{lab}}} {float(s['drafts'])}",
                  f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {float(s['draft_tokens'])}",
                  f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {float(s['accepted'])}"]
        lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} {float(v)}'
                  for i, v in enumerate(s["per_pos"] or [0] * k)]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--speculative-config", default=None)
    ap.add_argument("--per-request-spec-decode-metrics", default="none")
    ap.add_argument("--api-key", default=None)  # as vLLM's: /v1/* answer 401 without "Authorization: Bearer KEY"
    args, _ = ap.parse_known_args()
    if os.environ.get("FAKE_VLLM_FAIL"):
        print(f"INFO non-default args: {sys.argv[1:]}", flush=True)  # as vLLM logs them, an --api-key among them
        print("ValueError: the fake engine was told to fail", flush=True)
        sys.exit(1)
    print(f"INFO loading, pid {os.getpid()}, args {sys.argv[1:]}", flush=True)
    time.sleep(float(os.environ.get("FAKE_VLLM_LOAD_S", "0")))  # a model that takes its time to load
    spec = json.loads(args.speculative_config) if args.speculative_config else {}
    k = 0 if os.environ.get("FAKE_VLLM_NO_SPEC") else int(spec.get("num_speculative_tokens", 0))
    sched = spec.get("num_speculative_tokens_per_batch_size") or []
    inflight = [0]

    def k_at(b: int) -> int:  # vLLM's rule: the range holding b, else the K before it, capped at k
        out = k
        for lo, _, kk in sorted(sched):
            if lo <= b:
                out = kk
        return min(k, out)
    die_after = int(os.environ.get("FAKE_VLLM_DIE_AFTER", "0"))
    STATE["per_pos"] = [0] * k

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):  # quiet
            pass

        def _send(self, code: int, body: str, ctype: str = "application/json") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self.path = self.path.split("?")[0]  # a query (an attached URL's ?token=...) names no other page
            if self.path == "/health":
                return self._send(200, "")
            if self.path == "/version":
                return self._send(200, json.dumps({"version": "0.32.0"}))
            if self.path == "/v1/models":
                return self._send(200, json.dumps({"object": "list", "data": [{"id": args.model}]}))
            if self.path == "/metrics":
                with LOCK:
                    return self._send(200, metrics(args.model, k), "text/plain")
            self._send(404, json.dumps({"error": "not found"}))

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.path = self.path.split("?")[0]
            if args.api_key and self.headers.get("Authorization") != f"Bearer {args.api_key}":
                return self._send(401, json.dumps({"error": "Unauthorized"}))
            if self.path != "/v1/completions":
                return self._send(404, "{}")
            if any(t < 0 for t in body["prompt"]):  # as vLLM: a token id outside the vocabulary is a bad request
                return self._send(400, json.dumps({"error": "token id out of vocabulary"}))
            n, p = int(body["max_tokens"]), len(body["prompt"])
            with LOCK:
                inflight[0] += 1
                kb = k_at(inflight[0]) if k else 0
            drafts = math.ceil(n / 2) if kb else 0
            steps = drafts if kb else n - 1  # a speculative step per draft, else one per token after the first
            draft_cost = DRAFT_STEP_S + DRAFT_TOKEN_S * kb if spec.get("method") == "draft_model" else 0.0
            step_s = STEP_S + PER_TOKEN_S * (1 + kb) + draft_cost
            time.sleep(TTFT_S + n * step_s / (1.0 + (drafts // 2) / max(steps, 1)))  # n tokens, 1 + accepted a step
            with LOCK:
                inflight[0] -= 1
                STATE["completions"] += 1
                if die_after and STATE["completions"] > die_after:
                    os._exit(3)
                STATE["generated"] += n
                STATE["prompt"] += p
                STATE["steps"] += 1 + (drafts if k else n)
                STATE["drafts"] += drafts
                STATE["draft_tokens"] += drafts * kb
                STATE["intervals"] += steps
                STATE["interval_s"] += steps * step_s
                STATE["accepted"] += drafts // 2
                if k:
                    STATE["per_pos"][0] += drafts // 2
            out = {"choices": [{"index": 0, "text": " w1" * n}],
                   "usage": {"prompt_tokens": p, "completion_tokens": n}}
            if args.per_request_spec_decode_metrics == "detailed" and k:
                out["metrics"] = {"speculative_decoding": {"per_step_drafted": [kb] * drafts}}
            self._send(200, json.dumps(out))

    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
