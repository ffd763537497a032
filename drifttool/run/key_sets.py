"""The torch side of the metric table's key rules: which context slots each context mass sums over in one round.
The table (trace/metric_table.py) names a rule ("sink", "recent", "template") or gives a callable; this module
resolves it against the round's KeyContext, so the trace stage that reads traces never imports torch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..trace import metric_table


@dataclass(frozen=True)
class KeyContext:
    """What a context key set may depend on in one round: n context slots, their token ids (a callable: read only
    when a rule needs them), the sink slots, and the capture's settings (recent window R, template token ids)."""

    n: int
    ids: Callable[[], torch.Tensor]
    sink: torch.Tensor
    recent: int
    template_ids: tuple[int, ...]


def template_index(context_ids: torch.Tensor, template_ids, sink_idx: torch.Tensor) -> torch.Tensor:
    """The template key set of a round: the context slots holding one of the chat template's special tokens
    (`template_ids`, e.g. <|im_start|> / <|im_end|>), sinks excluded (int64, ascending; empty without ids)."""
    if not len(template_ids):
        return torch.zeros(0, dtype=torch.long)
    m = torch.isin(context_ids, torch.as_tensor(list(template_ids), dtype=context_ids.dtype))
    if sink_idx.numel():
        m[sink_idx[sink_idx < len(m)]] = False
    return m.nonzero()[:, 0]


def recent_index(n: int, r: int, sink_idx: torch.Tensor) -> torch.Tensor:
    """The recent key set of a round with n context slots: the last r of them (slots max(0, n - r) .. n - 1),
    sinks excluded so that the sink and recent masses never count a key twice (int64, ascending)."""
    idx = torch.arange(max(0, n - r), n, dtype=torch.long)
    if sink_idx.numel():
        idx = idx[~torch.isin(idx, sink_idx.to(idx.device))]
    return idx


def matched_index(n: int, m: int, sink_idx: torch.Tensor) -> torch.Tensor:
    """The recency-matched control's key set of a round: the last m context slots that are not sinks (ascending;
    fewer when the context has fewer). The own slots it stands in for are never sinks of the prompt, so a sink that
    happens to be recent (a token rule, a short prompt) is skipped, not counted as recency."""
    s = sink_idx.to(torch.long)
    idx = torch.arange(max(0, n - m - s.numel()), n, dtype=torch.long)
    if s.numel():
        idx = idx[~torch.isin(idx, s.to(idx.device))]
    return idx[max(0, idx.numel() - m):]


RULES: dict[str, Callable[[KeyContext], torch.Tensor]] = {
    "sink": lambda c: c.sink,
    "recent": lambda c: recent_index(c.n, c.recent, c.sink),
    "template": lambda c: template_index(c.ids(), c.template_ids, c.sink),
}


def rule(m: metric_table.Metric) -> Callable[[KeyContext], torch.Tensor]:
    """A context metric's key rule: its named rule, or the callable the table row gives."""
    return m.keys if callable(m.keys) else RULES[m.keys]


def context_sets(ctx: KeyContext) -> list[torch.Tensor]:
    """Each context mass's slots for one round, in metric_table.context_masses() order (int64, on the host)."""
    return [rule(m)(ctx).to(torch.long) for m in metric_table.of_kind("context")]
