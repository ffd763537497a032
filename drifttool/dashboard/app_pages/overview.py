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
    st.caption("lift = attention mass / the share uniform attention over the keys the query saw would give it (1.0 = "
               "no more than uniform); self lift trend = self lift at depth K / depth 2 over the same rounds (> 1: "
               "drift). Paired over groups (source documents); 95% CIs from a group bootstrap.")
lines = v.verdict
if lines:
    st.subheader("In short")
    st.markdown("\n".join(f"- {x}" for x in lines))
    st.caption("Acceptance length against the EAGLE-3 series, paired over groups (source documents) with a sign-flip "
               "test and its minimum detectable effect; depth trends with the same statistics are on the Depth page.")
st.subheader("At a glance")
g = v.glance
fmt = {c: st.column_config.NumberColumn(c, format="%.3f") for c in g.columns
       if c not in ("series", "AL [95% CI]", "groups")}
lib.table(g, "at a glance", column_config=fmt)
st.caption("AL: mean acceptance length (tokens per round). Means over rounds, by depth (d1, dK): sink = attention "
           "mass on the sink positions; self = on the chain's own drafted slots; RMS = the drafter layer's input "
           "(depth 1: fc of the target features; deeper: the fed-back hidden, which EAGLE-3 leaves un-normalised). "
           "No CI below 6 groups.")
st.subheader("Series")
info = v.info
short = info[[c for c in ("series", "variant", "flags_on", "layout", "overrides", "status", "mode") if c in info]]
lib.table(short, "series")
with st.expander("Details: checkpoints, every flag, assumptions, all acceptance definitions"):
    lib.table(info.drop(columns=["path"]), "series details")
    st.caption("lift = mass / its uniform share (1.0 = no more than uniform attention over the keys seen); "
               "self_lift = mean self lift over depths 2..K; self_lift_trend = self lift at depth K / depth 2 (> 1: "
               "drift); sink_lift_d1 = depth-1 sink lift; feature growth = RMS(layer input) at depth K / depth 1; "
               "sink retention = sink mass at depth K / depth 1, left empty when the depth-1 sink mass is below "
               "0.001 (no sink to retain).")
    lib.table(v.summary, "summary")
with st.expander("Prompts"):
    lib.table(v.prompts[[c for c in ("series", "prompt_id", "group", "tags", "prompt_len", "max_new_tokens",
                                         "n_generated", "n_rounds", "accepted_total", "mean_acceptance_length")
                              if c in v.prompts]], "prompts")
