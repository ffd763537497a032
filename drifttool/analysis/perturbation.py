"""The template perturbation (the EAGLE 3.1 paper's largest effect): acceptance length per drafter and prompt
rendering (run/probes.TEMPLATE_VARIANTS, read from the prompt id's `@VARIANT`), paired per group (the question)
between renderings within a drafter and between drafters within a rendering. Published (arXiv 2605.09992, read from a
secondary summary, approximate), acceptance length pre-norm / post-norm: template + BoS 2.74 / 2.73, template
without BoS 2.28 / 2.65, no template (BoS kept) 1.69 / 2.61, neither 1.34 / 2.59."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..styles import drafter_kind
from ..trace.metric_table import acceptance_length
from .metrics import bootstrap_ratio
from .stats import paired

VARIANTS = ("template+bos", "template-bos", "plain+bos", "plain-bos")
PUBLISHED = {"template+bos": (2.74, 2.73), "template-bos": (2.28, 2.65), "plain+bos": (1.69, 2.61),
             "plain-bos": (1.34, 2.59)}  # (pre-norm EAGLE-3, post-norm EAGLE-3.1)


def _variant(pid: str) -> str | None:
    v = str(pid).rsplit("@", 1)[-1]
    return v if v in VARIANTS else None


def group_al(cmp) -> pd.DataFrame:
    """Per series x variant x group: acceptance length (1 + accepted drafts per round)."""
    r = cmp.rounds.assign(variant=cmp.rounds["prompt_id"].map(_variant)).dropna(subset=["variant"])
    g = r.groupby(["series", "variant", "group"], observed=True)["accepted"].agg(["sum", "count"]).reset_index()
    g["al"] = acceptance_length(g["sum"], g["count"])
    return g


def table(cmp) -> pd.DataFrame:
    """One row per series x variant: pooled AL with a group-bootstrap CI, the paired change against template+bos
    (mean over groups, t-interval, sign-flip p), and the published value for the drafter's kind."""
    g = group_al(cmp)
    rows = []
    for (s, v), sub in g.groupby(["series", "variant"], observed=True):
        al, lo, hi = bootstrap_ratio(sub["sum"].to_numpy(), sub["count"].to_numpy())
        base = g[(g.series == s) & (g.variant == VARIANTS[0])].set_index("group")["al"]
        here = sub.set_index("group")["al"]
        common = here.index.intersection(base.index)
        st = paired((here[common] - base[common]).to_numpy()) if v != VARIANTS[0] else None
        kind = drafter_kind(s)
        pub = PUBLISHED[v][0 if kind == "eagle3" else 1] if kind in ("eagle3", "eagle3.1") else np.nan
        rows.append({"series": s, "variant": v, "acceptance_length": 1 + al, "al_lo": 1 + lo, "al_hi": 1 + hi,
                     "vs_template_bos": st["mean"] if st else np.nan, "vs_lo": st["lo"] if st else np.nan,
                     "vs_hi": st["hi"] if st else np.nan, "p": st["p"] if st else np.nan,
                     "groups": int(len(sub)), "published": pub})
    order = {v: i for i, v in enumerate(VARIANTS)}
    return pd.DataFrame(rows).sort_values(["series", "variant"], key=lambda c: c.map(order) if c.name == "variant"
                                          else c).reset_index(drop=True)


def between(cmp, base: str, other: str) -> pd.DataFrame:
    """Per variant: `other` - `base` acceptance length, paired per group (sign-flip p, t-interval, MDE)."""
    g = group_al(cmp).set_index(["series", "variant", "group"])["al"]
    rows = []
    for v in VARIANTS:
        try:
            a, b = g.loc[(other, v)], g.loc[(base, v)]
        except KeyError:
            continue
        common = a.index.intersection(b.index)
        st = paired((a[common] - b[common]).to_numpy())
        rows.append({"variant": v, "difference": st["mean"], "lo": st["lo"], "hi": st["hi"], "p": st["p"],
                     "mde": st["mde"], "groups": st["n"]})
    return pd.DataFrame(rows)
