"""Tree traces: `capture --tree` writes rounds + tree_nodes + tree_heads (schema 2) that read back validated and agree
with each other; chain traces stay readable; bad --tree values fail with one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from drifttool.errors import DriftError
from drifttool.run.engines.hf import DrafterSpec, run_capture
from drifttool.trace.reader import read_trace
from drifttool.trace.schema import SCHEMA_VERSION
from tests.support.capture import build_models, cli, prompt, write_probes


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("tree")
    m = build_models(root)
    probes = write_probes(
        root / "probes.jsonl", [{"id": f"p{i}", "token_ids": prompt(i, 14 + 5 * i)} for i in range(3)]
    )
    return root, m, probes


@pytest.fixture(scope="module")
def tree_trace(env):
    """The module's dynamic-tree trace (e3 + e31, 3 prompts), captured once: the tables test checks it and the
    compare / figure / dashboard tests read it, whichever of them runs first and whether or not the others run."""
    root, m, probes = env
    return run_capture(
        str(m["target"]),
        [DrafterSpec.parse(f"e3={m['eagle3']}"), DrafterSpec.parse(f"e31={m['eagle31']}")],
        str(probes),
        str(root / "t.drift"),
        max_new_tokens=12,
        progress=False,
        tree="dynamic:top_k=3,depth=4,total=10",
    )


@pytest.fixture(scope="module")
def chain_trace(env):
    """The module's chain trace (e3, 1 prompt), captured once: a tree trace's counterpart in `compare`."""
    root, m, probes = env
    return run_capture(
        str(m["target"]),
        [DrafterSpec.parse(f"e3={m['eagle3']}")],
        str(probes),
        str(root / "c.drift"),
        depth=3,
        max_new_tokens=8,
        progress=False,
        limit=1,
    )


def test_tree_trace_tables(tree_trace):
    t = read_trace(tree_trace)
    assert t.manifest["schema_version"] == SCHEMA_VERSION >= 2 and t.is_tree  # 2: tree tables; 3: compact layout
    assert t.manifest["capture"]["tree"] == {"kind": "dynamic", "top_k": 3, "depth": 4, "total": 10}
    nodes, heads, rounds = t.tree_nodes, t.tree_heads, t.rounds
    assert len(t.depths) == 0 and len(rounds) > 0
    key = ["drafter", "prompt_id", "round"]
    per = nodes.groupby(key)
    assert (per.size() == 9).all()  # total - 1 nodes every round
    acc = nodes[nodes.accepted].groupby(key).size().reindex(rounds.set_index(key).index, fill_value=0)
    assert (acc.to_numpy() == rounds.accepted.to_numpy()).all()
    # accepted nodes form one path from depth 1 and every accepted node matched the target
    a = nodes[nodes.accepted]
    assert a.match.all()
    for _, g in a.groupby(key):
        assert sorted(g.depth) == list(range(1, len(g) + 1))
    total = nodes.sink_mass + nodes.draft_mass + nodes.own_mass + nodes.prompt_mass
    np.testing.assert_allclose(total, 1.0, atol=1e-5)
    np.testing.assert_allclose(nodes.self_mass, nodes.draft_mass + nodes.own_mass, atol=1e-6)
    assert (nodes[nodes.depth == 1].self_mass == 0).all()  # drafted by the root: no draft ancestors
    assert (nodes[nodes.depth > 1].own_mass > 0).all()
    # head means of tree_heads are the node rows
    hm = heads.groupby([*key, "node"])[["sink_mass", "self_mass", "entropy"]].mean()
    nm = nodes.set_index([*key, "node"])[["sink_mass", "self_mass", "entropy"]].loc[hm.index]
    np.testing.assert_allclose(hm.to_numpy(), nm.to_numpy(), atol=1e-5)
    assert nodes.main_path.any() and (~nodes.main_path).any()


def test_chain_trace_has_no_tree_tables(chain_trace):
    t = read_trace(chain_trace)
    assert not t.is_tree and len(t.depths) > 0
    with pytest.raises(DriftError, match="chain trace"):
        _ = t.tree_nodes


def test_cli_tree_capture_and_errors(env):
    root, m, probes = env
    r = cli(
        "capture",
        "--target",
        m["target"],
        "--drafter",
        m["eagle3"],
        "--probes",
        probes,
        "--out",
        root / "cli.drift",
        "--max-new-tokens",
        "6",
        "--limit",
        "1",
        "--quiet",
        "--tree",
        "[(0,), (1,), (0, 0)]",
    )
    assert r.returncode == 0, r.stderr
    t = read_trace(root / "cli.drift")
    assert t.manifest["capture"]["tree"]["paths"] == [[0], [1], [0, 0]] and len(t.tree_nodes) > 0
    r = cli(
        "capture",
        "--target",
        m["target"],
        "--drafter",
        m["eagle3"],
        "--probes",
        probes,
        "--out",
        root / "bad.drift",
        "--tree",
        "[(0,), (1, 1)]",
    )
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "--tree" in (r.stderr + r.stdout) and "lacks its parent" in (r.stderr + r.stdout)


def test_tree_compare_api_and_figures(tree_trace, chain_trace):
    import json

    import drifttool
    from drifttool.plots import tree_layout

    path = tree_trace
    tr = drifttool.load(path)
    tab = tr.tree_summary()
    nodes = tr.tree_nodes
    assert set(tab.branch) == {"main path", "side branches", "accepted path", "all nodes"}
    # the numbers are the node means: recompute one cell by hand
    sel = nodes[(nodes.drafter == "e3") & (nodes.depth == 2) & ~nodes.main_path]
    cell = tab[(tab.drafter == "e3") & (tab.depth == 2) & (tab.branch == "side branches")].iloc[0]
    # self_mass is stored float32: pandas' mean of a float32 column accumulates in an order that varies by version
    # (pandas 3.1 differs from a float64 sum by ~1e-9), so compare relatively at float32 resolution
    f32 = float(np.finfo(np.float32).eps)
    assert cell.nodes == len(sel)
    assert cell.self_mass == pytest.approx(sel.self_mass.to_numpy(np.float64).mean(), rel=4 * f32)
    assert cell.accepted == pytest.approx(sel.accepted.to_numpy(np.float64).mean(), rel=4 * f32)
    r0 = nodes.iloc[0]
    fig = tr.tree_figure(r0.drafter, r0.prompt_id, int(r0["round"]))
    g = nodes[
        (nodes.drafter == r0.drafter) & (nodes.prompt_id == r0.prompt_id) & (nodes["round"] == r0["round"])
    ]
    assert len(fig.data[-1].x) == len(g)  # one marker per node (plus the root trace)
    with pytest.raises(DriftError, match="no nodes"):
        tr.tree_figure("e3", "nope", 0)
    y = tree_layout({1: 0, 2: 0, 3: 1, 4: 1})
    assert y[3] == 0 and y[4] == 1 and y[2] == 2 and y[1] == 0.5 and y[0] == 1.25
    r = cli("compare", path, "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["tree_depths"]
    assert {x["branch"] for x in rows} >= {"main path", "side branches"}
    import os
    import subprocess
    import sys

    env = {**os.environ, "COLUMNS": "80", "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "drifttool.cli", "compare", str(path)], capture_output=True, text=True,
                       env=env, timeout=1800)
    assert r.returncode == 0 and "side branches" in r.stdout
    assert max(len(ln) for ln in r.stdout.splitlines()) <= 80, r.stdout  # the tree tables fit 80 columns
    r = cli("compare", path, chain_trace)
    assert r.returncode != 0 and "chain trace" in (r.stdout + r.stderr) and "Traceback" not in r.stderr


def test_dashboard_trees_page(tree_trace, monkeypatch):
    import sys
    from pathlib import Path

    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    path = tree_trace
    app = Path(__file__).resolve().parents[2] / "drifttool" / "dashboard" / "app.py"
    monkeypatch.setattr(sys, "argv", [str(app), str(path)])
    at = AppTest.from_file(str(app), default_timeout=1800)
    at.run()
    # the chain pages do not crash on a tree trace (the overview opens first)
    assert not at.exception, [e.message for e in at.exception]
    at.switch_page("app_pages/trees.py").run()
    assert not at.exception, [e.message for e in at.exception]
    charts = at.get("plotly_chart")
    assert len(charts) >= 2
    spec = json.loads(charts[1].proto.spec)
    names = {t.get("name", "") for t in spec["data"]}
    assert any("side branches" in n for n in names) and any("main path" in n for n in names)


def test_live_capture_tree(trained_pair):
    import drifttool as dt

    tabs = dt.capture_tree(
        trained_pair.target,
        trained_pair.drafter,
        trained_pair.prompts[0],
        "dynamic:top_k=2,depth=3,total=6",
        max_new_tokens=10,
        name="live",
    )
    nodes = tabs["tree_nodes"]
    assert set(tabs) == {"rounds", "prompts", "tree_nodes", "tree_heads"}
    assert (nodes.groupby("round").size() == 5).all() and (nodes.drafter == "live").all()
    assert (tabs["rounds"].accepted.to_numpy() == nodes.groupby("round").accepted.sum().to_numpy()).all()
    with pytest.raises(DriftError, match="--tree"):
        dt.capture_tree(trained_pair.target, trained_pair.drafter, trained_pair.prompts[0], "dynamic:top_k=0")


def test_tree_compare_follows_the_chain_identity_and_compatibility_rules(env, tmp_path):
    """Two tree traces named alike were pooled under one label, one folder given twice counted
    twice, different sink definitions compared side by side, --trained-window / --breakeven silently ignored."""
    import shutil

    from drifttool.analysis.tree_compare import tree_depth_table
    from drifttool.cli import main

    root, m, probes = env
    src = root / "pair.drift"
    run_capture(str(m["target"]), [DrafterSpec.parse(f"e3={m['eagle3']}")], str(probes), str(src), max_new_tokens=6,
                limit=2, progress=False, tree="[(0,), (1,), (0, 0)]")
    a, b = tmp_path / "a" / "x.drift", tmp_path / "b" / "x.drift"
    shutil.copytree(src, a)
    shutil.copytree(src, b)
    tab = tree_depth_table([read_trace(a), read_trace(b)])
    assert set(tab["trace"]) == {"a/x", "b/x"}  # one label per trace, not both pooled as "x"
    one = tree_depth_table([read_trace(a)])
    assert (tab[tab.trace == "a/x"]["nodes"].to_numpy() == one["nodes"].to_numpy()).all()
    with pytest.raises(DriftError, match="given twice"):
        tree_depth_table([read_trace(a), read_trace(a)])
    man = json.loads((b / "manifest.json").read_text())
    man["capture"]["sink"] = {"first_n": 2, "positions": [], "token_ids": []}
    (b / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(DriftError, match="sink"):
        tree_depth_table([read_trace(a), read_trace(b)])
    for flag in (["--trained-window", "64"], ["--breakeven", "1.5"]):
        assert main(["compare", str(a), *flag]) == 2


def test_tree_manifest_records_what_the_run_did(env):
    """A tree capture recorded full_every=5 / keep_rows=3 and the entropy-on-full-rounds note,
    while tree rounds are all computed in full and no rows/ are written."""
    root, m, probes = env
    out = run_capture(str(m["target"]), [DrafterSpec.parse(f"e3={m['eagle3']}")], str(probes), str(root / "rec.drift"),
                      max_new_tokens=6, limit=1, progress=False, tree="[(0,), (1,)]", keep_rows=3, full_every=5)
    cap = read_trace(out).manifest["capture"]
    assert cap["keep_rows"] == 0 and cap["full_every"] == 1 and "tree capture" in cap["full_every_note"]
    assert not (out / "rows").exists()


def test_tree_and_chain_share_one_query_position_rule(env):
    """Tree 'beyond the trained window' used n - 1 + d against the chain's query slot n - 2 + k."""
    from drifttool.trace.positions import query_position

    root, m, probes = env
    kw = {"max_new_tokens": 6, "limit": 2, "progress": False}
    tree = read_trace(run_capture(str(m["target"]), [DrafterSpec.parse(f"e3={m['eagle3']}?trained_window=16")],
                                  str(probes), str(root / "tw_tree.drift"), tree="[(0,), (0, 0), (1,)]", **kw))
    chain = read_trace(run_capture(str(m["target"]), [DrafterSpec.parse(f"e3={m['eagle3']}?trained_window=16")],
                                   str(probes), str(root / "tw_chain.drift"), depth=2, **kw))
    n = tree.tree_nodes
    assert (n["position"] == n["context_len"] - 2 + n["depth"]).all()
    assert (n["beyond_window"] == (n["position"] >= 16)).all() and n["beyond_window"].any() and (~n["beyond_window"]).any()
    r = tree.rounds
    deepest = r.merge(n.groupby(["prompt_id", "round"], observed=True)["depth"].max().rename("d").reset_index(),
                      on=["prompt_id", "round"])
    assert (deepest["beyond_window"] == (query_position(deepest["context_len"], deepest["d"]) >= 16)).all()
    d = chain.depths
    assert (d["position"] == query_position(d["context_len"], d["depth"])).all()


