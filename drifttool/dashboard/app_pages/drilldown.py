"""Prompt drill-down: one sampled round's full head-mean attention rows (depth x slot) and its chain."""

import streamlit as st

from drifttool import plots
from drifttool.analysis.views import round_detail, token_decoder
from drifttool.dashboard import lib
from drifttool.errors import DriftError
from drifttool.plots.drilldown import NEWEST

st.title("Prompt drill-down")
v = lib.view()
c1, c2, c3 = st.columns(3)
series = c1.selectbox("Series", v.series, key="dd_series")
trace, drafter = v.trace_of(series)
ids = sorted(v.prompts.loc[v.prompts["series"] == series, "prompt_id"].unique())
if not ids:
    st.info("No prompt passes the current filters.")
    st.stop()
pid = c2.selectbox("Prompt", ids, key="dd_prompt")
try:
    idx = trace.rows_index()
except DriftError as e:  # a damaged rows_index/: one line, the other pages keep working
    st.error(str(e))
    st.stop()
sampled = sorted(idx.loc[(idx["drafter"] == drafter) & (idx["prompt_id"] == pid), "round"].astype(int))
if not sampled:
    cap = trace.manifest.get("capture", {})
    if cap.get("tree"):  # tree captures compute every node's row but write none (capture.full_every_note)
        st.info("A draft-tree trace writes no attention rows (every node's statistics are in the Draft trees page).")
    elif int(cap.get("keep_rows", 0) or 0) == 0:
        st.info("This capture kept no attention rows (--keep-rows 0); capture with --keep-rows N to drill down.")
    else:
        st.info(f"No attention row was sampled for this prompt (the capture kept {cap.get('keep_rows')} per prompt "
                "and drafter; rounds without drafts have none).")
    st.stop()
# the sampled round with the most accepted drafts first (a round that accepted nothing shows little of the chain)
acc = trace.table("rounds", ["drafter", "prompt_id", "round", "accepted"])
acc = acc[(acc["drafter"].astype(str) == drafter) & (acc["prompt_id"].astype(str) == str(pid))]
accepted = dict(zip(acc["round"].astype(int), acc["accepted"].astype(int)))
best = max(sampled, key=lambda r: (accepted.get(r, -1), -r))
rnd = c3.selectbox("Sampled round", sampled, index=sampled.index(best), key="dd_round",
                   format_func=lambda r: f"{r} ({accepted[r]} accepted)" if r in accepted else str(r))
try:
    row, slots = trace.attention_row(drafter, pid, rnd)
    decode = token_decoder(trace)
except DriftError as e:  # missing, corrupt or linked-out rows/ file: checked at every read
    st.error(str(e))
    st.stop()
hit = idx.loc[(idx["drafter"] == drafter) & (idx["prompt_id"] == pid) & (idx["round"] == rnd)].iloc[0]
ctx = int(hit["context_len"])
recorded = hit.get("sink_slots")  # absent in traces from before the column
sinks = plots.sink_slots(trace.manifest["capture"].get("sink"), ctx, slots, recorded)
lib.chart(plots.attention_row_heatmap(row, slots, ctx, sinks, decode,
                                          title=f"{series} / {pid} / round {rnd}: head-mean attention"),
              "attention rows")
st.caption("Green triangles: sink slots; shaded: the chain's own draft slots; crosses: each depth's query slot. "
           f"A row longer than {NEWEST} slots opens on its newest ones: double-click the chart for "
           "all of them (the sinks at the start).")
# short headings and rounded numbers: the 14 columns fit 1400 px without sideways scrolling (they overflowed by 7 px)
NUM = {"sink_mass": "sink", "self_mass": "self", "prompt_mass": "prompt", "entropy": "entropy", "rms_in": "RMS in",
       "rms_post": "RMS post"}
IDS = {"position": "pos.", "input_id": "input", "draft_id": "draft", "target_id": "target", "accepted": "acc."}
lib.table(round_detail(trace, drafter, pid, rnd, decode), "round detail", column_config={  # token text, as the notebook
    **{k: st.column_config.NumberColumn(v, format="%.3f") for k, v in NUM.items()},
    **{k: st.column_config.Column(v) for k, v in IDS.items()}})
