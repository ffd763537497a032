"""What tracks rejection: acceptance by quantile bin of sink mass / self mass / feature RMS, per depth."""

import streamlit as st

from drifttool import plots
from drifttool.analysis.compare import PREDICTORS
from drifttool.dashboard import lib

st.title("What tracks rejection")
bins = st.slider("Quantile bins", 2, 10, 4, key="pred_bins")
v = lib.view()
lib.chart(plots.predictor_correlations(v.predictors(bins)), "rank correlation")
metric = st.selectbox("Metric", PREDICTORS, index=PREDICTORS.index("self_mass"), format_func=plots.label,
                      key="pred_metric")
lib.chart(plots.predictor_curves(v.predictors(bins), metric), "acceptance by bin")
st.caption("Acceptance among chains that reached the depth. Negative rank correlation: higher values go with "
           "more rejections.")
with st.expander("Binned table"):
    lib.table(v.predictors(bins), "predictors")
