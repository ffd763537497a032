"""Depth: attention masses, feature RMS and acceptance vs speculation depth, one line per series (95% CI)."""

import streamlit as st

from drifttool import plots
from drifttool.dashboard import lib

st.title("Depth")
v = lib.view()
lib.notes(v)
READ = st.radio("Attention", ["x uniform (lift)", "mass"], horizontal=True, key="depth_read",
                help="lift = mass / the share uniform attention over the keys the query saw would give it")
scale = st.radio("Attention-mass axes", ["fitted (sink mass on a log axis)", "full 0-1"], horizontal=True,
                 key="depth_scale") if READ == "mass" else "fitted"
POPS = {"all rounds": "all", "prefix-correct rounds (chain still right up to the depth)": "prefix_correct"}
pop = POPS[st.radio("Rounds", list(POPS), horizontal=True, key="depth_population")]
per_depth = v.per_depth_in(pop)
if v.info["trace"].nunique() > 1:  # several traces: small multiples, one panel per trace, one line per drafter
    from drifttool.analysis.compare import DEPTH_METRICS

    opts = [*DEPTH_METRICS, "acceptance_rate", "n_alpha"]
    m = st.selectbox("One panel per trace", opts, index=opts.index("self_mass"), format_func=plots.label,
                     key="depth_facet_metric")
    lib.chart(plots.metric_by_trace(per_depth, m), "depth by trace")
lib.chart(plots.acceptance_length_bars(v.summary), "mean acceptance length")
lib.chart(plots.recency_profile(per_depth), "recency profile")
st.caption("The drift verdict's quantity: attention on the j most recent keys — the depth-1 query's on prompt tokens "
           "(dotted: what recency alone gives) against the depth-(j+1) query's on its own j drafted slots (diamonds). "
           "Own drafts above the dotted line: drift; on it: recency, not drift.")
if READ == "mass":
    lib.chart(plots.depth_curves(per_depth, scale="unit" if scale == "full 0-1" else "auto"), "depth curves")
else:
    lib.chart(plots.lift_curves(per_depth), "lift curves")
lib.chart(plots.feature_rms(per_depth), "feature rms")
lib.chart(plots.acceptance_per_depth(per_depth), "acceptance per depth")
if len(per_depth) and "n_rounds" in per_depth:
    n = per_depth.groupby("depth")["n_rounds"].sum()
    st.caption("Rounds per depth in this population (all series): "
               + ", ".join(f"d{int(d)} {int(k)}" for d, k in n.items()))
st.caption(f"n_rounds: rounds of the chosen population drafting the depth (hover a point for its n); n_reached: "
           f"chains that reached it (n-alpha's n); points over fewer than {plots.MIN_N} rounds are hollow and grey. "
           "Generate mode: rounds whose chain already failed draft on wrong tokens; prefix-correct keeps the others "
           "(teacher-forced traces are on the true prefix throughout).")
with st.expander("Per-depth table"):
    lib.table(per_depth, "per depth")
with st.expander("Depth trends, paired over groups (sign-flip p, MDE at 80% power, verdict)"):
    tr = v.trends
    if len(tr):
        tr = tr[tr["population"] == pop]
    lib.table(tr, "depth trends")
