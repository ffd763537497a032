"""Hand-made traces (rounds, depths and a one-head heads table; no models): known acceptance counts, contexts and timings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from drifttool.trace.writer import TraceWriter


def write_trace(path: Path, drafters: dict[str, dict], depth: int, window: int = 4096,
                rope_scaling: dict | None = None, compact: bool = False, groups: dict[str, str] | None = None,
                mode: str = "generate") -> Path:
    """drafters: name -> {"accepted": [...], "context": [...], "prompt": [...] (optional), "self_mass": float or
    per-round list (optional), "sink_mass" / "rms_in": float or [rounds, depth] array (optional),
    "draft_s"/"verify_s" (optional per-round lists)}. One shard per prompt id, kept as shards unless `compact`
    (tests that damage a shard file need the shards). `groups` (prompt id -> group) writes a prompts table that
    records them."""
    k = depth
    frames: dict[str, list[pd.DataFrame]] = {}
    for name, spec in drafters.items():
        acc = np.asarray(spec["accepted"], dtype=np.int64)
        n = len(acc)
        ctx = np.asarray(spec.get("context", np.arange(100, 100 + n)), dtype=np.int64)
        prompt = np.asarray(spec.get("prompt", [f"p{i % 2}" for i in range(n)]))
        sm = np.broadcast_to(np.asarray(spec.get("self_mass", 0.2), float), (n,))
        rnd = np.zeros(n, dtype=np.int64)
        for p in np.unique(prompt):
            rnd[prompt == p] = np.arange((prompt == p).sum())
        pos_max = ctx - 2 + k
        rounds = pd.DataFrame({
            "drafter": name, "prompt_id": prompt, "round": rnd, "context_len": ctx, "depth": k, "accepted": acc,
            "bonus": 0, "beyond_window": pos_max >= window,
            "draft_s": spec.get("draft_s", np.full(n, np.nan)), "verify_s": spec.get("verify_s", np.full(n, np.nan)),
        })
        dep = np.arange(1, k + 1)
        rep = lambda a: np.repeat(a, k)  # noqa: E731
        pos = (ctx[:, None] - 2 + dep[None, :]).ravel()
        self_mass = np.where(np.tile(dep, n) >= 2, rep(sm), 0.0)
        sink = np.broadcast_to(np.asarray(spec.get("sink_mass", 0.5), float), (n, k)).ravel()
        rms = np.broadcast_to(np.asarray(spec.get("rms_in", dep.astype(float)), float), (n, k)).ravel()
        ent = np.broadcast_to(np.asarray(spec.get("entropy", 1.0), float), (n, k)).ravel()
        depths = pd.DataFrame({
            "drafter": name, "prompt_id": rep(prompt), "round": rep(rnd), "depth": np.tile(dep, n),
            "context_len": rep(ctx), "position": pos, "input_id": 0, "draft_id": 0, "target_id": 0,
            "match": (dep[None, :] <= acc[:, None]).ravel(), "reached": (dep[None, :] <= acc[:, None] + 1).ravel(),
            "accepted": (dep[None, :] <= acc[:, None]).ravel(), "sink_mass": sink, "draft_mass": self_mass / 2,
            "own_mass": self_mass / 2, "self_mass": self_mass, "prompt_mass": 1.0 - sink - self_mass, "entropy": ent,
            "rms_in": rms, "l2_in": 1.0, "rms_pre": 1.0, "l2_pre": 1.0, "rms_post": 1.0,
            "l2_post": 1.0, "massive": False, "beyond_window": pos >= window,
        })
        heads = depths[["drafter", "prompt_id", "round", "depth", "sink_mass", "draft_mass", "own_mass", "self_mass",
                        "prompt_mass", "entropy"]].assign(head=0, max_prob=0.5, top_pos=0)  # one head: the depth's
        if groups is not None:
            g = rounds.groupby("prompt_id")["accepted"].agg(["sum", "count"])
            frames.setdefault("prompts", []).append(pd.DataFrame({
                "drafter": name, "prompt_id": g.index, "tags": "", "group": [groups[x] for x in g.index],
                "prompt_len": 100, "n_generated": g["count"].to_numpy(), "n_rounds": g["count"].to_numpy(),
                "accepted_total": g["sum"].to_numpy(), "mean_acceptance_length": 1 + g["sum"] / g["count"],
                "wall_s": 0.0}))
        frames.setdefault("rounds", []).append(rounds)
        frames.setdefault("depths", []).append(depths)
        frames.setdefault("heads", []).append(heads)
    rounds, depths, heads = (pd.concat(frames[k]) for k in ("rounds", "depths", "heads"))
    manifest = {
        "drafters": [{"name": n, "max_position_embeddings": window, "rope_scaling": rope_scaling,
                      "config_hash": n, "overrides": {}} for n in drafters],
        "capture": {"depth": k, "mode": mode, "sink": {"first": 4}, "probes": {"sha256": "synthetic"}},
        "target": {"config_hash": "synthetic"},
    }
    w = TraceWriter(path, manifest)
    for p in sorted(rounds["prompt_id"].unique()):
        tabs = {"rounds": rounds[rounds.prompt_id == p], "depths": depths[depths.prompt_id == p],
                "heads": heads[heads.prompt_id == p]}
        if "prompts" in frames:
            pr = pd.concat(frames["prompts"])
            tabs["prompts"] = pr[pr.prompt_id == p]
        w.add(p, tabs)
    w.finish(compact=compact)
    return path
