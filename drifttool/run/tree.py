"""Draft trees: the tree spec (vLLM's static `speculative_token_tree` paths or EAGLE's dynamic top-k tree), tree
drafting with the ancestor mask, and tree verification (greedy longest path; EAGLE's multi-candidate sampling).

Nodes are numbered 0..N: node 0 is the root (the newest committed token x_n, whose drafter query is the
refresh's last slot n-1); a node at depth d sits at position n-1+d in the drafter and n+d in the target, as a chain
draft of depth d does. Parents precede children, and a parent's children come in its drafter top-k order.
The rules follow SafeAILab EAGLE `cnets.py` (`topK_genrate`) and `utils.py` (`evaluate_posterior`); docs/trees.md
cites them line by line."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import torch

from ..errors import DriftError
from ..model.drafter import DraftStep, Eagle3Drafter, KVCache
from ..trace.positions import query_position

KINDS = ("static", "dynamic")


@dataclass(frozen=True)
class TreeSpec:
    """static: `paths` of child ranks from the root, e.g. ((0,), (1,), (0, 0)) (vLLM's speculative_token_tree).
    dynamic: EAGLE-3's tree; `top_k` children per expanded node, `depth` draft levels (SGLang's
    speculative_num_steps; SafeAILab's `depth` is one less), `total` tokens including the root (SafeAILab's
    total_token, SGLang's speculative_num_draft_tokens), so total - 1 draft nodes."""

    kind: str
    paths: tuple[tuple[int, ...], ...] = ()
    top_k: int = 1
    depth: int = 1
    total: int = 2

    @property
    def max_depth(self) -> int:
        return max(len(p) for p in self.paths) if self.kind == "static" else self.depth

    @property
    def max_nodes(self) -> int:
        """Upper bound on the draft nodes of one round (the positions a round can reach)."""
        if self.kind == "static":
            return len(self.paths)
        # EAGLE's dynamic tree keeps the best total - 1 of its k + (depth - 1) k^2 candidates (_dynamic_tree)
        return min(self.total - 1, self.top_k + (self.depth - 1) * self.top_k**2)

    def to_dict(self) -> dict:
        if self.kind == "static":
            return {"kind": "static", "paths": [list(p) for p in self.paths]}
        return {"kind": "dynamic", "top_k": self.top_k, "depth": self.depth, "total": self.total}

    def describe(self) -> str:
        if self.kind == "static":
            return repr([tuple(p) for p in self.paths])
        return f"dynamic:top_k={self.top_k},depth={self.depth},total={self.total}"

    @classmethod
    def chain(cls, depth: int) -> TreeSpec:
        """The chain of `depth` drafts as a static tree."""
        return cls("static", tuple((0,) * d for d in range(1, depth + 1)))

    @classmethod
    def from_dict(cls, d: dict) -> TreeSpec:
        if d.get("kind") == "static":
            return _static([tuple(p) for p in d.get("paths", [])], "tree")
        return _dynamic(d.get("top_k"), d.get("depth"), d.get("total"), "tree")


def parse_tree(text: str) -> TreeSpec:
    """'dynamic:top_k=4,depth=5,total=16' or a Python literal list of rank paths '[(0,), (1,), (0, 0)]'."""
    s = str(text).strip()
    where = f"--tree {text!r}"
    if s.startswith("dynamic"):
        head, colon, rest = s.partition(":")
        if head.strip() != "dynamic" or not colon:
            got = f"kind {head.strip()!r}" if head.strip() != "dynamic" else "no settings"
            raise DriftError(f"{where}: expected 'dynamic:top_k=K,depth=D,total=N' (got {got})")
        kv = {}
        for part in filter(None, rest.split(",")):
            k, eq, v = part.partition("=")
            try:
                val = int(v)
            except ValueError:
                raise DriftError(f"{where}: {part!r} must look like name=integer") from None
            if not eq:
                raise DriftError(f"{where}: {part!r} must look like name=integer")
            if k.strip() in kv:
                raise DriftError(f"{where}: {k.strip()!r} is given twice; give each setting once")
            kv[k.strip()] = val
        unknown = sorted(set(kv) - {"top_k", "depth", "total"})
        if unknown:
            raise DriftError(f"{where}: unknown setting {unknown[0]!r}; expected top_k, depth, total")
        return _dynamic(kv.get("top_k"), kv.get("depth"), kv.get("total"), where)
    try:
        paths = ast.literal_eval(s)
    except (ValueError, SyntaxError):
        raise DriftError(
            f"{where}: expected 'dynamic:top_k=K,depth=D,total=N' or a list of rank paths such as "
            "'[(0,), (1,), (0, 0)]'"
        ) from None
    if not isinstance(paths, (list, tuple)) or not all(isinstance(p, (list, tuple)) for p in paths):
        raise DriftError(f"{where}: expected a list of rank paths such as '[(0,), (1,), (0, 0)]'")
    return _static([tuple(p) for p in paths], where)


def _static(paths: list[tuple], where: str) -> TreeSpec:
    if not paths:
        raise DriftError(f"{where}: the tree has no nodes")
    for p in paths:
        if not p or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in p):
            raise DriftError(f"{where}: path {p!r} must be a non-empty tuple of child ranks >= 0")
    if len(set(paths)) != len(paths):
        raise DriftError(f"{where}: a path appears twice")
    have = set(paths)
    for p in paths:
        if len(p) > 1 and p[:-1] not in have:
            raise DriftError(f"{where}: path {p!r} lacks its parent {p[:-1]!r}")
    return TreeSpec("static", tuple(sorted(paths, key=lambda t: (len(t), t))))  # breadth-first, as vLLM sorts


