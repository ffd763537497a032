"""One side of `bench_overhead.py --against REV`: a drafting loop with capture off / taps only / on, timed on command
(stdin: `MODE ROUND`, stdout: CPU seconds per round), imported from the package tree given as the first argument
(the revision's exported tree, or this checkout). Two of these run side by side; the parent alternates blocks
between them, so the before and after code are timed at the same moments of the machine."""

from __future__ import annotations

import sys


def _use_package(root: str) -> None:
    """Import `drifttool` from `root`, not from the editable install (its finder sits before sys.path)."""
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", type(f).__module__)
                        and "editable" not in repr(f)]
    sys.path.insert(0, root)


def main() -> None:
    root, ctx, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    _use_package(root)
    import argparse

    import torch
    from bench_overhead import setup, time_rounds

    import drifttool
    from drifttool.run.hooks import Capture

    ap = argparse.ArgumentParser()
    for name, kind in (("--shape", str), ("--dtype", str), ("--hidden", int), ("--heads", int), ("--kv-heads", int),
                       ("--vocab", int), ("--depth", int), ("--full-every", int)):
        ap.add_argument(name, type=kind)
    a = ap.parse_args(args)
    torch.set_num_threads(1)
    drafter, shape, context, cache = setup(a, ctx)
    on = Capture(drafter, full_every=a.full_every)
    taps = Capture(drafter, full_every=a.full_every)
    taps.end_round = lambda *args: None
    time_rounds(drafter, cache, context, shape, 3, None)
    print("READY", drifttool.__file__, flush=True)
    for line in sys.stdin:
        mode, r0 = line.split()
        if mode == "off":
            t = time_rounds(drafter, cache, context, shape, 2, None)[0]
        else:
            cap = on if mode == "on" else taps
            cap.rounds.clear()
            with cap:
                t = time_rounds(drafter, cache, context, shape, 2, cap, int(r0))[0]
        print(repr(t), flush=True)


if __name__ == "__main__":
    main()
