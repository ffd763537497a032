"""Trace schema: table names and their required columns. Bump SCHEMA_VERSION on any breaking change.

Version 3 (compact traces): derived columns (`self_mass`, `prompt_mass`) are no longer stored but computed on read;
keys are dictionary-encoded; a per-prompt `head_summary` table is written with every shard; a finished trace's
shards are merged into one file per table (`TABLE/merged-GGG.parquet`, one row group per shard). Version-1 and -2
traces are read as before and migrated on read (derived columns kept, head summary computed from `heads`)."""

from __future__ import annotations

from . import metric_table as _mt

SCHEMA_VERSION = 3  # 2: draft-tree tables (TREE_TABLES); 3: compact layout (see above)

KEY = ["drafter", "prompt_id", "round"]

# The per-head attention quantities come from the metric table (trace/metric_table.py, one declaration each): the
# capture measures MEASURED_MASSES and the entropy; the derived masses are functions of them, computed on read.
# recent_mass (the last R context slots, sinks excluded; R = manifest capture.recent) and template_mass (the chat
# template's special tokens, sinks excluded; ids = manifest capture.template_ids) are parts of prompt_mass and may
# share keys.
MEASURED_MASSES = _mt.measured_masses()
DERIVED_MASSES = _mt.derived()
MASSES = (*MEASURED_MASSES, *DERIVED_MASSES)
HEAD_METRICS = (*MASSES, *(m.name for m in _mt.of_kind("row")))

# Every mass against its uniform share. Per round x depth the capture records the keys the query saw (after the
# sliding window) and how many of them each mass's key set holds; uniform attention over the seen keys would put
# count / n_keys on the set, and lift = mass / (count / n_keys): 1.0 = no more than uniform. A lift is NaN where
# its set is empty (self at depth 1, a trace without the counts). entropy_norm = entropy / log(n_keys).
KEY_COUNTS = _mt.key_counts()
LIFTS = _mt.lifts()
MAGNITUDES = ("rms_in", "l2_in", "rms_pre", "l2_pre", "rms_post", "l2_post")  # per depth: the drafter's hidden
# string columns stored dictionary-encoded (read as pandas categoricals): few distinct values, many rows
DICT_COLUMNS = ("drafter", "prompt_id", "tags")

# The columns every reader sees (TABLES) include the derived ones; the writer stores the rest (STORED).
TABLES: dict[str, list[str]] = {
    # one row per prompt x drafter
    "prompts": ["drafter", "prompt_id", "tags", "prompt_len", "n_generated", "n_rounds", "accepted_total",
                "mean_acceptance_length", "wall_s"],
    # one row per round (a drafted chain + its verification)
    "rounds": [*KEY, "context_len", "depth", "accepted", "bonus", "beyond_window"],
    # one row per round x depth: head-mean attention masses + hidden magnitudes + acceptance
    "depths": [*KEY, "depth", "context_len", "position", "input_id", "draft_id", "target_id", "match", "reached",
               "accepted", *HEAD_METRICS, *MAGNITUDES, "massive", "beyond_window", *KEY_COUNTS, *LIFTS,
               "entropy_norm"],
    # one row per round x depth x head
    "heads": [*KEY, "depth", "head", *HEAD_METRICS],
    # one row per round x aux chunk: the depth-1 slot's captured target feature before/after fc_norm
    "aux": [*KEY, "chunk", "layer_id", "rms_before", "rms_after", "massive"],
}

# Pure functions of stored columns: computed on read (float32, like the capture's own arithmetic); a trace that
# stores them (schema 1) keeps its stored values.
DERIVED: dict[str, dict[str, tuple[str, ...]]] = {
    "depths": {**DERIVED_MASSES, **{k: (m, c, "n_keys") for k, (m, c) in LIFTS.items()},
               "entropy_norm": ("entropy", "n_keys")},
    "heads": DERIVED_MASSES,
}
# Columns added after schema 3 was first written: a trace without them reads them as NaN (key counts: derived from
# the manifest's sink rule where it allows, see trace/key_counts.py), so every older trace stays readable.
_ADDED = _mt.added()
ADDED: dict[str, tuple[str, ...]] = {"depths": (*_ADDED, *KEY_COUNTS), "heads": _ADDED, "tree_nodes": _ADDED,
                                     "tree_heads": _ADDED, "head_summary": tuple(f"{m}_sum" for m in _ADDED)}