@pytest.mark.parametrize("text,why", [("dynamic:top_k=2,top_k=3,depth=2,total=4", "given twice"),
                                      ("dynamicfoo:top_k=2,depth=2,total=4", "kind 'dynamicfoo'"),
                                      ("dynamic", "no settings")])
def test_tree_spec_coercions_are_refused(text, why):
    """A repeated setting took the last value; 'dynamicfoo:' was read as dynamic."""
    from drifttool.run.tree import parse_tree

    with pytest.raises(DriftError, match=why):
        parse_tree(text)


def test_check_evaluates_per_depth_masses_on_tree_traces(env, capsys):
    """`check` said 'no data' for the per-depth masses of a tree trace it could evaluate."""
    from drifttool.cli import main

    root, m, probes = env
    out = run_capture(str(m["target"]), [DrafterSpec.parse(f"e3={m['eagle3']}")], str(probes),
                      str(root / "chk.drift"), max_new_tokens=6, limit=2, progress=False, tree="[(0,), (1,), (0, 0)]")
    assert main(["check", str(out), "--rule", "sink_mass@depth2>=0", "--rule", "acceptance_length>=1", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    n = read_trace(out).tree_nodes
    want = float(n[n.depth == 2]["sink_mass"].mean())
    assert rep["rules"][0]["value"] == pytest.approx(want) and rep["passed"]
    assert main(["check", str(out), "--rule", "n_alpha@depth2>=0"]) == 2
    assert "chain statistic" in capsys.readouterr().err


def test_dynamic_tree_node_bound_is_the_candidate_count():
    """`total=10^9` was refused as needing 10^9 positions; a k=2, depth=3 tree has 2 + 2*4 candidates."""
    from drifttool.run.tree import parse_tree

    assert parse_tree("dynamic:top_k=2,depth=3,total=1000000000").max_nodes == 10
    assert parse_tree("dynamic:top_k=4,depth=5,total=16").max_nodes == 15
