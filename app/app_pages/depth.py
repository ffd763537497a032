"""Depth: attention masses, feature RMS and acceptance vs speculation depth, one line per series (95% CI)."""

import dashlib
import streamlit as st

from drifttool import plots

st.title("Depth")
v = dashlib.view()
dashlib.notes(v)
dashlib.chart(plots.depth_curves(v.per_depth), "depth curves")
dashlib.chart(plots.feature_rms(v.per_depth), "feature rms")
dashlib.chart(plots.acceptance_per_depth(v.per_depth), "acceptance per depth")
with st.expander("Per-depth table"):
    dashlib.table(v.per_depth, "per depth")
