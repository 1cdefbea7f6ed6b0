"""The engine schemas spectune exports to: every key or flag an export may emit, per engine version, with the
source each list was taken from. ``tests/export`` checks every exported key against these lists, so a key that
an engine does not know can never reach a user's file silently.

Sources (read 2026-11; see docs/export.md):
  * vLLM 0.25.0: ``SpeculativeConfig`` in vllm/config/speculative.py; the per-batch-size schedule
    ``num_speculative_tokens_per_batch_size`` (list of inclusive ``[batch_lo, batch_hi, K]`` ranges starting at
    1, K = 0 disables drafting; validated by vllm/v1/spec_decode/dynamic/utils.py).
  * vLLM 0.6.4: the flat engine arguments of vllm/engine/arg_utils.py (``speculative_model``,
    ``num_speculative_tokens``, ``speculative_disable_by_batch_size``).
  * SGLang: python/sglang/srt/server_args.py, ``--speculative-algorithm STANDALONE`` (a separate draft model;
    PR #10090, 2025-09); with top-k 1 the verified tokens per step are num_steps + 1.
  * TensorRT-LLM: tensorrt_llm/llmapi/llm_args.py ``DecodingBaseConfig`` / ``DraftTargetDecodingConfig``
    (YAML ``decoding_type: DraftTarget``); ``draft_len_schedule`` keys are batch-size *upper bounds* (PR #10860),
    draft-target support for it from PR #12262 (2026-03); it cannot be combined with ``max_concurrency``.
  * transformers 5.23.0: ``GenerationConfig`` (generation/configuration_utils.py), assisted generation.
  * llama.cpp ``llama-server`` (common/arg.cpp): builds since ~b9596 renamed the draft flags to
    ``--spec-draft-*``; older builds take ``--draft-max`` / ``--draft-min``.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineSchema:
    engine: str
    version: str  # the engine version the key list was taken from ("main-YYYY.MM": its main branch then)
    keys: frozenset[str]  # config keys (JSON/YAML engines) or command-line flags (CLI engines)
    source: str  # where the list was read


SCHEMAS: dict[str, dict[str, EngineSchema]] = {
    "vllm": {
        "0.25.0": EngineSchema("vllm", "0.25.0", frozenset({
            "method", "model", "num_speculative_tokens", "num_speculative_tokens_per_batch_size",
            "draft_tensor_parallel_size", "quantization", "max_model_len", "revision", "code_revision",
            "enforce_eager", "disable_padded_drafter_batch", "draft_sample_method", "rejection_sample_method",
            "prompt_lookup_max", "prompt_lookup_min", "kv_cache_dtype", "attention_backend",
        }), "vllm-project/vllm vllm/config/speculative.py (SpeculativeConfig)"),
        "0.6.4": EngineSchema("vllm", "0.6.4", frozenset({
            "speculative_model", "num_speculative_tokens", "speculative_disable_by_batch_size",
            "speculative_draft_tensor_parallel_size", "speculative_model_quantization",
            "speculative_max_model_len", "ngram_prompt_lookup_max", "ngram_prompt_lookup_min",
            "spec_decoding_acceptance_method", "disable_logprobs_during_spec_decoding",
        }), "vllm-project/vllm vllm/engine/arg_utils.py (EngineArgs, v0.6.4)"),
    },
    "sglang": {
        "main-2025.09": EngineSchema("sglang", "main-2025.09", frozenset({
            "--model-path", "--speculative-algorithm", "--speculative-draft-model-path",
            "--speculative-draft-model-revision", "--speculative-num-steps", "--speculative-eagle-topk",
            "--speculative-num-draft-tokens", "--speculative-accept-threshold-single",
            "--speculative-accept-threshold-acc", "--max-running-requests",
        }), "sgl-project/sglang python/sglang/srt/server_args.py (STANDALONE, PR #10090)"),
    },
    "trtllm": {
        "main-2026.03": EngineSchema("trtllm", "main-2026.03", frozenset({
            "speculative_config", "decoding_type", "max_draft_len", "speculative_model", "draft_len_schedule",
            "max_concurrency", "max_total_draft_tokens", "load_format", "acceptance_window",
            "acceptance_length_threshold", "use_rejection_sampling", "disable_overlap_scheduler",
        }), "NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py (DecodingBaseConfig, DraftTargetDecodingConfig)"),
    },
    "hf": {
        "5.23.0": EngineSchema("hf", "5.23.0", frozenset({
            "num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold",
            "do_sample", "temperature", "top_k", "top_p", "max_new_tokens", "transformers_version",
        }), "huggingface/transformers src/transformers/generation/configuration_utils.py (GenerationConfig)"),
    },
    "llamacpp": {
        "b9596": EngineSchema("llamacpp", "b9596", frozenset({
            "-m", "-md", "--spec-draft-n-max", "--spec-draft-n-min", "--spec-draft-p-min", "--temp", "--top-k",
            "--top-p", "-np",
        }), "ggml-org/llama.cpp common/arg.cpp (draft flags renamed to --spec-draft-*)"),
        "b4000": EngineSchema("llamacpp", "b4000", frozenset({
            "-m", "-md", "--draft-max", "--draft-min", "--draft-p-min", "--temp", "--top-k", "--top-p", "-np",
        }), "ggml-org/llama.cpp common/arg.cpp (--draft-max / --draft-min, before the --spec-draft-* rename)"),
    },
    "native": {
        "spectune.decode_config/1": EngineSchema("native", "spectune.decode_config/1", frozenset({
            "schema", "models", "method", "combine", "gamma", "temperature", "top_k", "top_p", "seed",
            "max_new_tokens", "batch_size", "dtype", "extra", "proposer", "policy",
        }), "spectune/config.py (DecodeConfig)"),
    },
}

DEFAULT_VERSION = {"vllm": "0.25.0", "sglang": "main-2025.09", "trtllm": "main-2026.03", "hf": "5.23.0", "llamacpp": "b9596",
                   "native": "spectune.decode_config/1"}
ENGINES = tuple(SCHEMAS)
