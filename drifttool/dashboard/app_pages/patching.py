"""Interventions: what each intervention of a `drifttool patch` trace changes in acceptance, per depth, paired round
by round against its clean pass (analysis/patching.py), with the answer in words."""

import pandas as pd
import streamlit as st

from drifttool import plots
from drifttool.analysis.patching import answer, effects, scan
from drifttool.dashboard import lib


@st.cache_resource(show_spinner="Pairing the interventions with their clean passes...", max_entries=8)
def _effects(path: str, mtime: float) -> tuple[list[dict], list[str], pd.DataFrame]:
    t = lib.loaded((path, mtime))
    es = effects(t)
    return es, answer(t), scan(t, es)


def _table(es: list[dict]) -> pd.DataFrame:
    rows = []
    for e in es:
        a = e["acceptance_length"]
        q = e["quantities"]
        rows.append({"drafter": e["clean"], "intervention": e["intervention"]["label"],
                     "AL clean": a.get("base_value"), "AL change": a.get("difference"),
                     "CI lo": a.get("difference_lo"), "CI hi": a.get("difference_hi"), "p": a.get("p"),
                     "MDE": a.get("mde"), "groups": a.get("n_groups"),
                     **{f"{name} (x)": (q.get(name) or {}).get("factor")
                        for name in ("recency_ratio", "sink_retention", "rms_growth")}})
    return pd.DataFrame(rows)


st.title("Interventions")
keys = st.session_state.get("patch_keys") or []
if not keys:
    st.info("No `drifttool patch` trace loaded. Run one (e.g. `drifttool patch ... --site attention.recency@2 "
            "--out runs/p.drift`, docs/patching.md) and open it: `drifttool dashboard runs/p.drift`.")
    st.stop()
labels = [lib.trace_label(lib.loaded(k)) for k in keys]
pick = st.selectbox("Patch trace", range(len(keys)), format_func=lambda i: labels[i], key="patch_trace") \
    if len(keys) > 1 else 0
es, words, spans = _effects(*keys[pick])
st.markdown("\n".join(f"- {w}" for w in words))
if len(spans):
    lib.chart(plots.span_scan(spans), "prompt spans")
    st.caption("Each span deleted from the drafter's context only (the target reads the whole prompt, so the rounds "
               "and their target tokens are the clean pass's); the change in acceptance length per group, over the "
               "groups whose prompts hold the span, with its 95% t-interval; solid: detected under Holm across "
               "the spans.")
lib.chart(plots.patch_effects(es), "interventions per depth")
st.caption("Each intervened pass drafts at its clean pass's round starts and is scored against the same target "
           "tokens, so a difference is the drafter's. Per depth: vLLM's per-position acceptance rate, intervened − "
           "clean, mean over groups with its 95% t-interval; hollow markers are not detected under Holm over depths.")
with st.expander("Per intervention: acceptance length and the verdict's quantities against the clean pass"):
    lib.table(_table(es), "interventions")