def _dynamic(top_k, depth, total, where: str) -> TreeSpec:
    for name, v, lo in (("top_k", top_k, 1), ("depth", depth, 1), ("total", total, 2)):
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            raise DriftError(f"{where}: {name} must be an integer >= {lo} (got {v!r})")
    return TreeSpec("dynamic", top_k=top_k, depth=depth, total=total)


@dataclass
class DraftTree:
    """One round's drafted tree; index 0 is the root. `fed`: the nodes run through the drafter (their query rows
    follow the root's, in this order); `slot[u]`: the drafter cache slot of fed node u."""

    tokens: list[int]  # target-vocab ids (root: x_n)
    parents: list[int]  # root: -1
    depths: list[int]
    ranks: list[int]  # rank among the parent's drafter top-k (root: 0)
    logp: list[float]  # drafter log-prob of the token given its path, at temperature 1 (root: 0)
    score: list[float]  # cumulative log-prob of the path (root: 0)
    fed: list[int] = field(default_factory=list)
    slot: dict[int, int] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.tokens) - 1

    def children(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.tokens]
        for i, p in enumerate(self.parents[1:], 1):
            out[p].append(i)
        return out

    def ancestors(self) -> torch.Tensor:
        """Bool [N+1, N+1]: row i marks i itself and all its ancestors (the root included)."""
        m = torch.eye(len(self.tokens), dtype=torch.bool)
        for i, p in enumerate(self.parents[1:], 1):
            m[i] |= m[p]
        return m

    def main_path(self) -> list[bool]:
        """Per node: every rank on its path is 0 (the chain a top-1 drafter would draft)."""
        out = [True]
        for i in range(1, len(self.tokens)):
            out.append(out[self.parents[i]] and self.ranks[i] == 0)
        return out


# -- drafting --------------------------------------------------------------------------------------------
class _Drafting:
    """A tree under construction in the drafter's cache: candidates and their fed slots."""

    def __init__(self, drafter: Eagle3Drafter, cache: KVCache, n: int, root: int, step: DraftStep):
        self.d, self.cache, self.n = drafter, cache, n
        self.tok, self.par, self.dep, self.rank, self.lp, self.sc = [root], [-1], [0], [0], [0.0], [0.0]
        self.logits: dict[int, torch.Tensor] = {0: step.logits[0, -1]}
        self.fb: dict[int, torch.Tensor] = {0: step.feedback[0, -1]}
        self.slot: dict[int, int] = {}
        self.fed: list[int] = []

    def add(self, parent: int, draft_id: int, rank: int, logp: float) -> int:
        self.tok.append(int(self.d.draft_to_target(torch.tensor(draft_id, device=self.d.d2t.device))))
        self.par.append(parent)
        self.dep.append(self.dep[parent] + 1)
        self.rank.append(rank)
        self.lp.append(logp)
        self.sc.append(self.sc[parent] + logp)
        return len(self.tok) - 1

    def top(self, node: int, k: int) -> tuple[list[float], list[int]]:
        """The node's drafter top-k (log-probs at temperature 1, draft-vocab ids), best first."""
        lp = self.logits[node].float().log_softmax(-1)
        v, i = lp.topk(min(k, lp.shape[-1]))
        return v.tolist(), i.tolist()

    def feed(self, nodes: list[int]) -> None:
        """Run `nodes` through the drafter in one call: each sees the context slots, its fed ancestors and itself."""
        if not nodes:
            return
        dev = self.d.lm_head.weight.device
        start = self.cache.length
        for j, u in enumerate(nodes):
            self.slot[u] = start + j
        self.fed += nodes
        length = start + len(nodes)
        mask = torch.zeros(len(nodes), length, dtype=torch.bool, device=dev)
        mask[:, : self.n] = True
        for j, u in enumerate(nodes):
            a = u
            while a > 0:
                mask[j, self.slot[a]] = True
                a = self.par[a]
        ids = torch.tensor([[self.tok[u] for u in nodes]], device=dev)
        hid = torch.stack([self.fb[self.par[u]] for u in nodes])[None]
        pos = torch.tensor([[query_position(self.n, self.dep[u] + 1) for u in nodes]], device=dev)
        step = self.d(ids, hid, pos, self.cache, hidden_is_feature=False, mask=None if mask.all() else mask)
        for j, u in enumerate(nodes):
            self.logits[u] = step.logits[0, j]
            self.fb[u] = step.feedback[0, j]

    def tree(self, keep: list[int]) -> DraftTree:
        """The tree of candidates `keep` (ancestor-closed, parents first), renumbered 0..N."""
        new = {0: 0}
        for u in keep:
            new[u] = len(new)
        nodes = [0, *keep]
        return DraftTree(
            tokens=[self.tok[u] for u in nodes],
            parents=[-1] + [new[self.par[u]] for u in keep],
            depths=[self.dep[u] for u in nodes],
            ranks=[self.rank[u] for u in nodes],
            logp=[self.lp[u] for u in nodes],
            score=[self.sc[u] for u in nodes],
            fed=[new[u] for u in self.fed if u in new],
            slot={new[u]: s for u, s in self.slot.items() if u in new},
        )


