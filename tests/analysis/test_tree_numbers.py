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


def naive_group_bootstrap(sub: pd.DataFrame, m: str, by: str = "prompt_id") -> tuple[float, float]:
    """95% percentile CI of the node mean with whole groups resampled (1,000 seeded multinomial draws); NaN
    below 6 groups."""
    keys = sorted(set(sub[by]))
    k = len(keys)
    if k < 6:
        return np.nan, np.nan
    x = [sub[sub[by] == key][m].to_numpy(np.float64) for key in keys]
    sums = np.array([np.nansum(v) for v in x])
    counts = np.array([np.isfinite(v).sum() for v in x], float)
    w = np.random.default_rng(0).multinomial(k, np.full(k, 1 / k), size=10_000)
    stats = (w @ sums) / (w @ counts)
    return tuple(np.nanpercentile(stats, [2.5, 97.5]))


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
            # each prompt is its own group here (probes without a group field)
            lo, hi = naive_group_bootstrap(sub, m)
            np.testing.assert_allclose(
                [row[f"{m}_lo"], row[f"{m}_hi"]], [lo, hi], rtol=1e-6, equal_nan=True,
                err_msg=f"{drafter} {branch} {depth} {m} CI",
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
    # the accepted path at the deepest depth misses some prompts: the groups are those it has
    deep = tab[(tab.branch == "accepted path") & (tab.depth == tab.depth.max())]
    assert (deep.prompts < n.prompt_id.nunique()).any()


SAMPLE_TREE = Path(__file__).resolve().parents[2] / "sample_traces" / "trees" / "smollm2-quick-tree.drift"


def test_tree_intervals_are_the_chain_group_bootstrap_and_absent_below_six_groups():
    """The tree table gave '0.444 ± 0.490' from 2 groups (1.96 SD / sqrt(k) of unweighted group means around the
    node mean): no interval below 6 groups, and above it the chain's group bootstrap of the node mean itself."""
    from rich.console import Console

    from drifttool.analysis.tree_compare import render_tree_table

    tr = read_trace(SAMPLE_TREE)
    tab = tree_depth_table([tr])
    row = tab[(tab.drafter == "eagle3") & (tab.branch == "main path") & (tab.depth == 4)].iloc[0]
    nodes = tr.tree_nodes
    sel = nodes[(nodes.drafter.astype(str) == "eagle3") & (nodes.depth == 4) & nodes.main_path.astype(bool)]
    assert row.groups < 6 and row.accepted == pytest.approx(sel.accepted.astype(float).mean())  # recomputed
    assert np.isnan(row.accepted_lo) and np.isnan(row.accepted_hi)
    assert tab.groups.max() < 6 and tab[[f"{m}_{e}" for m in METRICS for e in ("lo", "hi")]].isna().all().all()
    console = Console(width=80, record=True)
    render_tree_table(console, tab)
    out = console.export_text()
    assert f"{len(sel)} / {row.groups}" in out and "too few for an interval" in out and "±" not in out
    # one group per prompt x round: enough groups for an interval, over the same node means
    n = tr.tree_nodes.assign(prompt_id=lambda d: d.prompt_id.astype(str) + "#" + d["round"].astype(str))
    tr.__dict__.update(tree_nodes=n, groups={})
    split = tree_depth_table([tr])
    # the same node means, summed per group in another grouping: the masses are stored float32, so equal to their
    # resolution (4 ulp), not to 1e-7 (a node mean of 0.0812 differed by 1.5e-7 relative)
    np.testing.assert_allclose(split[list(METRICS)], tab[list(METRICS)], rtol=4 * float(np.finfo(np.float32).eps))
    n = n.assign(accepted=n.accepted.astype(float))
    wide = split[split.groups >= 6]
    assert len(wide) > 20
    for _, r in wide.iterrows():
        sel = n[(n.drafter == r.drafter) & (n.depth == r.depth)]
        sel = sel[{"main path": sel.main_path, "side branches": ~sel.main_path, "accepted path": sel.accepted > 0,
                   "all nodes": np.ones(len(sel), bool)}[r.branch]]
        for m in ("sink_mass", "accepted"):
            lo, hi = naive_group_bootstrap(sel, m)
            assert [r[f"{m}_lo"], r[f"{m}_hi"]] == pytest.approx([lo, hi]) and lo <= r[m] <= hi
