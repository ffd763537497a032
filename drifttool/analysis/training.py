"""Drift across training: the per-checkpoint statistics of a checkpoint-series trace (drafters named
`VARIANT@STEP`, see trace/series_names.py) lined up against the training step: mean acceptance length, per-depth
acceptance, sink / self mass and fed-back (layer-input) RMS per depth."""

from __future__ import annotations

import pandas as pd

from ..trace.series_names import split_series

CURVE_METRICS = ("acceptance_rate", "n_alpha", "sink_lift", "self_lift", "sink_mass", "self_mass", "rms_in")


def is_series(cmp) -> bool:
    steps = [split_series(s.label) for s in cmp.series]
    return sum(x is not None for x in steps) >= 2


def training_curves(cmp) -> pd.DataFrame:
    """`cmp`: a Comparison. One row per variant x step x depth: CURVE_METRICS (means over all rounds) and n_rounds, plus the
    checkpoint's mean acceptance length and groups; empty when the trace is no checkpoint series."""
    if not is_series(cmp):
        return pd.DataFrame(columns=["variant", "step", "depth", *CURVE_METRICS])
    pdp = cmp.per_depth()
    s = cmp.summary().set_index("series")
    rows = []
    for r in pdp.itertuples():
        vs = split_series(r.series)
        if vs is None:
            continue
        trace = r.series.rsplit(":", 1)[0] if ":" in r.series else None
        # the trace stays in the variant: two runs with the same variant names are two curves, not one pooled
        rows.append({"variant": f"{trace}:{vs[0]}" if trace else vs[0], "step": vs[1], "depth": int(r.depth), "series": r.series,
                     **{m: getattr(r, m) for m in CURVE_METRICS}, "n_rounds": r.n_rounds,
                     "mean_acceptance_length": s.loc[r.series, "mean_acceptance_length"],
                     "groups": s.loc[r.series, "groups"]})
    return pd.DataFrame(rows).sort_values(["variant", "step", "depth"]).reset_index(drop=True)


def training_table(curves: pd.DataFrame, depth: int) -> pd.DataFrame:
    """Per variant x step: acceptance length, depth-1 acceptance and sink mass, self mass and RMS at `depth`."""
    if curves.empty:
        return curves
    d1 = curves[curves.depth == 1].set_index(["variant", "step"])
    dk = curves[curves.depth == depth].set_index(["variant", "step"])
    out = pd.DataFrame({"mean_acceptance_length": d1["mean_acceptance_length"], "acceptance_d1": d1["acceptance_rate"],
                        "sink_d1": d1["sink_mass"], f"self_d{depth}": dk["self_mass"],
                        f"rms_in_d{depth}": dk["rms_in"], "groups": d1["groups"]})
    return out.reset_index()
