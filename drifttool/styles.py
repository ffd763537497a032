"""One fixed look per drafter, shared by every chart (drifttool.plots) and the terminal report.

EAGLE-3, EAGLE-3.1, the what-if (EAGLE-3 weights with a 3.1 normalisation flag switched on) and MTP heads (and
their norm_output what-if) each have their own colour and dash; any other drafter gets a palette colour chosen by a hash of its name, so it keeps
that colour whatever else is on the chart. No plotly here: the terminal report uses the same kinds."""

from __future__ import annotations

import re
import zlib

# One fixed style per drafter kind, in every figure of the dashboard and the notebook (Okabe-Ito colours,
# readable by colour-blind readers). Any other drafter name gets a colour from PALETTE chosen by a hash of
# its name, so it too keeps its colour whatever else is on the chart.
KIND_STYLES = {
    "eagle3": {"color": "#0072B2", "dash": "solid"},         # EAGLE-3: blue, solid
    "eagle3.1": {"color": "#D55E00", "dash": "solid"},       # EAGLE-3.1: vermillion, solid
    "what-if": {"color": "#009E73", "dash": "dash"},         # EAGLE-3 weights + a 3.1 flag (post-norm): green, dashed
    "mtp": {"color": "#CC79A7", "dash": "solid"},            # an MTP head (variant mtp): reddish purple, solid
    "mtp what-if": {"color": "#CC79A7", "dash": "dash"},     # an MTP head with the norm_output what-if: dashed
}
# (reddish purple is the MTP heads' own: not in the palette of other drafters)
PALETTE = ["#DDCC77", "#E69F00", "#56B4E9", "#882255", "#999933", "#44AA99", "#332288", "#AA4499", "#117733",
           "#6699CC"]
DASHES = ["solid", "dot", "dashdot", "longdash"]


def split_label(series: str) -> tuple[str | None, str]:
    """'trace:drafter' -> (trace, drafter); a bare drafter label -> (None, drafter)."""
    t, sep, d = str(series).rpartition(":")
    return (t, d) if sep else (None, d)


def drafter_kind(series: str) -> str | None:
    """'eagle3', 'eagle3.1', 'what-if' (EAGLE-3 weights with a 3.1 normalisation flag switched on), 'mtp' (a
    multi-token-prediction head), 'mtp what-if' (one with the norm_output override), or None.

    Read from the drafter part of the label: drifttool's own names (eagle3, eagle3.1, eagle3+norm_output, mtp,
    mtp-postnorm) and the usual short forms (e3, e31, eagle-3.1, e3post, ds-mtp, ...)."""
    d = split_label(series)[1].lower()
    if re.search(r"(?:^|[^a-z])mtp", d):  # MTP heads first: `mtp-postnorm` is an MTP what-if, not EAGLE's
        return "mtp what-if" if ("+" in d or "norm_output" in d or "post" in d or "what" in d) else "mtp"
    if "+" in d or "norm_output" in d or "post" in d or "what" in d:
        return "what-if"
    if re.search(r"(?:eagle|^e)[-_ ]?3(?:\.|_|-)?1\b", d) or re.search(r"(?:eagle|^e)[-_ ]?3\.1", d):
        return "eagle3.1"
    if re.search(r"(?:eagle|^e)[-_ ]?3(?![\d.])", d):
        return "eagle3"
    return None


def series_style(series: str) -> dict[str, str]:
    """{'color', 'dash'} of a series: fixed per drafter kind; other drafters by a stable hash of the name."""
    k = drafter_kind(series)
    if k:
        return dict(KIND_STYLES[k])
    h = zlib.crc32(split_label(series)[1].encode())
    return {"color": PALETTE[h % len(PALETTE)], "dash": DASHES[(h // len(PALETTE)) % len(DASHES)]}


KIND_ORDER = {"eagle3": 0, "eagle3.1": 1, "what-if": 2, "mtp": 3, "mtp what-if": 4}


def series_order(series) -> list[str]:
    """The one order of series on every chart, legend and table: by trace, then EAGLE-3, EAGLE-3.1, what-ifs,
    MTP heads, their what-ifs, others (each in order of appearance)."""
    labels = list(dict.fromkeys(str(s) for s in series))
    traces = list(dict.fromkeys(split_label(s)[0] or "" for s in labels))
    return sorted(labels, key=lambda s: (traces.index(split_label(s)[0] or ""),
                                         KIND_ORDER.get(drafter_kind(s) or "", len(KIND_ORDER)), labels.index(s)))
