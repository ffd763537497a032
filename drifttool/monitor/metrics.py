"""The monitor's Prometheus metrics: the replay process and the worker keep `Aggregates` (counters, gauges and
fixed-bucket histograms, labelled by model_name / engine / drafter / depth / context bucket, never by prompt content
or request id) and write them as atomic JSON snapshots under DIR/metrics/; in the API server a `Collector` sums the
current run's snapshots at scrape time, so drifttool's series appear on vLLM's own /metrics beside
`vllm:spec_decode_*`. Per-depth values come from the very `depths` table a trace stores (lifts derived as the trace
reader derives them), so a live series equals an offline capture of the same requests.

Which per-depth series exist is the metric table's decision (trace/metric_table.py, `Metric.live`): a metric marked
"lift" is exported as a histogram of its lift, one marked "sum" as a counter of its summed mass per depth and
context-length bucket (the recency-matched ratio and the sink retention are ratios of these sums, as the offline
verdict computes them). The masses' own histograms are not exported: each duplicated its lift."""

from __future__ import annotations

import json
import math
import os
import re
import stat
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..trace import metric_table

PREFIX = "drifttool:"
BASE_LABELS = ("model_name", "engine", "drafter")  # vLLM's own label names for the model and the engine index
LIFT_BUCKETS = tuple(2.0 ** i for i in range(-3, 9))  # 0.125 .. 256: below uniform to a sink's hundreds
RMS_BUCKETS = tuple(round(0.5 * 1.3 ** i, 3) for i in range(17))  # 0.5 .. 33, steps of 30 % (EAGLE-3: 9-13)
LAG_BUCKETS = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0)
CONTEXT_BUCKETS = (1024, 2048, 4096, 8192, 16384)  # upper bounds (tokens) of the context-length label's buckets


