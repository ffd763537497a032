"""A new user's first hour, timed: the README's two commands on a fresh clone with a fresh HOME.

    .venv/bin/python bench/bench_first_hour.py                 # setup + demo idle, demo with every core busy
    .venv/bin/python bench/bench_first_hour.py --tests         # ... and the test command (about half an hour)
    .venv/bin/python bench/bench_first_hour.py --tests-only    # only the test command, added to the results file

The clone is made from this checkout's HEAD; HOME points into a temporary folder, so the real target is converted
again and pip starts with an empty cache, as on a new machine (the machine's pip configuration, its package
index, is copied in). "Loaded": one busy-looping process per core runs
beside the command (the load a shared CI runner or a training job puts on the machine). Each stage's time is
taken from setup's own "setup: STAGE (N s)" lines. Results go to bench/results/first_hour.json, which
`scripts/docs_gen.py` turns into the README's times (so they are measured, never typed)."""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "first_hour.json"
DEMO = [".venv/bin/drifttool", "demo"]
TESTS = ["bash", "./scripts/test.sh"]


def _spin(stop) -> None:
    while not stop.is_set():
        pass


class Load:
    """One busy-looping process per core while the block runs (n=0: none)."""

    def __init__(self, n: int):
        self.n, self.stop, self.procs = n, mp.Event(), []

    def __enter__(self):
        self.procs = [mp.Process(target=_spin, args=(self.stop,), daemon=True) for _ in range(self.n)]
        for p in self.procs:
            p.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for p in self.procs:
            p.join(5)


def timed(cmd: list[str], cwd: Path, env: dict, log: Path, load: int = 0) -> tuple[float, int, str]:
    """(seconds, exit code, stderr+stdout text) of one command, with `load` busy cores beside it."""
    with Load(load), open(log, "w") as out:
        t0 = time.perf_counter()
        rc = subprocess.call(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        dt = time.perf_counter() - t0
    return dt, rc, log.read_text(errors="replace")


def stages(text: str) -> dict[str, int]:
    """setup's 'setup: STAGE (N s)' lines -> {stage: seconds}."""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^setup: (.+?) \((\d+) s\)$", text, re.M)}


def fresh_clone(work: Path) -> tuple[Path, dict]:
    clone = work / "drifttool"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    home = work / "home"
    home.mkdir()
    for conf in (".config/pip/pip.conf", ".pip/pip.conf"):  # the machine's package index, as a CI image has it
        src = Path.home() / conf
        if src.is_file():
            (home / conf).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, home / conf)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "DRIFTTOOL_"))}
    env.update(HOME=str(home), PATH=os.defpath if "PATH" not in env else env["PATH"], PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    return clone, env


def machine() -> dict:
    return {"cores": os.cpu_count(), "python": platform.python_version(), "system": platform.platform(terse=True)}


def run(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="drifttool-first-hour-"))
    clone, env = fresh_clone(work)
    commit = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=clone, text=True).strip()
    out = {"date": f"{datetime.now(timezone.utc):%Y-%m-%d}", "commit": commit, "machine": machine(), "runs": []}
    cores = os.cpu_count() or 1
    try:
        if not args.tests_only:
            dt, rc, text = timed(["bash", "scripts/setup.sh"], clone, env, work / "setup.log")
            _check(rc, "setup", text)
            out["runs"].append({"command": "setup", "load": 0, "seconds": round(dt), "stages": stages(text)})
            print(f"setup (fresh clone, fresh HOME, idle): {dt:.0f} s {stages(text)}", flush=True)
            for load in (0, cores):
                demo_out = work / f"demo-{load}.drift"
                dt, rc, text = timed([*DEMO, "--out", str(demo_out)], clone, env, work / f"demo-{load}.log", load)
                _check(rc, "demo", text)
                out["runs"].append({"command": "demo", "load": load, "seconds": round(dt)})
                print(f"demo with {load} busy core(s): {dt:.0f} s", flush=True)
        if args.tests or args.tests_only:
            dt, rc, text = timed(TESTS, clone, env, work / "tests.log")
            _check(rc, "test command", text)
            passed = re.findall(r"(\d+) passed", text)
            out["runs"].append({"command": "tests", "load": 0, "seconds": round(dt),
                                "passed": [int(x) for x in passed]})
            print(f"test command (idle): {dt:.0f} s; passed counts {passed}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept: {work}")
    return out


def _check(rc: int, what: str, text: str) -> None:
    if rc != 0:
        sys.exit(f"bench_first_hour: {what} failed (exit {rc}); its last lines:\n{text[-3000:]}")


def merge(old: dict, new: dict) -> dict:
    """The new runs replace the old runs of the same command and load; the rest is kept."""
    keep = {(r["command"], r["load"]) for r in new["runs"]}
    runs = [dict(r, date=old.get("date"), commit=old.get("commit")) if "date" not in r else r
            for r in old.get("runs", []) if (r["command"], r["load"]) not in keep]
    runs += [dict(r, date=new["date"], commit=new["commit"]) for r in new["runs"]]
    return {"machine": new["machine"], "runs": runs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tests", action="store_true", help="also time the test command (about half an hour)")
    ap.add_argument("--tests-only", action="store_true", help="only the test command")
    ap.add_argument("--keep", action="store_true", help="keep the clone and its logs")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    new = run(args)
    old = json.loads(args.out.read_text()) if args.out.is_file() else {}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(merge(old, new), indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
