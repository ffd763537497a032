"""Trees: traces captured with `--tree`. One round's draft tree (nodes coloured by a mass, the accepted path in
bold) and per-depth curves split into main path, side branches and accepted path. Reads the given tree traces
itself: the other pages' filters are per chain depth."""

import streamlit as st

from drifttool import plots
from drifttool.analysis.tree_compare import tree_depth_table, tree_round
from drifttool.analysis.views import token_decoder
from drifttool.dashboard import lib
from drifttool.errors import DriftError
from drifttool.trace.describe import sink_text, tree_text
from drifttool.trace.reader import read_trace

st.title("Draft trees")
traces = []
for p in lib.trace_paths():
    try:
        t = read_trace(lib.confine(p))
    except DriftError:
        continue  # reported once by the loader above
    if t.is_tree:
        traces.append(t)
if not traces:
    st.info(
        "No tree traces given. Capture one with `drifttool capture ... --tree 'dynamic:top_k=4,depth=5,total=8'` "
        "and open it: `drifttool dashboard T.drift`."
    )
    st.stop()
names = [t.name for t in traces]
pick = st.selectbox("Trace", names, key="tree_trace")
tr = traces[names.index(pick)]
cap = tr.manifest["capture"]
st.caption(f"tree: {tree_text(cap.get('tree'))}; sink: {sink_text(cap.get('sink'))}; "
           f"drafting: {cap.get('draft_sampling', 'greedy')}")
nodes = tr.tree_nodes
c1, c2, c3, c4 = st.columns(4)
drafter = c1.selectbox("Drafter", sorted(nodes.drafter.unique()), key="tree_drafter")
sub = nodes[nodes.drafter == drafter]
prompt = c2.selectbox("Prompt", sorted(sub.prompt_id.unique()), key="tree_prompt")
rounds = sorted(int(r) for r in sub[sub.prompt_id == prompt]["round"].unique())
rnd = c3.selectbox("Round", rounds, key="tree_round")
color = c4.selectbox(
    "Colour", ["self_mass", "sink_mass", "prompt_mass", "entropy", "score"], key="tree_color"
)
fig = plots.tree_round_figure(tree_round(nodes, drafter, prompt, rnd), color, token_decoder(tr))  # token text
lib.chart(fig, "tree round")
tab = tree_depth_table(traces)
metric = st.selectbox(
    "Per-depth metric", ["self_mass", "sink_mass", "prompt_mass", "entropy", "accepted"], key="tree_metric"
)
lib.chart(plots.tree_depth_curves(tab[tab.trace == pick], metric), "tree depth curves")
st.caption(
    "main path: rank 0 at every step (what a top-1 chain would draft); side branches: some rank > 0; "
    "accepted: the target's accepted path. A node's numbers are those of the query that drafted it."
)
with st.expander("Per-depth table by branch"):
    lib.table(tab, "tree depths")
