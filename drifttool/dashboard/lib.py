"""Dashboard plumbing shared by the pages: which traces to read, cached loading/aggregation, the shared
filters (kept in st.session_state), and chart/table widgets with export buttons. Layout only: every
figure comes from drifttool.plots, every table from drifttool.analysis.views."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pandas as pd
import streamlit as st

from drifttool.analysis.views import Filters, LoadedTrace, View, build_view, load_trace
from drifttool.dashboard import url_state
from drifttool.dashboard.live import expand, is_live  # noqa: F401 - is_live: the app asks lib
from drifttool.errors import DriftError

REPO = Path(__file__).resolve().parents[2]  # a checkout's root (drifttool/dashboard/lib.py)
SAMPLES = REPO / "sample_traces"
CHAT = SAMPLES / "chat"  # the README's second suite (MT-Bench-like chat)
TREES = SAMPLES / "trees"
TRAINING = SAMPLES / "training"  # the Across-training page's checkpoint series
PATCH = SAMPLES / "patch"  # the Interventions page's `drifttool patch` traces
# The trace a view opens on when it cannot show every given trace: the README's headline suite (its answer opens
# with long code), never merely the alphabetically first.
HEADLINE = SAMPLES / "smollm2-long_code.drift"
# Show every given trace at once only while they hold at most this many series together; else the first trace
# (a selector adds the others). 24 series on one chart is a hairball, 3-6 reads at a glance.
MAX_DEFAULT_SERIES = 6


def trace_paths(argv: list[str] | None = None) -> list[Path]:
    """The trace folders named on the command line, else every sample_traces/*.drift and the README's chat trace
    (sample_traces/chat/), the bundled tree trace(s) in sample_traces/trees/ (for the Draft trees page) and
    checkpoint series in sample_traces/training/ (for the Across-training page) and `drifttool patch` traces in
    sample_traces/patch/ (for the Interventions page). Nothing else is read."""
    args = [a for a in (sys.argv[1:] if argv is None else argv) if a.strip()]
    if not args:
        return (sorted(SAMPLES.glob("*.drift")) + sorted(CHAT.glob("*.drift")) + sorted(TREES.glob("*.drift"))
                + sorted(TRAINING.glob("*.drift")) + sorted(PATCH.glob("*.drift")))
    return expand(args)


def live_signature() -> tuple:
    """What changes when a live folder gains a segment or a shard: the segments and their manifests' times."""
    return tuple(_key(p) for p in trace_paths())


def _key(p: Path) -> tuple[str, float]:
    mf = p / "manifest.json"
    try:
        return (str(p.resolve()), mf.stat().st_mtime)
    except OSError:
        return (str(p.resolve()), -1.0)


def confine(path: str | Path, given: list[Path] | None = None) -> Path:
    """`path` if it is one of the trace folders the dashboard was given and nothing in it links outside it;
    else DriftError. The loader reads nothing else: the dashboard reads only the folders it was given."""
    p = Path(path).resolve()
    if p not in {q.resolve() for q in (trace_paths() if given is None else given)}:
        raise DriftError(f"{path}: not one of the trace folders this dashboard was given; refused")
    if p.is_dir():
        for f in p.rglob("*"):
            if f.is_symlink() and not f.resolve().is_relative_to(p):
                raise DriftError(f"{f}: a link to {f.resolve()}, outside the trace folder {p}; refused")
    return p


@st.cache_resource(show_spinner=False, max_entries=32)
def _load(path: str, mtime: float) -> LoadedTrace:
    """Read + validate one trace; keyed by path and manifest mtime, so a rewritten trace is reloaded.
    A resource (shared, not copied): the tables are read-only, and cache_data would unpickle every trace on
    every call."""
    confine(path)
    return load_trace(path)


@st.cache_data(show_spinner=False, max_entries=64)
def _check(path: str, mtime: float) -> str | None:
    """None when the trace loads (warming `_load`), else the one-line reason."""
    try:
        _load(path, mtime)
    except DriftError as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - never show a stack trace for a bad file
        return f"{path}: {type(e).__name__}: {e}"
    return None


@st.cache_data(show_spinner=False, max_entries=32)
def _options(keys: tuple[tuple[str, float], ...]) -> dict:
    """Filter choices over all loaded traces: probe ids, tags, max depth, head indices."""
    traces = [_load(*k) for k in keys]
    prompts = pd.concat([t.prompts for t in traces], ignore_index=True)
    return {
        "prompts": sorted(prompts["prompt_id"].astype(str).unique()),
        "tags": sorted({x for s in prompts["tags"].dropna() for x in str(s).split(",") if x}),
        "depth": max(int(t.manifest["capture"].get("depth", 1)) for t in traces),
        "heads": sorted({int(h) for t in traces for h in t.table("head_summary", ["head"])["head"].unique()}),
        "names": [t.name for t in traces],
    }


@st.cache_resource(show_spinner="Aggregating traces...", max_entries=16)
def _view(keys: tuple[tuple[str, float], ...], f: Filters) -> View:
    """Shared across reruns and sessions (read-only): each table is aggregated once per traces + filters."""
    return build_view([_load(*k) for k in keys], f)


def load_traces() -> list[tuple[str, float]]:
    """Check every trace once (cached by path + manifest mtime); each failure is one st.error line.
    Then the sidebar's trace selector decides which of them the pages show (st.session_state.trace_keys)."""
    keys, errors = checked_traces()
    for err in errors:
        st.error(f"Trace skipped: {err}")
    chains = chain_keys(keys)
    if len(chains) < len(keys):
        st.sidebar.caption(f"{len(keys) - len(chains)} tree trace(s) loaded: see the Draft trees page.")
    patches = [k for k in chains if is_patch(k)]
    st.session_state["patch_keys"] = patches
    if patches and len(patches) < len(chains):  # the Interventions page's; the others pages' selection without them
        chains = [k for k in chains if k not in patches]
    series = [k for k in chains if _is_series(k)]
    st.session_state["series_keys"] = series
    if series and len(series) < len(chains):  # the series are the Across-training page's; the rest the others'
        st.sidebar.caption(f"{len(series)} checkpoint-series trace(s) loaded: see the Across training page.")
        chains = [k for k in chains if k not in series]
    keys = chains
    st.session_state["trace_keys"] = trace_selector(keys) if keys else []
    return st.session_state["trace_keys"]


def is_patch(key: tuple[str, float]) -> bool:
    """A `drifttool patch` trace (its manifest names the interventions)."""
    return bool(_load(*key).manifest.get("patch"))


def loaded(key: tuple[str, float]) -> LoadedTrace:
    """One checked trace (cached)."""
    return _load(*key)


def _is_series(key: tuple[str, float]) -> bool:
    """A checkpoint-series trace (`capture --drafter-series`): every drafter named VARIANT@STEP."""
    names = [d.get("name", "") for d in _load(*key).manifest.get("drafters", [])]
    return bool(names) and all("@" in n for n in names)


def series_view() -> View | None:
    """The checkpoint-series traces loaded beside the selected ones, as one view (the Across-training page's
    default when the selection holds none); None without any."""
    keys = st.session_state.get("series_keys") or []
    if not keys:
        return None
    try:
        return _view(tuple(keys), Filters())
    except DriftError as e:
        st.error(str(e))
        return None


def chain_keys(keys: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """The chain traces among `keys` (what the per-depth pages and their selector offer) when there are any; the
    tree traces beside them are the Draft trees page's own. Only tree traces given: all of them."""
    chains = [k for k in keys if not _load(*k).is_tree]
    return chains or keys


def checked_traces() -> tuple[list[tuple[str, float]], list[str]]:
    """(keys of the given traces that load, in order; one reason per trace that does not or is given twice)."""
    keys, errors = [], []
    for p in trace_paths():
        k = _key(p)
        err = f"{p}: given twice; shown once" if k in keys else _check(*k)
        if err:
            errors.append(err)
        else:
            keys.append(k)
    return keys, errors


def default_selection(n_series: list[int], paths: list[str] | None = None) -> list[int]:
    """Indices of the traces shown first: all of them while they hold <= MAX_DEFAULT_SERIES series together,
    else one (one trace = one target x suite, all its drafters): the README's headline trace (HEADLINE) when it
    is among `paths`, else the first."""
    if not n_series:
        return []
    if sum(n_series) <= MAX_DEFAULT_SERIES:
        return list(range(len(n_series)))
    head = HEADLINE.resolve()
    return [next((i for i, p in enumerate(paths or []) if Path(p).resolve() == head), 0)]


def _default_of(keys: list[tuple[str, float]]) -> list[int]:
    return default_selection([len(_load(*k).manifest["drafters"]) for k in keys], [p for p, _ in keys])


def trace_label(t: LoadedTrace) -> str:
    """'name (suite, N drafters[, mode])', the suite left out where the name holds it: the pages' first line."""
    from drifttool.analysis.compare import suite_name

    cap = t.manifest["capture"]
    mode = "" if cap.get("mode", "generate") == "generate" else f", {cap.get('mode')}"
    suite = suite_name(t)
    where = "" if suite in t.name else f"{suite}, "
    return f"{t.name} ({where}{len(t.manifest['drafters'])} drafters{mode})"


def common_prefix(names: list[str]) -> str:
    """The start all `names` share up to a '-' or '_' ('smollm2-'), '' for fewer than two names or none."""
    if len(names) < 2:
        return ""
    head = os.path.commonprefix(names)
    cut = max(head.rfind("-"), head.rfind("_"))
    return head[:cut + 1] if cut >= 0 and all(len(n) > cut + 1 for n in names) else ""


def _names_labels(keys: list[tuple[str, float]]) -> tuple[list[str], list[str]]:
    """Per loaded trace: its folder name (what a link names) and its selector label: the name without the start
    every loaded trace shares ('smollm2-'), the mode when not generate. The sidebar's chip is ~130 px wide and
    cut 'smollm2-agent_traces (agent_traces, 3 drafters)' to 'smollm2-agent_tra...'; the pages name them whole."""
    traces = [_load(*k) for k in keys]
    cut = len(common_prefix([t.name for t in traces]))
    modes = [t.manifest["capture"].get("mode", "generate") for t in traces]
    labels = [t.name[cut:] + ("" if m == "generate" else f" ({m})") for t, m in zip(traces, modes)]
    if len(set(labels)) < len(labels):  # same folder name in two places: tell them apart by their parent folder
        labels = [f"{lab} in {t.path.parent}" for lab, t in zip(labels, traces)]
    return [t.name for t in traces], labels


def _default_labels(keys: list[tuple[str, float]], labels: list[str]) -> list[str]:
    return [labels[i] for i in _default_of(keys)]


def trace_selector(keys: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """Sidebar multiselect of the loaded traces (default: see default_selection); returns the chosen keys."""
    names, labels = _names_labels(keys)
    url_state.read(st.query_params, st.session_state, names, labels, _options(tuple(keys)))
    if len(keys) == 1:
        return keys
    if "flt_traces" not in st.session_state or not set(st.session_state["flt_traces"]) <= set(labels):
        st.session_state["flt_traces"] = _default_labels(keys, labels)
    sb = st.sidebar
    sb.header("Traces")
    chosen = sb.multiselect("Traces shown", labels, key="flt_traces", placeholder="pick one or more traces")
    prefix = common_prefix(names)
    sb.caption(f"{len(keys)} traces loaded" + (f" (names without their common {prefix!r})" if prefix else "")
               + ". Each chart draws one colour per drafter (EAGLE-3 blue, EAGLE-3.1 "
               "vermillion, what-if green dashed) and one marker per trace. Compare drafters within one suite; "
               "add traces of other suites to compare suites.")
    return [keys[labels.index(c)] for c in chosen]


FILTERS = ("probes", "tags", "depth", "heads")  # the sidebar's filters, by the name a page declares it uses
_FILTER_KEYS = {"probes": "flt_prompts", "tags": "flt_tags", "depth": "flt_depth", "heads": "flt_heads"}


def sidebar_filters(keys: list[tuple[str, float]], used: tuple[str, ...] = FILTERS) -> None:
    """The filters the current page uses (`used`, of FILTERS) in the sidebar; values persist in st.session_state
    across pages, the hidden ones too (a widget not drawn in a run would lose its value)."""
    o = _options(tuple(keys))
    sb = st.sidebar
    for name in FILTERS:
        k = _FILTER_KEYS[name]
        if name not in used and k in st.session_state:
            st.session_state[k] = st.session_state[k]  # keeps the value of a filter this page hides
    if not used:
        return
    sb.header("Filters")
    if "probes" in used:
        sb.multiselect("Probes", o["prompts"], key="flt_prompts", placeholder="all probes")
    if "tags" in used:
        sb.multiselect("Tags (any of)", o["tags"], key="flt_tags", placeholder="all tags")
    k = o["depth"]
    if k > 1:
        if "flt_depth" not in st.session_state:  # set here, not as the widget's value, so a link's range may set it
            st.session_state["flt_depth"] = initial_filters(k).depth_range
        if "depth" in used:
            sb.slider("Depth range", 1, k, key="flt_depth")
    if "heads" in used:
        sb.multiselect("Heads", o["heads"], key="flt_heads", placeholder="all heads")
    hidden = [n for n in FILTERS if n not in used]
    sb.caption(f"showing {len(keys)} trace(s): " + ", ".join(o["names"])
               + (f". Not used on this page: {', '.join(hidden)}." if hidden else ""))


def sync_url(keys: list[tuple[str, float]]) -> None:
    """Write the current traces and filters into the URL (dashboard/url_state.py)."""
    names, labels = _names_labels(keys)
    shown = st.session_state.get("trace_keys") or keys
    url_state.write(st.query_params, st.session_state, names, labels, _options(tuple(shown))["depth"],
                    _default_labels(keys, labels))


def initial_filters(depth: int) -> Filters:
    """What a fresh session filters by: everything, depths 1..K (the slider's start) when K > 1."""
    return Filters((), (), (1, depth) if depth > 1 else None, ())


def warm() -> None:
    """Fill the shared caches a fresh session's first page reads: every given trace, then the default
    selection's view under the initial filters. Run by the server process before a browser asks
    (drifttool/dashboard/serve.py); a trace that fails is skipped here and reported by the page."""
    keys = chain_keys(checked_traces()[0])
    if keys:
        shown = [keys[i] for i in _default_of(keys)]
        _view(tuple(shown), initial_filters(_options(tuple(shown))["depth"]))


def filters() -> Filters:
    s = st.session_state
    d = s.get("flt_depth")
    return Filters(tuple(s.get("flt_prompts") or ()), tuple(s.get("flt_tags") or ()),
                   tuple(d) if d else None, tuple(int(h) for h in s.get("flt_heads") or ()))


def view() -> View:
    """The current view (all traces, current filters); stops the page with a message when there is none."""
    keys = st.session_state.get("trace_keys") or []
    if not keys:
        if st.session_state.get("flt_traces") == []:
            st.info("No trace selected: pick one under Traces in the sidebar.")
        else:
            st.info(f"No trace to show. Run `drifttool dashboard A.drift [B.drift ...]`, or put traces in {SAMPLES}.")
        st.stop()
    f = filters()
    try:
        return _view(tuple(keys), f)
    except DriftError as e:
        st.error(str(e))
        st.stop()


def shown_traces() -> str:
    """The selected traces named whole, with their suite and drafters, for a page's first line."""
    keys = st.session_state.get("trace_keys") or []
    return "; ".join(trace_label(_load(*k)) for k in keys)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower() or "chart"


def chart(fig, name: str) -> None:
    """A plotly chart (modebar PNG export) plus a self-contained HTML download."""
    slug = _slug(name)
    st.plotly_chart(fig, key=f"chart_{slug}", theme=None, config={
        "displaylogo": False, "toImageButtonOptions": {"format": "png", "filename": slug, "scale": 2}})
    st.download_button("Download chart (HTML)", lambda: fig.to_html(include_plotlyjs=True, full_html=True),
                       file_name=f"{slug}.html", mime="text/html", key=f"html_{slug}", on_click="ignore")


def table(df: pd.DataFrame, name: str, **kw) -> None:
    """A dataframe plus a CSV download."""
    slug = _slug(name)
    st.dataframe(df, hide_index=True, key=f"table_{slug}", **kw)
    st.download_button("Download table (CSV)", lambda: df.to_csv(index=False), file_name=f"{slug}.csv",
                       mime="text/csv", key=f"csv_{slug}", on_click="ignore")


def notes(v: View) -> None:
    """Reserve the notes' place at the top of the page; `fill_notes` (the entry script, after the page ran)
    writes them there, so a non-finite-value note covers every column the page read, not only the first page's."""
    st.session_state["_notes_slot"] = (st.container(), v)


def fill_notes() -> None:
    slot, v = st.session_state.pop("_notes_slot", (None, None))
    if slot is None:
        return
    with slot:
        for n in v.notes:
            (st.error if n.startswith("FLAGGED") else st.warning)(n)
