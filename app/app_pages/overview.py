"""Overview: per series the drafter identity, layout, flags and overrides, prompts, acceptance, drift summary."""

import dashlib
import streamlit as st

from drifttool import plots

st.title("Overview")
v = dashlib.view()
dashlib.notes(v)
st.subheader("Series")
st.caption("One series per (trace, drafter). Overrides show checkpoint value -> value used.")
dashlib.table(v.info.drop(columns=["path"]), "series")
st.subheader("Acceptance and drift (95% CI over prompts)")
st.caption("drift score = mean self mass over depths 2..K; feature growth = RMS(layer input) at depth K / depth 1; "
           "sink retention = sink mass at depth K / depth 1, left empty when the depth-1 sink mass is below 0.001 "
           "(no sink to retain).")
dashlib.table(v.summary, "summary")
dashlib.chart(plots.acceptance_length_bars(v.summary), "mean acceptance length")
st.subheader("Prompts")
dashlib.table(v.prompts[["series", "prompt_id", "tags", "prompt_len", "n_generated", "n_rounds", "accepted_total",
                         "mean_acceptance_length"]], "prompts")