def context_labels() -> tuple[str, ...]:
    """The context label's values: "0-1k", "1k-2k", ..., "16k+" (bounded: one per bucket)."""
    k = [b // 1024 for b in CONTEXT_BUCKETS]
    return (f"0-{k[0]}k", *(f"{a}k-{b}k" for a, b in zip(k, k[1:])), f"{k[-1]}k+")


def context_bucket(n: np.ndarray) -> np.ndarray:
    """Each context length's label (a context of exactly 1024 tokens is in "0-1k")."""
    idx = np.searchsorted(np.asarray(CONTEXT_BUCKETS), np.asarray(n, dtype=np.float64), side="left")
    return np.asarray(context_labels(), dtype=object)[idx]


CONTEXT_HELP = (f"The context label buckets the round's context length in tokens ({', '.join(context_labels())}); "
                "compare it with the drafter's trained window (the segments' manifest).")


def _lift_help(m: metric_table.Metric) -> str:
    return (f"The {m.lift.replace('_', ' ')} per drafted token at this depth: {m.what}, over its uniform share "
            "(1 = uniform attention).")


def per_depth() -> dict[str, tuple[str, tuple[float, ...], str]]:
    """depths-table column -> (exported histogram name, buckets, HELP): the metric table's "lift" and "value" series,
    and the fed-back RMS (a hidden-state magnitude, not a per-head metric: the one series outside the table)."""
    out = {m.lift: (m.lift, LIFT_BUCKETS, _lift_help(m)) for m in metric_table.METRICS if "lift" in m.live}
    out["rms_in"] = ("fed_back_rms", RMS_BUCKETS, "The RMS of the drafter layer's input per drafted token: at depth 1 "
                     "fc of the target's features, deeper the fed-back hidden state (EAGLE-3 feeds back the raw "
                     "residual, EAGLE-3.1 the normalised one).")
    out.update({m.name: (f"attention_{m.name}", m.buckets, f"The head-mean {m.label} per drafted token: {m.what}"
                         f"{' (full rounds only)' if m.kind == 'row' else ''}.")
                for m in metric_table.METRICS if "value" in m.live})
    return out


def summed() -> tuple[str, ...]:
    """The masses exported as per-depth sums (`attention_mass_total{keys=...}`), from the metric table."""
    return tuple(m.name for m in metric_table.METRICS if "sum" in m.live)


# a mass and its null (Metric.null) are summed over the same rows (both finite): their ratio is the raw RM(k)
PAIRED = tuple(dict.fromkeys(x for pair in metric_table.paired().items() for x in pair))
# the verdict's RM(k) reads non-sink shares (analysis/nonsink.py), computed from each request's per-head rows and
# summed over the same rows: rate(self_nonsink) / rate(matched_nonsink) is the recency-matched ratio
NONSINK = {"self_ns": "self_nonsink", "matched_ns": "matched_nonsink"}


def _keys_help() -> str:
    """The `keys` label's values in words: the metric table's summed masses, then the non-sink shares."""
    parts = [f"keys={m.name.removesuffix('_mass')}: {m.what.split(' (')[0]}" for m in metric_table.METRICS
             if "sum" in m.live]
    stems = " and ".join(k.removesuffix("_nonsink") for k in NONSINK.values())
    return "; ".join([*parts, f"keys={' / '.join(NONSINK.values())}: the {stems} masses renormalised over each head's "
                      "non-sink keys, per draft"])


COUNTERS = {
    "samples": "Requests the monitor sampled (chosen by a hash of their id).",
    "samples_dropped": "Sampled requests dropped before replay, by reason: queue_full, spool_full, disk_full, "
                       "permission, write_error (any other write failure), record_error.",
    "requests_skipped": "Requests sampled but not recordable (no prompt token ids, e.g. prompt embeddings).",
    "replayed": "Requests this run sampled and replayed into the trace segments (never more than samples_total; an "
                "earlier run's requests replayed at this start: leftovers_replayed).",
    "leftovers_replayed": "Requests an earlier run of the server spooled but never replayed (a restart or SIGTERM), "
                          "replayed at this start.",
    "leftovers_dropped": "Requests an earlier run spooled beyond the spool bound, removed at this start unreplayed.",
    "replay_errors": "Sampled requests whose replay failed (the request itself was served).",
    "replay_quarantined": "Sampled requests that could not be replayed (meta, events, replay or shard), moved to "
                          "DIR/spool/RUN/quarantine/ (the newest 64 kept).",
    "replay_write_errors": "Segment writes that failed, by reason (disk_full, permission, write_error); "
                           "the request stays spooled and is retried when the cause goes (snapshot writes: "
                          "snapshot_write_errors).",
    "replay_lag_clamped": "Replays whose request ended after the replay by the monitor's clock (the worker's clock "
                          "ahead), so the lag was observed as 0.",
    "snapshot_write_errors": "Metrics snapshot (heartbeat) writes that failed, by process and reason (disk_full, "
                             "permission, write_error): no request is lost; meanwhile the snapshot is kept in "
                             "memory-backed storage, so these series keep moving while the disk is full.",
    "replay_disagreements": "Replays that did not reproduce vLLM's drafter within tolerance (the segment is "
                            "flagged).",
    "rounds": "Drafted rounds of the replayed requests.",
    "drafts": "Drafts at this depth in the replayed requests' rounds. " + CONTEXT_HELP,
    "draft_accepted": "Drafts accepted at this depth by vLLM's verifier (at sample=1 the sum over context buckets "
                      "equals vLLM's per-position count). " + CONTEXT_HELP,
    "attention_mass": "Attention mass summed over the drafted tokens at this depth, per key set (" + _keys_help() +
                      "). self_nonsink and matched_nonsink are summed over the same rows (depth >= 2), so "
                      "rate(self_nonsink)/rate(matched_nonsink) is the recency-matched ratio the verdict reads (> 1: "
                      "drift; a fading sink cancels out); sink at depth K over sink at depth 1, each per draft, is the "
                      "sink retention. " + CONTEXT_HELP,
}
GAUGES = {
    "heartbeat_timestamp_seconds": "When the monitor's process last wrote its snapshot (unix seconds; process=worker "
                                   "every second, process=replay every few seconds): an old value while vLLM serves "
                                   "means the monitor stalled or died.",
    "last_spool_write_timestamp_seconds": "When the worker last spooled a sampled request (unix seconds; 0: none "
                                          "yet).",
    "last_replay_timestamp_seconds": "When the replay last wrote a request into a segment (unix seconds; 0: none "
                                     "yet).",
}
SKIPPED_HELP = ("Files in DIR/metrics/ skipped at this scrape because they are not drifttool snapshots (not JSON, "
                "wrong fields, other buckets); the other files' series are still shown.")
OTHER_HISTOGRAMS = {"replay_lag_seconds": (LAG_BUCKETS, "Seconds from a request's end to its replay's end (this "
                                                        "run's requests; leftovers of earlier runs are not "
                                                        "observed).")}
PER_DEPTH_COUNTERS = ("drafts", "draft_accepted")
REASON_COUNTERS = ("samples_dropped", "requests_skipped", "replay_write_errors")
WRITE_REASONS = ("disk_full", "permission", "write_error")  # write_reason's labels


def write_reason(e: BaseException) -> str:
    """A write failure's reason label: disk_full (ENOSPC, EDQUOT), permission (EACCES, EPERM, EROFS), else
    write_error (another OSError, or a library's own exception such as safetensors')."""
    import errno

    code = getattr(e, "errno", None)
    if code in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)) or "No space left" in str(e):
        return "disk_full"
    if code in (errno.EACCES, errno.EPERM, errno.EROFS) or "Permission denied" in str(e):
        return "permission"
    return "write_error"


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # cumulative, one per bucket, then +Inf
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = self.counts or [0] * (len(self.buckets) + 1)

    def observe_many(self, values: np.ndarray) -> None:
        v = np.asarray(values, dtype=np.float64)
        v = v[np.isfinite(v)]
        if not len(v):
            return
        self.counts = [c + int((v <= b).sum()) for c, b in zip(self.counts, (*self.buckets, math.inf))]
        self.total += float(v.sum())
        self.n += len(v)


