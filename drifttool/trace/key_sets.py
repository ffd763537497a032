"""The metric table's slot rules, resolved for one round on the host (numpy): which context slots each context
mass sums over (`context_sets`), which of the round's drafted tail slots each tail mass sums over (`tail_weights`),
and how many keys each set holds (`tail_counts`; a context set's count is its size). The capture resolves them every
round; a trace written before a count was stored, and the synthetic traces, count with the same rules
(trace/key_counts.py), so a rule is written once. The table (trace/metric_table.py) names a rule or gives a callable; this module resolves it.
Index arithmetic over a few hundred slots per round is microseconds in numpy and tens of microseconds as torch
ops, and the capture runs it every round (bench/bench_overhead.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from . import metric_table


class NeedsTokens(Exception):
    """A rule read the context's token ids where only positions are known (a trace stores no context tokens)."""


@dataclass(frozen=True)
class KeyContext:
    """What a context key set may depend on in one round: n context slots, their token ids (a callable returning
    an int64 array: read only when a rule needs them), the sink slots (ascending int64 array), and the capture's
    settings (recent window R, template token ids)."""

    n: int
    ids: Callable[[], np.ndarray]
    sink: np.ndarray
    recent: int
    template_ids: tuple[int, ...]


def template_index(context_ids: np.ndarray, template_ids, sink_idx: np.ndarray) -> np.ndarray:
    """The template key set of a round: the context slots holding one of the chat template's special tokens
    (`template_ids`, e.g. <|im_start|> / <|im_end|>), sinks excluded (int64, ascending; empty without ids)."""
    if not len(template_ids):
        return np.zeros(0, dtype=np.int64)
    m = np.isin(np.asarray(context_ids), np.asarray(list(template_ids)))
    s = np.asarray(sink_idx, dtype=np.int64)
    if s.size:
        m[s[s < len(m)]] = False
    return np.flatnonzero(m).astype(np.int64)


def recent_index(n: int, r: int, sink_idx: np.ndarray) -> np.ndarray:
    """The recent key set of a round with n context slots: the last r of them (slots max(0, n - r) .. n - 1),
    sinks excluded so that the sink and recent masses never count a key twice (int64, ascending)."""
    idx = np.arange(max(0, n - r), n, dtype=np.int64)
    s = np.asarray(sink_idx, dtype=np.int64)
    if s.size and idx.size and s[-1] >= idx[0]:
        idx = idx[~np.isin(idx, s)]
    return idx


def matched_index(n: int, m: int, sink_idx: np.ndarray) -> np.ndarray:
    """The recency-matched control's key set of a round: the last m context slots that are not sinks (ascending;
    fewer when the context has fewer). The own slots it stands in for are never sinks of the prompt, so a sink that
    happens to be recent (a token rule, a short prompt) is skipped, not counted as recency."""
    s = np.asarray(sink_idx, dtype=np.int64)
    idx = np.arange(max(0, n - m - s.size), n, dtype=np.int64)
    if s.size and idx.size and s[-1] >= idx[0]:
        idx = idx[~np.isin(idx, s)]
    return idx[max(0, idx.size - m):]


_CONTEXT = metric_table.of_kind("context")  # read once: a row added at run time is added before the stages import
_TAIL = metric_table.of_kind("tail")
RULES: dict[str, Callable[[KeyContext], np.ndarray]] = {
    "sink": lambda c: c.sink,
    "recent": lambda c: recent_index(c.n, c.recent, c.sink),
    "template": lambda c: template_index(c.ids(), c.template_ids, c.sink),
}


def rule(m: metric_table.Metric) -> Callable[[KeyContext], np.ndarray]:
    """A context metric's key rule: its named rule, or the callable the table row gives."""
    return m.keys if callable(m.keys) else RULES[m.keys]


def context_sets(ctx: KeyContext) -> list[np.ndarray]:
    """Each context mass's slots for one round, in metric_table.context_masses() order (int64 arrays)."""
    return [np.asarray(rule(m)(ctx), dtype=np.int64).reshape(-1) for m in _CONTEXT]


# -- the tail: the slots the round drafted ---------------------------------------------------------------------------
@dataclass(frozen=True)
class TailSlots:
    """The round's F drafted (fed) slots after the n context slots, seen from each of its R query rows: `anc` [R, F]
    the strict ancestors of the row's own input slot (a chain's earlier draft steps), `own` [R, F] the row's own
    input slot (bool arrays). A chain is a tree of width one (`chain`); a draft tree gives its ancestor masks."""

    anc: np.ndarray
    own: np.ndarray

    @cached_property
    def path(self) -> np.ndarray:
        """[R, F]: every drafted slot the row's query sees (its path: ancestors and its own slot)."""
        return self.anc | self.own

    @cached_property
    def weights(self) -> list[np.ndarray]:
        """Each tail mass's weights [R, F] (tail_weights), computed once per tail (a chain's is cached per K)."""
        return tail_weights(self)

    @classmethod
    def chain(cls, k_: int) -> TailSlots:
        """K depth rows over the K-1 draft slots (col c = slot n + c, the input of depth c + 2): depth j (0-based)
        sees cols < j, its own slot is col j - 1, its earlier draft steps the cols before."""
        return _chain(k_)


_CHAINS: dict[int, TailSlots] = {}


def _chain(k_: int) -> TailSlots:
    if k_ not in _CHAINS:
        seen = np.tri(k_, k_ - 1, -1, dtype=bool)  # [K, K-1]: c < j
        anc = np.tri(k_, k_ - 1, -2, dtype=bool)  # c < j - 1
        _CHAINS[k_] = TailSlots(anc, seen & ~anc)
    return _CHAINS[k_]


TAIL_RULES: dict[str, Callable[[TailSlots], np.ndarray]] = {
    "ancestors": lambda t: t.anc,
    "own": lambda t: t.own,
}


def tail_weights(t: TailSlots) -> list[np.ndarray]:
    """Each tail mass's weights [R, F] over the drafted slots, in metric_table.of_kind('tail') order (the table's
    `slots` rule: a named rule or a callable of TailSlots; weights outside the row's path count nothing)."""
    out = []
    for m in _TAIL:
        f = m.slots if callable(m.slots) else TAIL_RULES[m.slots]
        out.append(np.asarray(f(t), dtype=np.float64) * t.path)
    return out


def tail_counts(t: TailSlots, seen: np.ndarray) -> dict[str, np.ndarray]:
    """Each tail or derived mass's key count per query row (int64 [R]): the drafted slots the row sees (`seen`
    [R, F], after any sliding window) that its weights count. A derived mass counts its parts' slots."""
    weights = {m.name: w for m, w in zip(_TAIL, t.weights)}
    out = {}
    for m in metric_table.of_kind("tail", "derived"):
        if m.count:
            w = weights.get(m.name)
            if w is None:
                w = sum(weights[x] for x in m.parts if x in weights)
            out[m.count] = ((np.asarray(w) > 0) & seen).sum(1)
    return out
