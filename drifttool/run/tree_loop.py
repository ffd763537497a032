"""The speculative loop with a draft tree per round: refresh (as chains) -> draft_tree -> one target forward over the
tree under its ancestor mask -> greedy longest path or EAGLE's sampled walk -> the target's cache compacted to the
accepted path. A static chain tree ([(0,), (0, 0), ...]) runs exactly the chain loop's forwards."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ..errors import DriftError
from ..model.drafter import Eagle3Drafter
from ..model.target import Target
from ..trace.metric_table import acceptance_length
from .argcheck import need_int, need_number, token_ids
from .loop import Prefill, check_features, check_prompt, prefill_target, run_rounds, until_stop
from .tree import DraftTree, TreeSpec, draft_tree, greedy_walk, sampled_walk, tree_mask


@dataclass
class TreeRoundRecord:
    round: int
    context_len: int  # n: committed tokens before this round's drafts (the root x_n sits at position n)
    tree: DraftTree
    path: list[int]  # accepted nodes, root excluded, in depth order
    target_ids: list[int]  # per node (root included): the target's argmax at the node's parent row (root: -1)
    bonus: int
    draft_s: float = float("nan")
    verify_s: float = float("nan")

    @property
    def accepted(self) -> int:
        return len(self.path)

    @property
    def draft_ids(self) -> list[int]:
        return self.tree.tokens[1:]


@dataclass
class TreeResult:
    prompt_ids: list[int]
    output_ids: list[int]
    rounds: list[TreeRoundRecord] = field(default_factory=list)

    @property
    def mean_acceptance_length(self) -> float:
        """1 + accepted drafts per round (trace/metric_table.acceptance_length)."""
        return acceptance_length(sum(r.accepted for r in self.rounds), len(self.rounds))


@torch.no_grad()
def speculate_tree(
    target: Target,
    drafter: Eagle3Drafter,
    prompt_ids: list[int],
    tree: TreeSpec,
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    seed: int = 0,
    observers=(),
    stop_ids: tuple[int, ...] = (),
    prefill: Prefill | None = None,
) -> TreeResult:
    """Speculatively decode from `prompt_ids` with one draft tree per round; lossless w.r.t. the target (greedy
    when temperature == 0, else EAGLE's multi-candidate rejection). Observers get the loop's round callbacks
    with a TreeRoundRecord. The prompt forward, feature checks and stop rule are the chain loop's (`prefill`:
    the target's prompt forward shared by several drafters, loop.prefill_prompt)."""
    need_int("--max-new-tokens", max_new_tokens, 1)
    need_number("--temperature", temperature, 0.0, "a finite temperature >= 0 (0 = greedy)")
    if drafter.config.sliding_window is not None:
        raise DriftError("--tree: drafters with a sliding attention window are measured as chains only")
    prompt_ids = token_ids(prompt_ids)
    check_prompt(prompt_ids, target, len(prompt_ids) + max_new_tokens + tree.max_nodes + 1)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    first, pending = prefill_target(target, prompt_ids, temperature, gen, prefill)
    seq = [*prompt_ids, first]
    cache = drafter.new_cache(capacity=len(prompt_ids) + max_new_tokens + tree.max_nodes + 8)

    def tree_round(index: int, step, n: int, t0: float):
        dt = draft_tree(drafter, cache, step, n, seq[-1], tree)
        draft_s = time.perf_counter() - t0
        path, bonus, tgt, features, verify_s = verify_tree(target, dt, n, temperature, gen)
        rec = TreeRoundRecord(index, n, dt, path, tgt, bonus, draft_s, verify_s)
        return rec, [*(dt.tokens[u] for u in path), bonus], features

    rounds = run_rounds(drafter, cache, prompt_ids, seq, pending, max_new_tokens, stop_ids, tree.max_depth,
                        observers, tree_round)
    return TreeResult(prompt_ids, until_stop(seq[len(prompt_ids) :], stop_ids)[:max_new_tokens], rounds)


def verify_tree(target: Target, tree: DraftTree, n: int, temperature: float, gen: torch.Generator):
    """One target forward over [x_n, nodes] (positions n + depth, ancestor mask); the walk; the target's cache
    compacted to x_n + the accepted path. Returns (path, bonus, per-node target argmax, features of the
    committed positions, seconds)."""
    t0 = time.perf_counter()
    anc = tree.ancestors()
    chain = bool(anc.equal(torch.ones_like(anc).tril()))  # a chain in order: the plain causal forward
    ids = torch.tensor(tree.tokens)
    if chain:
        vo = target.forward(ids)
    else:
        vo = target.forward(ids, positions=torch.tensor(tree.depths) + n, mask=tree_mask(tree, n))
    check_features(vo.features)
    if temperature > 0:
        path, bonus = sampled_walk(tree, (vo.logits / temperature).softmax(-1), gen)
    else:
        path, bonus = greedy_walk(tree, vo.logits)
    arg = vo.logits.argmax(-1).tolist()
    tgt = [-1] + [arg[p] for p in tree.parents[1:]]
    rows = [0, *path]
    if path == list(range(1, len(path) + 1)):  # already contiguous in the cache
        target.crop(n + len(path) + 1)
    else:  # rebuild the accepted path's KV at contiguous positions (features: the tree pass's, as EAGLE)
        target.crop(n)
        target.forward(torch.tensor([tree.tokens[u] for u in rows]))
    return path, bonus, tgt, vo.features[rows], time.perf_counter() - t0
