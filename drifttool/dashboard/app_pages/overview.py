"""Overview: per series the drafter identity, layout, flags and overrides, prompts, acceptance, drift summary.
Tables only (see below), so the first page draws without the plotting library."""

import streamlit as st

from drifttool.dashboard import lib

st.title("Overview")
v = lib.view()
lib.notes(v)
lines = v.verdict
if lines:
    st.subheader("In short")
    st.markdown("\n".join(f"- {x}" for x in lines))
    st.caption("Acceptance length against the EAGLE-3 series, paired over groups (source documents) with a sign-flip "
               "test and its minimum detectable effect; depth trends with the same statistics are on the Depth page.")
st.subheader("Series")
st.caption("One series per (trace, drafter). Overrides show checkpoint value -> value used.")
lib.table(v.info.drop(columns=["path"]), "series")
st.subheader("Acceptance and drift (95% CI over groups; none below 6 groups)")
st.caption("drift score = mean self mass over depths 2..K; feature growth = RMS(layer input) at depth K / depth 1; "
           "sink retention = sink mass at depth K / depth 1, left empty when the depth-1 sink mass is below 0.001 "
           "(no sink to retain).")
# Numbers only on the first page, with in-cell bars: a plotly chart makes the browser load and run plotly's
# 4.7 MB bundle before the page is drawn (1.5-2 s cold); the chart pages load it when opened. The same
# acceptance-length bars with their CIs head the Depth page.
k = int(v.info["depth_K"].max()) if len(v.info) else 1
first = ["series", "mean_acceptance_length", "al_lo", "al_hi", "drift_score", "drift_lo", "drift_hi", "feature_growth",
         "sink_retention"]  # the headline numbers in view; the other acceptance definitions after them
lib.table(v.summary, "summary", column_order=[*(c for c in first if c in v.summary),
                                                  *(c for c in v.summary if c not in first)], column_config={
    "mean_acceptance_length": st.column_config.ProgressColumn(
        "mean_acceptance_length", format="%.3f", min_value=1.0, max_value=float(k + 1),
        help="tokens per round, bonus token included; bar: 1 .. K+1"),
    "drift_score": st.column_config.ProgressColumn("drift_score", format="%.3f", min_value=0.0, max_value=1.0,
                                                   help="mean self mass over depths 2..K; bar: 0 .. 1")})
st.subheader("Prompts")
lib.table(v.prompts[[c for c in ("series", "prompt_id", "group", "tags", "prompt_len", "max_new_tokens",
                                     "n_generated", "n_rounds", "accepted_total", "mean_acceptance_length")
                          if c in v.prompts]], "prompts")
