"""``spectune export``: a spectune config and its per-batch-size schedule for vLLM, SGLang, TensorRT-LLM,
transformers, llama.cpp, or spectune itself. See ``_core.py`` for the steps, ``_schema.py`` for the engine
schemas (and the versions they were taken from), ``docs/export.md`` for the formats."""
from spectune.artifacts._core import Export, export
from spectune.artifacts._names import local_model_paths, parse_overrides
from spectune.artifacts._out import check_out, write_out
from spectune.artifacts._plan import ServePlan, for_engine, load_schedule, plan_for
from spectune.artifacts._render import ranges
from spectune.artifacts._schema import DEFAULT_VERSION, ENGINES, SCHEMAS, EngineSchema

__all__ = ["DEFAULT_VERSION", "ENGINES", "SCHEMAS", "EngineSchema", "Export", "ServePlan", "check_out", "export",
           "for_engine", "load_schedule", "local_model_paths", "parse_overrides", "plan_for", "ranges", "write_out"]
