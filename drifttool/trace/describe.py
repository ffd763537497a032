"""A manifest's settings in words, for `info`, the dashboard and the report: never a raw Python dict
(`sink={'first_n': 0, 'positions': [0], 'token_ids': []}` reads as "position 0")."""

from __future__ import annotations

from typing import Any


def _items(d: Any) -> list:
    return list(d.items()) if isinstance(d, dict) else []


def pairs_text(d: dict | None) -> str:
    """'k=v, k=v' (a flag or assumption table), '-' when empty."""
    return ", ".join(f"{k}={v}" for k, v in _items(d)) or "-"


def flags_on_text(d: dict | None, none: str = "-") -> str:
    """The flags that are on, by name ('fc_norm, norm_output'), `none` when none is."""
    return ", ".join(k for k, v in _items(d) if v) or none


def overrides_text(ov: dict | None) -> str:
    """'norm_output: False -> True' per overridden flag (the checkpoint's value, then the run's), '-' when none."""
    return ", ".join(f"{k}: {v.get('checkpoint') if isinstance(v, dict) else '?'} -> "
                     f"{v.get('override') if isinstance(v, dict) else v}" for k, v in _items(ov)) or "-"


def _nums(xs: list) -> str:
    return ", ".join(str(x) for x in xs)


def sink_text(d: Any) -> str:
    """A manifest's capture.sink: 'position 0', 'the first 4 positions', 'tokens 1, 2', combined with '+'."""
    try:
        return _sink_text(d)
    except (TypeError, ValueError):  # a damaged manifest: shown as it is
        return str(d)


def _sink_text(d: Any) -> str:
    if not isinstance(d, dict):
        return str(d)
    parts = []
    if d.get("target"):
        parts.append("the target's own sink")
    n = int(d.get("first_n") or 0)
    if n:
        parts.append("position 0" if n == 1 else f"the first {n} positions")
    pos = list(d.get("positions") or [])
    if pos:
        parts.append(f"position{'s' if len(pos) > 1 else ''} {_nums(pos)}")
    tok = list(d.get("token_ids") or [])
    if tok:
        parts.append(f"token id{'s' if len(tok) > 1 else ''} {_nums(tok)}")
    text = " + ".join(parts) or "none"
    return f"auto: {text}" if d.get("auto") else text


def tree_text(d: Any) -> str:
    """A manifest's capture.tree as `--tree` takes it: 'dynamic:top_k=4,depth=5,total=8' or rank paths."""
    if not isinstance(d, dict):
        return str(d)
    if d.get("kind") == "static":
        return repr([tuple(p) for p in d.get("paths") or []])
    return f"dynamic:top_k={d.get('top_k')},depth={d.get('depth')},total={d.get('total')}"


def value_text(v: Any) -> str:
    """Any other manifest value: a dict as 'k=v, ...', a list as 'a, b', else str."""
    if isinstance(v, dict):
        return ", ".join(f"{k}={value_text(x)}" for k, x in v.items()) or "-"
    if isinstance(v, (list, tuple)):
        return ", ".join(value_text(x) for x in v) or "-"
    return str(v)
