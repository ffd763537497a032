"""The one definition of where a draft's query sits, shared by chains, trees, the window split and replay.

A round starts with `context_len` = n (the trace's column: one less than the tokens committed before it). The
drafter query that drafts depth k (a chain's depth-k row, a tree node at depth k: its parent's query) sits on
slot n - 2 + k; a round is beyond the trained window W when its deepest query slot is >= W."""

from __future__ import annotations


def query_position(context_len, depth):
    """Slot of the query that drafts depth `depth` (ints or numpy/pandas arrays alike)."""
    return context_len - 2 + depth
