"""Context length: metrics by depth within context-length buckets, and their mean per bucket."""

import streamlit as st

from drifttool import plots
from drifttool.analysis.compare import DEPTH_METRICS
from drifttool.dashboard import lib

st.title("Context length")
v = lib.view()
options = [*DEPTH_METRICS, "acceptance_rate", "n_alpha"]
metric = st.selectbox("Metric", options, index=options.index("sink_lift"), format_func=plots.label, key="ctx_metric")
lib.chart(plots.context_curves(v.by_context, metric), "context curves")
lib.chart(plots.context_summary(v.by_context, metric), "context summary")
with st.expander("By-context table"):
    lib.table(v.by_context.astype({"context_bucket": str}), "by context")