Labels = tuple[tuple[str, str], ...]


@dataclass
class Aggregates:
    """Counters, gauges and histograms of one writer (the worker or the replay process), keyed by (name, labels)."""

    counters: dict[tuple[str, Labels], float] = field(default_factory=dict)
    gauges: dict[tuple[str, Labels], float] = field(default_factory=dict)
    histograms: dict[tuple[str, Labels], Histogram] = field(default_factory=dict)

    def inc(self, name: str, labels: dict[str, str], by: float = 1.0) -> None:
        key = (name, _labels(labels))
        self.counters[key] = self.counters.get(key, 0.0) + by

    def set(self, name: str, labels: dict[str, str], value: float) -> None:
        self.gauges[(name, _labels(labels))] = float(value)

    def observe(self, name: str, labels: dict[str, str], values, buckets: tuple[float, ...]) -> None:
        h = self.histograms.setdefault((name, _labels(labels)), Histogram(buckets))
        h.observe_many(np.atleast_1d(values))

    def zero_depths(self, labels: dict[str, str], depth: int) -> None:
        """Every per-depth series of depths 1..`depth` present at 0 (vLLM creates its per-position counters at 0
        too: a rate() needs the series before the first increment)."""
        for d in range(1, depth + 1):
            lab = {**labels, "depth": str(d)}
            for name, buckets, _ in per_depth().values():
                self.observe(name, lab, [], buckets)
            for ctx in context_labels():
                c = {**lab, "context": ctx}
                for name in PER_DEPTH_COUNTERS:
                    self.inc(name, c, 0)
                for mass in summed():
                    self.inc("attention_mass", {**c, "keys": mass.removesuffix("_mass")}, 0)
                if d >= 2:
                    for key in NONSINK.values():
                        self.inc("attention_mass", {**c, "keys": key}, 0)

    def add_request(self, depths: pd.DataFrame, labels: dict[str, str], heads: pd.DataFrame | None = None) -> None:
        """One replayed request's depth rows (the trace's `depths` table, lifts derived): per depth, every exported
        metric's values into its histogram; per depth and context bucket the drafts, accepted and summed masses,
        and, from its per-head rows (`heads`), the non-sink own-slot and control shares the verdict's RM reads."""
        depths = with_lifts(depths)
        if heads is not None and len(depths):
            from ..analysis.nonsink import with_nonsink

            depths = with_nonsink(depths, heads)
        self.inc("rounds", labels, float(depths["round"].nunique()) if len(depths) else 0.0)
        if depths.empty:
            return
        ctx = context_bucket(depths["context_len"].to_numpy()) if "context_len" in depths else \
            np.full(len(depths), context_labels()[0], dtype=object)
        depths = depths.assign(_ctx=ctx)
        paired = np.ones(len(depths), dtype=bool)
        for col in PAIRED:
            paired &= np.isfinite(depths[col].to_numpy(np.float64)) if col in depths else False
        depths = depths.assign(_paired=paired)
        for d, rows in depths.groupby("depth"):
            lab = {**labels, "depth": str(int(d))}
            for col, (name, buckets, _) in per_depth().items():
                if col in rows:
                    self.observe(name, lab, rows[col].to_numpy(np.float64), buckets)
            for c, part in rows.groupby("_ctx"):
                cl = {**lab, "context": str(c)}
                self.inc("drafts", cl, float(len(part)))
                self.inc("draft_accepted", cl, float(part["accepted"].astype(bool).sum()))
                for mass in summed():
                    if mass not in part:
                        continue
                    use = part[part["_paired"]] if mass in PAIRED else part
                    v = use[mass].to_numpy(np.float64)
                    self.inc("attention_mass", {**cl, "keys": mass.removesuffix("_mass")},
                             float(v[np.isfinite(v)].sum()))
                if d >= 2 and all(c in part for c in NONSINK):
                    a, b = (part[c].to_numpy(np.float64) for c in NONSINK)
                    both = np.isfinite(a) & np.isfinite(b)
                    for col, v in zip(NONSINK.values(), (a, b)):
                        self.inc("attention_mass", {**cl, "keys": col}, float(v[both].sum()))

    def to_json(self) -> dict:
        return {"counters": [{"name": n, "labels": dict(lab), "value": v} for (n, lab), v in self.counters.items()],
                "gauges": [{"name": n, "labels": dict(lab), "value": v} for (n, lab), v in self.gauges.items()],
                "histograms": [{"name": n, "labels": dict(lab), "buckets": list(h.buckets), "counts": h.counts,
                                "sum": h.total, "count": h.n} for (n, lab), h in self.histograms.items()]}

    def write(self, path: Path) -> None:
        """Atomically (a scrape never reads half a file); a failed write leaves no temporary file behind."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(self.to_json()))
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def write_kept(self, path: Path) -> Exception | None:
        """`write`, and where it fails (a full disk) the same snapshot into the folder's mirror on memory-backed
        storage (`mirror_dir`), which the scrape reads too: /metrics keeps moving while the disk is full. Returns
        the failure (None on success, when the mirror's stale copy is removed). Never raises."""
        mirror = mirror_dir(path.parent)
        try:
            self.write(path)
        except Exception as e:  # noqa: BLE001 - counted by the caller, never fatal
            if mirror is not None:
                try:
                    _private(mirror)
                    self.write(mirror / path.name)
                except Exception:  # noqa: BLE001 - no mirror either: the next write tries again
                    pass
            return e
        if mirror is not None:
            try:
                (mirror / path.name).unlink(missing_ok=True)
            except OSError:
                pass
        return None


def _labels(labels: dict[str, str]) -> Labels:
    return tuple(sorted((str(k), str(v)) for k, v in labels.items()))


def with_lifts(depths: pd.DataFrame) -> pd.DataFrame:
    """The depth rows with their lifts, derived exactly as the trace reader derives them (trace.layout)."""
    import pyarrow as pa

    from ..trace.layout import add_derived

    if depths.empty:
        return depths
    tbl = add_derived("depths", pa.Table.from_pandas(depths, preserve_index=False), None)
    return tbl.to_pandas()


def merged(snapshots: Iterable[dict], bad: list | None = None) -> Aggregates:
    """The sum of several writers' snapshots (same name and labels add up; a gauge takes the latest, i.e. the
    largest). A snapshot whose histogram has other buckets than the same series so far is left out whole
    (appended to `bad`): adding its counts would mis-sum."""
    out = Aggregates()
    for snap in snapshots:
        hs = snap.get("histograms", [])
        if any(tuple(h["buckets"]) != out.histograms[k].buckets for h in hs
               if (k := (h["name"], _labels(h["labels"]))) in out.histograms):
            if bad is not None:
                bad.append(snap)
            continue
        for c in snap.get("counters", []):
            out.inc(c["name"], c["labels"], c["value"])
        for g in snap.get("gauges", []):
            key = (g["name"], _labels(g["labels"]))
            out.gauges[key] = max(out.gauges.get(key, 0.0), float(g["value"]))
        for h in hs:
            mine = out.histograms.setdefault((h["name"], _labels(h["labels"])), Histogram(tuple(h["buckets"])))
            mine.counts = [a + b for a, b in zip(mine.counts, h["counts"])]
            mine.total += h["sum"]
            mine.n += h["count"]
    return out


_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _series_ok(e) -> bool:
    return (isinstance(e, dict) and isinstance(e.get("name"), str) and bool(_NAME.match(e["name"]))
            and isinstance(e.get("labels"), dict)
            and all(isinstance(k, str) and _NAME.match(k) and isinstance(v, str) for k, v in e["labels"].items()))


def _histogram_ok(h) -> bool:
    b, c = h.get("buckets"), h.get("counts")
    return (isinstance(b, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                                        for x in b) and b == sorted(set(b))
            and isinstance(c, list) and len(c) == len(b) + 1 and all(isinstance(x, int) and _num(x) for x in c)
            and _num(h.get("sum")) and isinstance(h.get("count"), int) and _num(h["count"]))


def snapshot_ok(snap) -> bool:
    """A metrics snapshot as Aggregates.write writes it: an object of counters, gauges and histograms, every name and label
    a Prometheus name, every number finite and >= 0, every histogram's counts one per bucket and +Inf."""
    if not isinstance(snap, dict):
        return False
    cs, gs, hs = snap.get("counters", []), snap.get("gauges", []), snap.get("histograms", [])
    if not (isinstance(cs, list) and isinstance(gs, list) and isinstance(hs, list)
            and all(_series_ok(c) and _num(c.get("value")) for c in cs)
            and all(_series_ok(g) and _num(g.get("value")) for g in gs)
            and all(_series_ok(h) and _histogram_ok(h) for h in hs)):
        return False
    names = [{e["name"] for e in group} for group in (cs, gs, hs)]
    return not (names[0] & names[1] or names[0] & names[2] or names[1] & names[2])


MAX_SNAPSHOT = 64 << 20  # bytes: a snapshot is a few KiB; a larger file is no snapshot


def _read_plain(f: Path):
    """A regular file's JSON, never through a link (a link planted in the folder is not followed): ValueError for
    anything else."""
    if f.is_symlink():
        raise ValueError(f"{f}: a link")
    fd = os.open(f, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SNAPSHOT:
            raise ValueError(f"{f}: not a regular file of at most {MAX_SNAPSHOT} bytes")
        return json.loads(fh.read())


def mirror_dir(folder: Path) -> Path | None:
    """Where a snapshot of the metrics folder `folder` goes while `folder` cannot be written: a private folder on
    memory-backed storage ($XDG_RUNTIME_DIR, else /dev/shm), one per metrics folder; None where neither exists."""
    import hashlib

    base = os.environ.get("XDG_RUNTIME_DIR") or "/dev/shm"
    if not os.path.isdir(base):
        return None
    key = hashlib.sha256(str(Path(folder).absolute()).encode()).hexdigest()[:16]
    return Path(base) / f"drifttool-{os.getuid()}" / key


def _private(mirror: Path) -> None:
    """The mirror and its parent made, owner-only; refused when another user owns the parent (a shared /dev/shm)."""
    for d in (mirror.parent, mirror):
        d.mkdir(mode=0o700, exist_ok=True)
        st = d.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise PermissionError(f"{d}: not a folder of this user")


def _snapshot_files(folder: Path, run: str) -> list[Path]:
    """The run's snapshot files in `folder` and its mirror: per file name the newer of the two (the mirror holds
    the counts written while the disk was full)."""
    pattern = f"{run}-*.json" if run else "*.json"
    found: dict[str, Path] = {}
    mirror = mirror_dir(folder)
    for d in (folder, mirror):
        if d is None or not d.is_dir():
            continue
        for f in d.glob(pattern):
            try:
                if f.name not in found or f.stat().st_mtime > found[f.name].stat().st_mtime:
                    found[f.name] = f
            except OSError:
                continue  # removed between listing and reading
    return [found[k] for k in sorted(found)]


STALE_S = 3600.0  # a live process rewrites its snapshot every few seconds: one untouched this long is a past run's


def prune_snapshots(folder: Path, now: float | None = None) -> list[Path]:
    """Remove the snapshot files (in the metrics folder and its mirror) no process has written for STALE_S: past
    runs' files, which would otherwise pile up forever. Returns what was removed; never raises."""
    now = time.time() if now is None else now
    gone = []
    for d in (Path(folder), mirror_dir(Path(folder))):
        if d is None or not d.is_dir():
            continue
        for f in d.glob("*.json"):
            try:
                if f.is_file() and not f.is_symlink() and now - f.stat().st_mtime > STALE_S:
                    f.unlink()
                    gone.append(f)
            except OSError:
                continue
    return gone


def read_snapshots(folder: Path, run: str = "", bad: list | None = None) -> list[dict]:
    """The snapshots of one server run (`RUN-worker.json`, `RUN-replay.json`), or of every run, from the metrics
    folder or, where newer, its mirror. A file that is not a snapshot (not JSON, a list, wrong fields) is skipped
    and appended to `bad`: one file never breaks a scrape."""
    out = []
    for f in _snapshot_files(Path(folder), run):
        try:
            snap = _read_plain(f)
        except OSError:
            continue  # removed between listing and reading: the next scrape has it
        except ValueError:
            snap = None
        if snapshot_ok(snap):
            out.append(snap)
        elif bad is not None:
            bad.append(f)
    return out


def helps() -> dict[str, str]:
    out = {name: h for name, _, h in per_depth().values()}
    out.update(COUNTERS)
    out.update(GAUGES)
    out.update({k: h for k, (_, h) in OTHER_HISTOGRAMS.items()})
    return out


class Collector:
    """A prometheus_client collector over DIR/metrics/: every scrape sums the snapshots there."""

    def __init__(self, folder: Path, run: str = ""):
        self.folder, self.run = Path(folder), run

    def collect(self):
        """The summed series, and how many files were skipped; whatever goes wrong, never an exception into the
        scrape (vLLM's own series are on the same /metrics)."""
        from prometheus_client.core import GaugeMetricFamily

        try:
            bad: list = []
            fams = self._families(merged(read_snapshots(self.folder, self.run, bad), bad))
        except Exception as e:  # noqa: BLE001 - a collector must never break the scrape
            print(f"drifttool monitor: /metrics: {self.folder} not collected ({type(e).__name__}: {e})",
                  file=sys.stderr, flush=True)
            fams, bad = [], [None]
        yield from fams
        g = GaugeMetricFamily(PREFIX + "metrics_files_skipped", SKIPPED_HELP)
        g.add_metric([], float(len(bad)))
        yield g

    def _families(self, agg: Aggregates) -> list:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        text = helps()
        fams: dict[str, object] = {}
        for (name, lab), v in sorted(agg.counters.items()):
            keys = [k for k, _ in lab]
            fam = fams.setdefault(name, CounterMetricFamily(PREFIX + name, text.get(name, name), labels=keys))
            fam.add_metric([v_ for _, v_ in lab], v)
        for (name, lab), v in sorted(agg.gauges.items()):
            keys = [k for k, _ in lab]
            fam = fams.setdefault(name, GaugeMetricFamily(PREFIX + name, text.get(name, name), labels=keys))
            fam.add_metric([v_ for _, v_ in lab], v)
        for (name, lab), h in sorted(agg.histograms.items()):
            keys = [k for k, _ in lab]
            fam = fams.setdefault(name, HistogramMetricFamily(PREFIX + name, text.get(name, name), labels=keys))
            edges = [*(f"{b:g}" for b in h.buckets), "+Inf"]
            fam.add_metric([v_ for _, v_ in lab], list(zip(edges, h.counts)), h.total)
        return list(fams.values())


def exposition(folder: Path, run: str = "") -> str:
    """The text /metrics shows for the monitor's series (tests, `drifttool` without a server)."""
    from prometheus_client import CollectorRegistry, generate_latest

    reg = CollectorRegistry()
    reg.register(Collector(folder, run))
    return generate_latest(reg).decode()


def describe() -> list[dict[str, str]]:
    """Every exported series: its name as /metrics shows it, its type, labels and meaning (docs/monitor.md)."""
    base = ", ".join(BASE_LABELS)
    out = [{"series": f"{PREFIX}{name}", "type": "histogram", "labels": f"{base}, depth", "what": h}
           for name, _, h in per_depth().values()]
    extra = {"drafts": ", depth, context", "draft_accepted": ", depth, context",
             "attention_mass": ", depth, context, keys", **{r: ", reason" for r in REASON_COUNTERS},
             "snapshot_write_errors": ", process, reason"}
    out += [{"series": f"{PREFIX}{name}_total", "type": "counter", "labels": base + extra.get(name, ""), "what": h}
            for name, h in COUNTERS.items()]
    out += [{"series": f"{PREFIX}{name}", "type": "gauge", "labels": base + ", process", "what": h}
            for name, h in GAUGES.items()]
    out += [{"series": f"{PREFIX}{name}", "type": "histogram", "labels": base, "what": h}
            for name, (_, h) in OTHER_HISTOGRAMS.items()]
    out.append({"series": f"{PREFIX}metrics_files_skipped", "type": "gauge", "labels": "-", "what": SKIPPED_HELP})
    return out
