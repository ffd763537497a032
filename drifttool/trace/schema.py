"""Trace schema: table names and their required columns. Bump SCHEMA_VERSION on any breaking change."""

from __future__ import annotations

SCHEMA_VERSION = 2  # 2: draft-tree tables (TREE_TABLES); version-1 traces (chains) read unchanged

KEY = ["drafter", "prompt_id", "round"]

TABLES: dict[str, list[str]] = {
    # one row per prompt x drafter
    "prompts": ["drafter", "prompt_id", "tags", "prompt_len", "n_generated", "n_rounds", "accepted_total",
                "mean_acceptance_length", "wall_s"],
    # one row per round (a drafted chain + its verification)
    "rounds": [*KEY, "context_len", "depth", "accepted", "bonus", "beyond_window"],
    # one row per round x depth: head-mean attention masses + hidden magnitudes + acceptance
    "depths": [*KEY, "depth", "context_len", "position", "input_id", "draft_id", "target_id", "match", "reached",
               "accepted", "sink_mass", "draft_mass", "own_mass", "self_mass", "prompt_mass", "entropy",
               "rms_in", "l2_in", "rms_pre", "l2_pre", "rms_post", "l2_post", "massive", "beyond_window"],
    # one row per round x depth x head
    "heads": [*KEY, "depth", "head", "sink_mass", "draft_mass", "own_mass", "self_mass", "prompt_mass", "entropy"],
    # one row per round x aux chunk: the depth-1 slot's captured target feature before/after fc_norm
    "aux": [*KEY, "chunk", "layer_id", "rms_before", "rms_after", "massive"],
}

# Optional columns (absent from traces written before they were added; readers must cope):
# rounds.draft_s / rounds.verify_s = per-round wall time of the drafter (refresh + K steps) and of the target's
# verify forward (NaN when teacher-forced), from time.perf_counter in loop.speculate.
# depths.attn_window_start = the first slot the query could attend (> 0 only under a drafter sliding window; the
# masses are over the visible slots, so sink positions before it count as zero mass).
# heads.max_prob / heads.top_pos = the head's largest attention weight and the key slot holding it (slot t pairs
# token t+1 with position t; slots >= the round's context_len are this chain's draft slots).
# rounds.full_stats = entropy / max_prob / top_pos were computed from the full attention row that round (capture
# setting full_every); on other rounds they are NaN / NaN / -1 and the masses come from the kernel's log-sum-exp.
OPTIONAL: dict[str, list[str]] = {"rounds": ["draft_s", "verify_s", "full_stats"], "depths": ["attn_window_start"],
                                  "heads": ["max_prob", "top_pos"]}

# Optional: sampled attention rows, one safetensors file per shard plus this index table. Optional column
# rows_index.sink_slots = the context slots the capture counted as sinks in that round (SinkSpec.index), so the
# drill-down marks exactly those (the slot tokens alone lack position 0's token).
ROWS_INDEX = [*KEY, "context_len", "tensor", "slot_tokens"]

# Draft-tree captures (`capture --tree`, manifest capture.tree) write these besides the tables above (whose
# per-depth tables stay empty: a tree has no single chain). A node's statistics are those of the drafter query
# that drafted it (its parent's row), as a chain's depth-j row is the query that drafted depth j; draft_mass /
# own_mass are the mass on its earlier ancestors / on its parent's slot, self_mass their sum (see docs/trees.md).
TREE_TABLES: dict[str, list[str]] = {
    # one row per round x tree node (the root excluded)
    "tree_nodes": [*KEY, "node", "parent", "depth", "rank", "draft_id", "target_id", "match", "main_path", "accepted",
                   "fed", "logp", "score", "context_len", "position", "sink_mass", "draft_mass", "own_mass",
                   "self_mass", "prompt_mass", "entropy", "rms_in", "l2_in", "rms_pre", "l2_pre", "rms_post",
                   "l2_post", "massive", "beyond_window"],
    # one row per round x tree node x head
    "tree_heads": [*KEY, "node", "depth", "head", "sink_mass", "draft_mass", "own_mass", "self_mass", "prompt_mass",
                   "entropy", "max_prob", "top_pos"],
}