STORED: dict[str, list[str]] = {t: [c for c in cols if c not in DERIVED.get(t, {})] for t, cols in TABLES.items()}

# Optional columns (absent from traces written before they were added; readers must cope):
# rounds.draft_s / rounds.verify_s = per-round wall time of the drafter (refresh + K steps) and of the target's
# verify forward (NaN when teacher-forced), from time.perf_counter in loop.speculate.
# depths.attn_window_start = the first slot the query could attend (> 0 only under a drafter sliding window; the
# masses are over the visible slots, so sink positions before it count as zero mass).
# heads.max_prob / heads.top_pos = the head's largest attention weight and the key slot holding it (slot t pairs
# token t+1 with position t; slots >= the round's context_len are this chain's draft slots).
# rounds.full_stats = entropy / max_prob / top_pos were computed from the full attention row that round (capture
# setting full_every); on other rounds they are NaN / NaN / -1 and the masses come from the kernel's log-sum-exp.
# prompts.group = the probe's source document (its `group` field, else its line id): the statistical unit.
# prompts.max_new_tokens = the generation budget that applied to the prompt (CLI flag, else probe field, else 32).
# prompts.prefill_s = seconds of the target's work on the prompt that its drafters shared (the prompt forward, or the
# teacher-forced pass): in no drafter's wall_s; the same value on each of the prompt's rows (count it once per
# prompt); 0 when each drafter ran its own prompt forward, inside its wall_s.
OPTIONAL: dict[str, list[str]] = {"prompts": ["group", "max_new_tokens", "prefill_s"],
                                  "rounds": ["draft_s", "verify_s", "full_stats"], "depths": ["attn_window_start"],
                                  "heads": ["max_prob", "top_pos"]}

# Per (drafter, prompt, depth, head): sums over the prompt's rounds, so the dashboard's head pages never read the
# per-round heads table. entropy_n counts the finite entropies summed (entropy may be NaN on unsampled rounds);
# max_n counts the rounds with a recorded maximum (0 in traces without heads.max_prob/top_pos), and pos0..other
# count those maxima by the kind of key slot holding them (analysis.where_attention defines the kinds).
HEAD_SUMMARY = ["drafter", "prompt_id", "depth", "head", "n", *(f"{m}_sum" for m in MEASURED_MASSES),
                "entropy_sum", "entropy_n", "max_prob_sum", "max_n", "pos0", "early", "recent", "self", "other"]
SUMMARIES: dict[str, list[str]] = {"head_summary": HEAD_SUMMARY}

# Optional: sampled attention rows, one safetensors file per shard plus this index table. Optional column
# rows_index.sink_slots = the context slots the capture counted as sinks in that round (SinkSpec.index), so the
# drill-down marks exactly those (the slot tokens alone lack position 0's token).
ROWS_INDEX = [*KEY, "context_len", "tensor", "slot_tokens"]

# Draft-tree captures (`capture --tree`, manifest capture.tree) write these besides the tables above (whose
# per-depth tables stay empty: a tree has no single chain). A node's statistics are those of the drafter query
# that drafted it (its parent's row), as a chain's depth-j row is the query that drafted depth j; the draft / own
# masses are the mass on its earlier ancestors / on its parent's slot, the self mass their sum (see docs/trees.md).
TREE_TABLES: dict[str, list[str]] = {
    # one row per round x tree node (the root excluded)
    "tree_nodes": [*KEY, "node", "parent", "depth", "rank", "draft_id", "target_id", "match", "main_path", "accepted",
                   "fed", "logp", "score", "context_len", "position", *HEAD_METRICS, *MAGNITUDES, "massive",
                   "beyond_window"],
    # one row per round x tree node x head
    "tree_heads": [*KEY, "node", "depth", "head", *HEAD_METRICS, "max_prob", "top_pos"],
}


def required(table: str, columns: list[str] | None = None) -> list[str]:
    """The stored columns a file of `table` must hold (of `columns`, default all): the added ones are not
    required (an older trace reads them as NaN, trace/key_counts.py)."""
    cols = columns or STORED.get(table) or TREE_TABLES.get(table) or SUMMARIES.get(table) or ROWS_INDEX
    return [c for c in cols if c not in ADDED.get(table, ())]
