"""Per-node tree capture: equals the drafter's own eager attention under the tree mask for every node and head, and
a top-1 tree's rows equal the chain capture's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import drifttool
from drifttool.run.hooks import Capture
from drifttool.run.tree import parse_tree
from drifttool.run.tree_capture import TreeCapture
from drifttool.run.tree_loop import speculate_tree
from drifttool.trace.sinks import SinkSpec


@pytest.mark.parametrize(
    "spec", ["dynamic:top_k=3,depth=4,total=12", "[(0,), (1,), (0, 0), (1, 0), (1, 1), (0, 0, 0)]"]
)
def test_tree_rows_equal_eager_attention(trained_pair, spec):
    t, d = trained_pair.target, trained_pair.drafter
    attn = d.layer.self_attn
    probs: list[torch.Tensor] = []
    h = attn.hook_probs.register_forward_hook(lambda _m, _i, out: probs.append(out[0].detach().clone()))
    d.set_attn_impl("eager")
    sink = SinkSpec.parse("pos:0,2;tok:5")
    checked = 0
    try:
        with TreeCapture(d, sink=sink) as cap:
            per_round: list[list[torch.Tensor]] = []

            class Split:  # the eager probabilities of each round's drafter calls
                def begin_round(self, *a):
                    probs.clear()

                def end_round(self, drafter, cache, rec):
                    per_round.append(list(probs))

            res = speculate_tree(
                t, d, trained_pair.prompts[1], parse_tree(spec), max_new_tokens=20, observers=[Split(), cap]
            )
    finally:
        h.remove()
        d.set_attn_impl("sdpa")
    for rec, rc, calls in zip(res.rounds, cap.rounds, per_round):
        tree, n = rec.tree, rec.context_len
        length = max(c.shape[-1] for c in calls)
        rows = [calls[0][:, -1]] + [
            c[:, j] for c in calls[1:] for j in range(c.shape[1])
        ]  # [nh, L_call] each
        rows = [torch.nn.functional.pad(r, (0, length - r.shape[-1])) for r in rows]
        seq = res.prompt_ids + res.output_ids
        sinks = sink.positions_in(seq[:n])
        for r, u in enumerate(rc.rows):
            slot_row = 0 if u == 0 else 1 + tree.slot[u] - n
            p = rows[slot_row].double()  # [nh, L]
            anc, a = [], tree.parents[u] if u else -1
            while a > 0:
                anc.append(tree.slot[a])
                a = tree.parents[a]
            want = torch.stack(
                [
                    p[:, sinks].sum(-1),
                    p[:, anc].sum(-1) if anc else torch.zeros(p.shape[0], dtype=p.dtype),
                    p[:, tree.slot[u]] if u else torch.zeros(p.shape[0], dtype=p.dtype),
                    -(p * p.clamp_min(1e-300).log()).sum(-1),
                    p.max(-1).values,
                ],
                -1,
            ).numpy()
            got = np.stack([rc.field(f)[r] for f in ("sink_mass", "draft_mass", "own_mass", "entropy", "max_prob")], -1)
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
            assert (rc.field("top_pos")[r] == p.argmax(-1).numpy()).all()
            total = rc.field("sink_mass")[r] + rc.field("draft_mass")[r] + rc.field("own_mass")[r]
            assert (total <= 1 + 1e-5).all()
            checked += 1
    assert checked > 2 * len(res.rounds)
    # side branches really were rows (a node with rank > 0 that was fed)
    assert any(rec.tree.ranks[u] > 0 for rec in res.rounds for u in rec.tree.fed)


@pytest.mark.parametrize("k", [1, 4])
def test_top1_tree_capture_equals_chain_capture(trained_pair, k):
    t, d = trained_pair.target, trained_pair.drafter
    prompt = trained_pair.prompts[2]
    with Capture(d) as cc:
        chain = drifttool.speculate(t, d, prompt, depth=k, max_new_tokens=20, observers=[cc])
    with TreeCapture(d) as tc:
        speculate_tree(
            t,
            d,
            prompt,
            parse_tree(f"dynamic:top_k=1,depth={k},total={k + 1}"),
            max_new_tokens=20,
            observers=[tc],
        )
    assert len(cc.rounds) == len(tc.rounds) == len(chain.rounds)
    for a, b in zip(cc.rounds, tc.rounds):
        assert b.rows == list(range(k))  # root + nodes 1..k-1 fed: the producers of depths 1..k
        for f in ("sink_mass", "draft_mass", "own_mass", "entropy", "max_prob", "recent_mass", "template_mass",
                  "matched_mass"):  # matched: a node's recency control from the root, as a chain's from depth 1
            np.testing.assert_allclose(b.field(f), a.field(f), atol=1e-5, rtol=0, err_msg=f, equal_nan=True)
        assert (b.field("top_pos") == a.field("top_pos")).all()
        np.testing.assert_allclose(b.hidden, a.hidden, rtol=1e-6, atol=1e-6)


def test_a_wide_trees_matched_control_is_the_roots_mass_on_its_last_keys(trained_pair):
    """In a tree of width 2, every query row at chain depth d (the root 1, a fed node one deeper than the node)
    gets the root query's mass on its d - 1 most recent non-sink context keys (the recency null of the d - 1 own
    slots on that node's path), equal to the root's eager attention row (fp32, two attention codes: 1e-5)."""
    from drifttool.run import attention_stats as stats
    from drifttool.trace.key_sets import matched_index

    t, d = trained_pair.target, trained_pair.drafter

    class RootRows:  # each round's first attention call is the refresh: its last row is the root query's
        rows: list = []
        want = False

        def begin_round(self, *_a):
            self.want = True

        def end_round(self, *_a):
            pass

    roots = RootRows()

    def grab(_m, _i, out):
        if roots.want:
            roots.rows.append(out[0][:, -1, :].detach().double())
            roots.want = False

    d.set_attn_impl("eager")
    h = d.layer.self_attn.hook_probs.register_forward_hook(grab)
    try:
        with TreeCapture(d, sink=SinkSpec.parse("first:1")) as tc:
            res = speculate_tree(t, d, trained_pair.prompts[1], parse_tree("dynamic:top_k=2,depth=3,total=6"),
                                 max_new_tokens=12, observers=[roots, tc])
    finally:
        h.remove()
        d.set_attn_impl("sdpa")
    checked = 0
    for rec, cap, root in zip(res.rounds, tc.rounds, roots.rows):
        n = rec.context_len
        dep = [rec.tree.depths[u] + 1 for u in cap.rows]
        m = stats.field(cap.heads, "matched_mass")  # [R, nh]
        assert np.isnan(m[0]).all()  # the root: no own slot, no control
        for r, dd in enumerate(dep):
            if dd < 2:
                continue
            keys = matched_index(n, dd - 1, np.array([0]))
            np.testing.assert_allclose(m[r], root[:, keys].sum(-1).numpy(), atol=1e-5, rtol=0)
            checked += 1
    assert checked > len(res.rounds)  # more than one node row per round: a real tree
