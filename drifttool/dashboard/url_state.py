"""The dashboard's view in its URL, so a link opens the same view: the page is the URL path (st.navigation),
the traces shown and the sidebar filters are query parameters. A link's parameters are read once per browser
session, before the widgets are drawn, and only values the loaded traces offer are taken (a stale or edited link
falls back to the defaults for what it names wrongly); afterwards every rerun writes the current state back.

    /depth?traces=smollm2-long_code,smollm2-doc_qa&probes=a,b&tags=x&depth=2-6&heads=0,3"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SEP = ","
APPLIED = "_url_applied"


def small_int(text: str, limit: int = 6) -> int | None:
    """The one parser for numbers in a link: ASCII digits only (str.isdigit accepts '²', which int() refuses) and at
    most `limit` of them (int() refuses > 4,300 digits); anything else is None, and the caller falls back to its
    default."""
    t = str(text)
    if not t or len(t) > limit or not all("0" <= ch <= "9" for ch in t):
        return None
    return int(t)


def _split(v: Any) -> list[str]:
    if v is None:
        return []
    items = v if isinstance(v, (list, tuple)) else [v]
    return [x for s in items for x in str(s).split(SEP) if x]


def read(params: Any, state: Any, trace_names: Sequence[str], labels: Sequence[str], options: dict) -> None:
    """Put a link's values into the session state (`state`) once: traces by folder name (-> selector labels),
    probes, tags and heads that exist, a depth range inside 1..K."""
    if state.get(APPLIED):
        return
    state[APPLIED] = True
    names = [n.removesuffix(".drift") for n in _split(params.get("traces"))]
    found = {
        "flt_traces": [labels[trace_names.index(n)] for n in names if n in trace_names],
        "flt_prompts": [v for v in _split(params.get("probes")) if v in options.get("prompts", [])],
        "flt_tags": [v for v in _split(params.get("tags")) if v in options.get("tags", [])],
        "flt_heads": [h for h in (small_int(x) for x in _split(params.get("heads")))
                      if h is not None and h in options.get("heads", [])],
        "flt_depth": _depth_range(str(params.get("depth") or ""), int(options.get("depth", 1))),
    }
    state.update({k: v for k, v in found.items() if v})


def _depth_range(d: str, k: int) -> tuple[int, int] | None:
    """A link's 'lo-hi' depth range inside 1..K (K > 1), else None (a bad value is ignored)."""
    if "-" not in d or k <= 1:
        return None
    lo, _, hi = (small_int(x) for x in d.partition("-"))
    return (lo, hi) if lo is not None and hi is not None and 1 <= lo <= hi <= k else None


def write(params: Any, state: Any, trace_names: Sequence[str], labels: Sequence[str], depth: int,
          default_labels: Sequence[str] = ()) -> None:
    """The current state as query parameters (only what differs from a fresh session's defaults)."""
    want: dict[str, str] = {}
    shown = [x for x in state.get("flt_traces") or [] if x in labels]
    chosen = [trace_names[labels.index(x)] for x in shown]
    if chosen and shown != list(default_labels):
        want["traces"] = SEP.join(chosen)
    for key, skey in (("probes", "flt_prompts"), ("tags", "flt_tags"), ("heads", "flt_heads")):
        if state.get(skey):
            want[key] = SEP.join(str(x) for x in state[skey])
    d = state.get("flt_depth")
    if d and tuple(d) != (1, depth):
        want["depth"] = f"{d[0]}-{d[1]}"
    for k in [k for k in params if k not in want]:
        del params[k]
    for k, v in want.items():
        if params.get(k) != v:
            params[k] = v
