"""Magnitudes: per aux chunk RMS before/after fc_norm, feature RMS by depth, massive-activation flags."""

import streamlit as st

from drifttool import plots
from drifttool.dashboard import lib

st.title("Magnitudes")
v = lib.view()
if v.aux_summary.empty:
    st.info("These traces hold no aux-chunk rows.")
else:
    lib.chart(plots.aux_rms(v.aux_summary), "aux rms")
lib.chart(plots.feature_rms(v.per_depth), "feature rms by depth")
lib.chart(plots.massive_flags(v.massive_by_depth, v.aux_summary), "massive flags")
st.caption("Massive activation: some |x| > 100 and >= 1000x the median |x| of that vector.")
with st.expander("Aux-chunk table"):
    lib.table(v.aux_summary, "aux chunks")
