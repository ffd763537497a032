"""Context length: metrics by depth within context-length buckets, and their mean per bucket."""

import dashlib
import streamlit as st

from drifttool import plots
from drifttool.analysis.compare import DEPTH_METRICS

st.title("Context length")
v = dashlib.view()
options = [*DEPTH_METRICS, "acceptance_rate", "n_alpha"]
metric = st.selectbox("Metric", options, index=options.index("self_mass"), format_func=plots.label, key="ctx_metric")
dashlib.chart(plots.context_curves(v.by_context, metric), "context curves")
dashlib.chart(plots.context_summary(v.by_context, metric), "context summary")
with st.expander("By-context table"):
    dashlib.table(v.by_context.astype({"context_bucket": str}), "by context")
