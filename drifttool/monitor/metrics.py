"""The monitor's Prometheus metrics: the replay process and the worker keep `Aggregates` (counters and fixed-bucket
histograms, labelled by model / drafter / depth, never by prompt content or request id) and write them as atomic
JSON snapshots under DIR/metrics/; in the API server a `Collector` sums the current run's snapshots at scrape time,
so drifttool's series appear on vLLM's own /metrics beside `vllm:spec_decode_*`. Per-depth values come from the
very `depths` table a trace stores (lifts derived as the trace reader derives them), so a live series equals an
offline capture of the same requests."""

from __future__ import annotations

import json
import math
import os
import re
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

PREFIX = "drifttool:"
MASS_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
LIFT_BUCKETS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
RMS_BUCKETS = (0.25, 0.5, 1.0, 1.5, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
ENTROPY_BUCKETS = (0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)
LAG_BUCKETS = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
# depths-table column -> (exported name, buckets, help): what the monitor reads against uniform first
PER_DEPTH = {
    "sink_lift": ("sink_lift", LIFT_BUCKETS, "attention on the sink positions / the uniform share (1 = uniform)"),
    "self_lift": ("self_lift", LIFT_BUCKETS, "attention on the chain's own drafted slots / the uniform share"),
    "template_lift": ("template_lift", LIFT_BUCKETS, "attention on the chat template's tokens / the uniform share"),
    "recent_lift": ("recent_lift", LIFT_BUCKETS, "attention on the most recent context slots / the uniform share"),
    "sink_mass": ("sink_mass", MASS_BUCKETS, "head-mean attention mass on the sink positions"),
    "self_mass": ("self_mass", MASS_BUCKETS, "head-mean attention mass on the chain's own drafted slots"),
    "template_mass": ("template_mass", MASS_BUCKETS, "head-mean attention mass on the chat template's tokens"),
    "recent_mass": ("recent_mass", MASS_BUCKETS, "head-mean attention mass on the most recent context slots"),
    "rms_in": ("fed_back_rms", RMS_BUCKETS, "RMS of the drafter layer's input (depth 1: fc of the target features; "
               "deeper: the fed-back hidden state)"),
    "entropy": ("attention_entropy", ENTROPY_BUCKETS, "head-mean attention entropy (nats; full rounds only)"),
}
COUNTERS = {
    "samples": "requests sampled for the monitor",
    "samples_dropped": "sampled requests dropped (queue or spool full, recording error)",
    "requests_skipped": "requests not sampled although chosen (prefix-cache hit, no prompt ids)",
    "replayed": "sampled requests replayed",
    "replay_errors": "sampled requests whose replay failed (the request itself was served)",
    "replay_quarantined": "sampled requests that could not be replayed (meta, events, replay or shard), moved to "
                          "DIR/spool/RUN/quarantine/ (kept, not deleted)",
    "replay_lag_clamped": "replays whose request ended after the replay by the monitor's clock (the worker's clock "
                          "ahead): lag observed as 0",
    "replay_disagreements": "replays that did not reproduce vLLM's drafter within tolerance (segment flagged)",
    "rounds": "drafted rounds of the replayed requests",
    "drafts": "drafts at this depth in the replayed requests' rounds",
    "draft_accepted": "drafts accepted at this depth (vLLM's verdict; equals vLLM's per-position count at sample=1)",
}
SKIPPED_HELP = ("files in DIR/metrics/ skipped at this scrape: not a drifttool snapshot (not JSON, a list, wrong "
                "fields, other buckets); the other files' series are still shown")
OTHER_HISTOGRAMS = {"replay_lag_seconds": (LAG_BUCKETS, "seconds from a request's end to its replay's end")}


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
    """Counters and histograms of one writer (the worker or the replay process), keyed by (name, labels)."""

    counters: dict[tuple[str, Labels], float] = field(default_factory=dict)
    histograms: dict[tuple[str, Labels], Histogram] = field(default_factory=dict)

    def inc(self, name: str, labels: dict[str, str], by: float = 1.0) -> None:
        key = (name, _labels(labels))
        self.counters[key] = self.counters.get(key, 0.0) + by

    def observe(self, name: str, labels: dict[str, str], values, buckets: tuple[float, ...]) -> None:
        h = self.histograms.setdefault((name, _labels(labels)), Histogram(buckets))
        h.observe_many(np.atleast_1d(values))

    def add_request(self, depths: pd.DataFrame, labels: dict[str, str]) -> None:
        """One replayed request's depth rows (the trace's `depths` table, lifts derived): per depth, every metric's
        values into its histogram and the drafts / accepted counts."""
        depths = with_lifts(depths)
        self.inc("rounds", labels, float(depths["round"].nunique()) if len(depths) else 0.0)
        for d, rows in depths.groupby("depth"):
            lab = {**labels, "depth": str(int(d))}
            self.inc("drafts", lab, float(len(rows)))
            self.inc("draft_accepted", lab, float(rows["accepted"].astype(bool).sum()))
            for col, (name, buckets, _) in PER_DEPTH.items():
                if col in rows:
                    self.observe(name, lab, rows[col].to_numpy(np.float64), buckets)

    def to_json(self) -> dict:
        return {"counters": [{"name": n, "labels": dict(lab), "value": v} for (n, lab), v in self.counters.items()],
                "histograms": [{"name": n, "labels": dict(lab), "buckets": list(h.buckets), "counts": h.counts,
                                "sum": h.total, "count": h.n} for (n, lab), h in self.histograms.items()]}

    def write(self, path: Path) -> None:
        """Atomically (a scrape never reads half a file)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.to_json()))
        os.replace(tmp, path)


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
    """The sum of several writers' snapshots (same name and labels add up). A snapshot whose histogram has other
    buckets than the same series so far is left out whole (appended to `bad`): adding its counts would mis-sum."""
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
    """A metrics snapshot as Aggregates.write writes it: an object of counters and histograms, every name and label
    a Prometheus name, every number finite and >= 0, every histogram's counts one per bucket and +Inf."""
    if not isinstance(snap, dict):
        return False
    cs, hs = snap.get("counters", []), snap.get("histograms", [])
    return (isinstance(cs, list) and isinstance(hs, list)
            and all(_series_ok(c) and _num(c.get("value")) for c in cs)
            and all(_series_ok(h) and _histogram_ok(h) for h in hs)
            and not {c["name"] for c in cs} & {h["name"] for h in hs})


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


def read_snapshots(folder: Path, run: str = "", bad: list | None = None) -> list[dict]:
    """The snapshots of one server run (`RUN-worker.json`, `RUN-replay.json`), or of every run. A file that is not
    a snapshot (not JSON, a list, wrong fields) is skipped and appended to `bad`: one file never breaks a scrape."""
    out = []
    for f in sorted(folder.glob(f"{run}-*.json" if run else "*.json")) if folder.is_dir() else []:
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
    out = {name: h for name, _, h in PER_DEPTH.values()}
    out.update(COUNTERS)
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
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        text = helps()
        fams: dict[str, object] = {}
        for (name, lab), v in sorted(agg.counters.items()):
            keys = [k for k, _ in lab]
            fam = fams.setdefault(name, CounterMetricFamily(PREFIX + name, text.get(name, name), labels=keys))
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
    out = [{"series": f"{PREFIX}{name}", "type": "histogram", "labels": "model, drafter, depth", "what": h}
           for name, _, h in PER_DEPTH.values()]
    per_depth, reasons = {"drafts", "draft_accepted"}, {"samples_dropped", "requests_skipped"}
    out += [{"series": f"{PREFIX}{name}_total", "type": "counter",
             "labels": "model, drafter" + (", depth" if name in per_depth else ", reason" if name in reasons else ""),
             "what": h} for name, h in COUNTERS.items()]
    out += [{"series": f"{PREFIX}{name}", "type": "histogram", "labels": "model, drafter", "what": h}
            for name, (_, h) in OTHER_HISTOGRAMS.items()]
    out.append({"series": f"{PREFIX}metrics_files_skipped", "type": "gauge", "labels": "-", "what": SKIPPED_HELP})
    return out
