"""The tree compare table (analysis.tree_compare.tree_depth_table: per depth by branch) recomputed from the raw
`tree_nodes` Parquet of a real captured tree trace by a naive path (plain pandas/numpy, no drifttool.analysis)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from drifttool.analysis.tree_compare import tree_depth_table
from drifttool.run.engines.hf import DrafterSpec, run_capture
from drifttool.trace.reader import read_trace
from tests.support.capture import write_probes

METRICS = ("self_mass", "sink_mass", "prompt_mass", "entropy", "accepted")


@pytest.fixture(scope="module")
def tree_trace(trained_pair, trained_pair31, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tree_numbers")
    probes = write_probes(
        root / "probes.jsonl", [{"id": f"p{i}", "token_ids": p} for i, p in enumerate(trained_pair.prompts)]
    )
    drafters = [
        DrafterSpec.parse(f"e3={trained_pair.checkpoint}"),
        DrafterSpec.parse(f"e31={trained_pair31.checkpoint}"),
    ]
    return Path(
        run_capture(
            trained_pair.target,
            drafters,
            str(probes),
            str(root / "t.drift"),
            max_new_tokens=16,
            progress=False,
            tree="dynamic:top_k=3,depth=4,total=10",
            full_every=4,
        )
    )


def main_path(nodes: pd.DataFrame) -> np.ndarray:
    """Rank 0 at every step from the root (node 0): recomputed from parent and rank."""
    out = np.zeros(len(nodes), bool)
    for _, g in nodes.groupby(["drafter", "prompt_id", "round"]):
        on = {0}
        for i, r in g.sort_values("depth").iterrows():
            if r["rank"] == 0 and r.parent in on:
                on.add(r.node)
                out[nodes.index.get_loc(i)] = True
    return out


def test_tree_depth_table_by_branch(tree_trace):
    n = pd.read_parquet(tree_trace / "tree_nodes")
    n[["drafter", "prompt_id"]] = n[["drafter", "prompt_id"]].astype(str)
    n = n.reset_index(drop=True)
    assert (main_path(n) == n.main_path.to_numpy()).all()
    n = n.assign(accepted=n.accepted.astype(float))
    tab = tree_depth_table([read_trace(tree_trace)])
    branches = {
        "main path": n.main_path,
        "side branches": ~n.main_path,
        "accepted path": n.accepted > 0,
        "all nodes": np.ones(len(n), bool),
    }
    checked = 0
    for (drafter, branch, depth), got in tab.groupby(["drafter", "branch", "depth"]):
        (row,) = got.to_dict("records")
        sub = n[branches[branch] & (n.drafter == drafter) & (n.depth == depth)]
        assert row["nodes"] == len(sub) and row["prompts"] == sub.prompt_id.nunique()
        for m in METRICS:
            x = sub[m].to_numpy(np.float64)
            np.testing.assert_allclose(
                row[m], np.nanmean(x), rtol=1e-6, err_msg=f"{drafter} {branch} {depth} {m}"
            )
            means = np.array(
                [
                    np.nanmean(sub[sub.prompt_id == p][m].to_numpy(np.float64))
                    for p in sorted(set(sub.prompt_id))
                ]
            )
            ci = 1.96 * np.std(means, ddof=1) / np.sqrt(len(means)) if len(means) > 1 else np.nan
            np.testing.assert_allclose(
                row[f"{m}_ci"], ci, rtol=1e-6, equal_nan=True, err_msg=f"{drafter} {branch} {depth} {m}_ci"
            )
        checked += 1
    # every (drafter, branch, depth) with nodes has its row, and no other
    want = {
        (d, b, k)
        for b, sel in branches.items()
        for d, k in n[sel][["drafter", "depth"]].drop_duplicates().itertuples(index=False)
    }
    assert checked == len(want) == len(set(zip(tab.drafter, tab.branch, tab.depth))) and want == set(
        zip(tab.drafter, tab.branch, tab.depth)
    )
    # the accepted path at the deepest depth misses some prompts: the interval is over the prompts it has
    deep = tab[(tab.branch == "accepted path") & (tab.depth == tab.depth.max())]
    assert (deep.prompts < n.prompt_id.nunique()).any()
