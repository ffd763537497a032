"""Heads: depth x head heatmaps per series on one colour scale, and the difference A - B."""

import streamlit as st

from drifttool import plots
from drifttool.analysis.views import HEAD_METRICS
from drifttool.dashboard import lib
from drifttool.trace.schema import LIFTS

st.title("Heads")
v = lib.view()
READ = st.radio("Attention", ["x uniform (lift)", "mass"], horizontal=True, key="heads_read",
                help="lift = the head's mass / the share uniform attention over the keys its queries saw would give it")
choices = [*LIFTS, "entropy"] if READ.startswith("x") else list(HEAD_METRICS)
metric = st.selectbox("Metric", choices, format_func=plots.label, key="heads_metric")
lib.chart(plots.head_heatmaps(v.head_means, metric, v.series), "head heatmaps")
if len(v.series) >= 2:
    c1, c2 = st.columns(2)
    a = c1.selectbox("A", v.series, index=0, key="heads_a")
    b = c2.selectbox("B", v.series, index=1, key="heads_b")
    lib.chart(plots.head_diff_heatmap(v.head_means, a, b, metric), "head difference")
else:
    st.info("A difference heatmap needs two series.")
st.subheader("Where heads look hardest")
st.caption("A fixed sink region can be empty for a drafter: each head's largest attention weight, by the kind of "
           "slot it sits on (position 0 = the target's natural sink when the text starts there).")
lib.chart(plots.where_attention(v.where), "where attention")
with st.expander("Depth x head table"):
    lib.table(v.head_means, "head means")