def draft_tree(
    drafter: Eagle3Drafter, cache: KVCache, step: DraftStep, n: int, root: int, spec: TreeSpec
) -> DraftTree:
    """Draft one round's tree from the refreshed root step (the query at slot n-1)."""
    b = _Drafting(drafter, cache, n, root, step)
    if spec.kind == "static":
        return _static_tree(b, spec)
    return _dynamic_tree(b, spec)


def _static_tree(b: _Drafting, spec: TreeSpec) -> DraftTree:
    """vLLM's tree: every node's children are its drafter's top-c by rank; levels are fed one call each."""
    node_of: dict[tuple, int] = {(): 0}
    for depth in range(1, spec.max_depth + 1):
        level = [p for p in spec.paths if len(p) == depth]
        parents = sorted({node_of[p[:-1]] for p in level})
        b.feed([u for u in parents if u != 0])
        tops = {u: b.top(u, 1 + max(p[-1] for p in level if node_of[p[:-1]] == u)) for u in parents}
        for p in level:
            v, i = tops[node_of[p[:-1]]]
            if p[-1] >= len(i):
                raise DriftError(
                    f"--tree: rank {p[-1]} in path {p!r} exceeds the draft vocabulary ({len(i)})"
                )
            node_of[p] = b.add(node_of[p[:-1]], i[p[-1]], p[-1], v[p[-1]])
    return b.tree([node_of[p] for p in spec.paths])


def _dynamic_tree(b: _Drafting, spec: TreeSpec) -> DraftTree:
    """SafeAILab EAGLE-3 `topK_genrate`: expand the k best nodes per level (by cumulative log-prob), keep all
    their k children as candidates, then the global best total-1 (ties: the earlier candidate, which keeps the
    tree ancestor-closed because a child never scores above its parent), numbered in candidate order."""
    k = spec.top_k
    v, i = b.top(0, k)
    frontier = [b.add(0, t, r, lp) for r, (lp, t) in enumerate(zip(v, i))]
    for _ in range(spec.depth - 1):
        b.feed(frontier)
        kids = []
        for u in frontier:
            v, i = b.top(u, k)
            kids += [b.add(u, t, r, lp) for r, (lp, t) in enumerate(zip(v, i))]
        best = torch.tensor([b.sc[c] for c in kids], dtype=torch.float64).topk(min(k, len(kids)))
        frontier = [kids[j] for j in best.indices.tolist()]
    cands = list(range(1, len(b.tok)))
    order = sorted(cands, key=lambda c: (-b.sc[c], c))[: spec.total - 1]
    return b.tree(sorted(order))


# -- verification ----------------------------------------------------------------------------------------
def tree_mask(tree: DraftTree, n: int) -> torch.Tensor:
    """The target's mask for [x_n, nodes] after n cached positions: bool [N+1, n+N+1]."""
    anc = tree.ancestors()
    return torch.cat([torch.ones(anc.shape[0], n, dtype=torch.bool), anc], 1)


def greedy_walk(tree: DraftTree, logits: torch.Tensor) -> tuple[list[int], int]:
    """Longest path whose every node is the target's argmax at its parent (logits [N+1, V] per node row);
    returns (accepted nodes, bonus token = the target's argmax at the last accepted node)."""
    kids = tree.children()
    want = logits.argmax(-1).tolist()
    cur, path = 0, []
    while True:
        nxt = next((c for c in kids[cur] if tree.tokens[c] == want[cur]), None)
        if nxt is None:
            return path, want[cur]
        path.append(nxt)
        cur = nxt


def sampled_walk(tree: DraftTree, probs: torch.Tensor, gen: torch.Generator) -> tuple[list[int], int]:
    """EAGLE's multi-candidate rejection with q = 1 (utils.py evaluate_posterior): at the current node try its
    children in order, accept child x with probability p(x) under the current p, else zero p(x) and renormalise;
    with none accepted the next token is drawn from what is left of p. Lossless: P(x) = p(x) for every token.
    probs: the target's distributions [N+1, V] per node row (temperature applied)."""
    kids = tree.children()
    cur, path = 0, []
    while True:
        p = probs[cur].double().cpu().clone()
        tried: set[int] = set()
        nxt = None
        for c in kids[cur]:
            x = tree.tokens[c]
            if x in tried:
                continue
            tried.add(x)
            if float(torch.rand((), generator=gen, dtype=torch.float64)) < float(p[x]):
                nxt = c
                break
            p[x] = 0.0
            p /= p.sum()
        if nxt is None:
            return path, int(torch.multinomial(p, 1, generator=gen))
        path.append(nxt)
        cur = nxt
