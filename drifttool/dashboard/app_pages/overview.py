"""Overview: the verdict in words, then one compact headline table (acceptance, sink and self mass, fed-back
RMS at depth 1 and K), then the series' identity; details and prompts folded. Tables only, so the first page
draws without the plotting library (its 4.7 MB bundle costs 1.5-2 s cold; the chart pages load it)."""

import streamlit as st

from drifttool.dashboard import lib

st.title("Overview")
v = lib.view()
st.caption(f"Traces shown: {lib.shown_traces()}")  # whole: the sidebar's chips cut long names
lib.notes(v)
answer = v.answer
if answer:  # the answer first: does EAGLE-3 drift, does the other drafter change it
    st.subheader("The answer")
    st.markdown("\n".join(f"- {x}" for x in answer))
    st.caption("The drift verdict: own drafts at depth K against what equally recent prompt tokens drew at depth 1 "
               "(the recency-matched ratio; > 1: drift). lift = attention mass / the share uniform attention over the "
               "keys the query saw would give it (1.0 = no more than uniform). Every word and p from a paired test "
               "over groups (source documents); 95% CIs from a group bootstrap.")
lines = v.verdict
if lines:
    st.subheader("In short")
    st.markdown("\n".join(f"- {x}" for x in lines))
    st.caption("Acceptance length against the EAGLE-3 series, paired over groups (source documents) with a sign-flip "
               "test and its minimum detectable effect; depth trends with the same statistics are on the Depth page.")
st.subheader("At a glance")
g = v.glance
lib.table(g, "at a glance")
st.caption("verdict: drift / no drift / not established / uniform. AL: mean acceptance length (tokens per round). "
           "own/recent: attention on the drafter's own slots at depth K over what equally recent prompt tokens got at "
           "depth 1 (> 1: drift). sink lift d1: depth-1 sink mass x uniform (above 1: a sink to lose); sink kept: sink "
           "mass at depth K / depth 1. RMS dK/d1: the fed-back layer input's growth (EAGLE-3 leaves it "
           "un-normalised). Ratios pooled over rounds, [95% CI] over groups; none below 6 groups.")
st.subheader("Series")
info = v.info
short = info[[c for c in ("series", "variant", "flags_on", "layout", "overrides", "status", "mode") if c in info]]
lib.table(short, "series")
with st.expander("Details: checkpoints, every flag, assumptions, all acceptance definitions"):
    lib.table(info.drop(columns=["path"]), "series details")
    st.caption("lift = mass / its uniform share (1.0 = no more than uniform attention over the keys seen); "
               "recency_ratio = own drafts at depth K / equally recent prompt tokens at depth 1 (the drift verdict's "
               "quantity); self_lift / self_lift_trend: descriptive only (their null is uniform attention); "
               "sink_lift_d1 = depth-1 sink lift; feature growth = RMS(layer input) at depth K / depth 1; "
               "sink retention = sink mass at depth K / depth 1, left empty when the depth-1 sink mass is below "
               "0.001 (no sink to retain).")
    lib.table(v.summary, "summary")
with st.expander("Prompts"):
    lib.table(v.prompts[[c for c in ("series", "prompt_id", "group", "tags", "prompt_len", "max_new_tokens",
                                         "n_generated", "n_rounds", "accepted_total", "mean_acceptance_length")
                              if c in v.prompts]], "prompts")
