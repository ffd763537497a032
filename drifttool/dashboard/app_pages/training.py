"""Across training: a checkpoint-series trace (capture --drafter-series) per variant against the training step."""

import streamlit as st

from drifttool import plots
from drifttool.analysis.training import CURVE_METRICS
from drifttool.dashboard import lib

st.title("Across training")
v = lib.view()
lib.notes(v)
curves = v.training
if curves.empty:  # the selection holds no series: the checkpoint series loaded beside it (sample_traces/training)
    sv = lib.series_view()
    if sv is not None:
        st.caption("The checkpoint-series trace(s) loaded beside the selected traces (not in the selection: a "
                   "series compares checkpoints of one run, not drafters).")
        curves = sv.training
if curves.empty:
    st.info("No checkpoint series in the selected traces: capture one with `drifttool capture --drafter-series "
            "DIR` (a folder of step-N checkpoints; each becomes a drafter named VARIANT@STEP).")
    st.stop()
opts = ["mean_acceptance_length", *CURVE_METRICS]
c1, c2 = st.columns(2)
metric = c1.selectbox("Metric", opts, index=opts.index("acceptance_rate"), format_func=plots.label,
                      key="train_metric")
depths = sorted(int(d) for d in curves["depth"].unique())
depth = c2.select_slider("Depth", depths, value=depths[0], key="train_depth")
lib.chart(plots.training_curves(curves, metric, depth), "across training")
lib.chart(plots.training_curves(curves, "sink_lift", 1), "sink lift across training")
lib.chart(plots.training_curves(curves, "self_lift", depths[-1]), "self lift across training")
lib.chart(plots.training_curves(curves, "rms_in", depths[-1]), "fed-back rms across training")
st.caption("One point per checkpoint: means over all its rounds (hover for n). Acceptance: vLLM's per-position "
           "rate at the depth; sink lift at depth 1 (x uniform: does the drafter learn the target's sink, and when); "
           "self lift and layer-input RMS at the deepest depth (raw masses: the Metric box).")
with st.expander("Per checkpoint and depth"):
    lib.table(curves, "training curves")
