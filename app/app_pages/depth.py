"""Depth: attention masses, feature RMS and acceptance vs speculation depth, one line per series (95% CI)."""

import dashlib
import streamlit as st

from drifttool import plots

st.title("Depth")
v = dashlib.view()
dashlib.notes(v)
scale = st.radio("Attention-mass axes", ["fitted (sink mass on a log axis)", "full 0-1"], horizontal=True,
                 key="depth_scale")
if v.info["trace"].nunique() > 1:  # several traces: small multiples, one panel per trace, one line per drafter
    from drifttool.analysis.compare import DEPTH_METRICS

    opts = [*DEPTH_METRICS, "acceptance_rate", "n_alpha"]
    m = st.selectbox("One panel per trace", opts, index=opts.index("self_mass"), format_func=plots.label,
                     key="depth_facet_metric")
    dashlib.chart(plots.metric_by_trace(v.per_depth, m), "depth by trace")
dashlib.chart(plots.acceptance_length_bars(v.summary), "mean acceptance length")
dashlib.chart(plots.depth_curves(v.per_depth, scale="unit" if scale == "full 0-1" else "auto"), "depth curves")
dashlib.chart(plots.feature_rms(v.per_depth), "feature rms")
dashlib.chart(plots.acceptance_per_depth(v.per_depth), "acceptance per depth")
st.caption(f"n_rounds: rounds drafting the depth; n_reached: chains that reached it (n-alpha's n); points over "
           f"fewer than {plots.MIN_N} rounds are hollow and grey.")
with st.expander("Per-depth table"):
    dashlib.table(v.per_depth, "per depth")
