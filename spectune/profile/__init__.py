"""Profiles: what calibration measured, as data -- a versioned directory of JSON metadata plus CSV tables.

Layout (``docs/profile-format.md`` documents every column)::

    <profile>/profile.json    schema, hardware, software, models (content hash, dtype), workloads, settings,
                              timestamps, per-stage durations, latency fit errors, table index (rows, sha256)
    <profile>/latency.csv     model, batch, ctx, k, median_s, mean_s, std_s, min_s, max_s, repeats, feasible, note
    <profile>/cost.csv        proposer, verifier, batch, ctx, c
    <profile>/traces.csv      one row per drafted token: workload, prompt, state, draft_id, proposer, models,
                              combination, pos, token, beta, alpha, beta_soft, alpha_soft
    <profile>/acceptance.csv  means of the traces per (workload, proposer, models, combination, pos)
    <profile>/sv_traces.csv   SV rows: workload, ..., draft, companion, target, pos, token, beta, beta_soft, s, a
    <profile>/sv_bins.csv     mean beta and count per (s bin, a bin) for every (draft, companion, target)
    <profile>/info_gain.csv   H(beta), H(beta|s), H(beta|a), H(beta|s,a) and the information gain

Modules: ``tables`` (the columns of every table, ``cost_table``, ``acceptance_summary``), ``latency_model``
(``LatencyModel``: L(model, b, k, ctx) fitted on numpy / pandas / scikit-learn), ``core`` (``Profile``, atomic
save, checked load), ``lookup`` (``find_profiles``: the one finder every profile lookup uses). Importing this
package, loading a profile and pricing from it need no torch: calibration writes profiles
(``spectune.calibration`` depends on this package, never the reverse); tuning and export read them.
"""
from spectune.profile.core import (META_FILE, REQUIRED_META, SCHEMA, Profile, ProfileHardwareWarning, load_profile,
                                   machine_mismatch, read_meta)
from spectune.profile.latency_model import LatencyModel
from spectune.profile.lookup import (BUNDLED_DIR, Lookup, candidate_dirs, find_profiles, model_fit, pick_runtime,
                                     profile_matches, profile_names, same_model, user_profiles_dir)
from spectune.profile.tables import (ACCEPTANCE_COLUMNS, BIN_COLUMNS, COST_COLUMNS, GAIN_COLUMNS, LATENCY_COLUMNS,
                                     MODELS_SEP, PATH_COLUMNS, PATH_DRAFT_COLUMNS, SV_COLUMNS, TABLES, TRACE_COLUMNS,
                                     acceptance_summary, cost_table)

__all__ = [
    "ACCEPTANCE_COLUMNS", "BIN_COLUMNS", "BUNDLED_DIR", "COST_COLUMNS", "GAIN_COLUMNS", "LATENCY_COLUMNS",
    "META_FILE", "MODELS_SEP", "PATH_COLUMNS", "PATH_DRAFT_COLUMNS", "REQUIRED_META", "SCHEMA", "SV_COLUMNS", "TABLES",
    "TRACE_COLUMNS", "LatencyModel", "Lookup", "Profile", "ProfileHardwareWarning", "acceptance_summary",
    "candidate_dirs", "cost_table",
    "find_profiles", "load_profile", "machine_mismatch", "model_fit", "pick_runtime", "profile_matches",
    "profile_names",
    "read_meta", "same_model", "user_profiles_dir",
]
