"""Print the README's results table (markdown) from the sample traces: one row per specimen x suite x drafter."""

from __future__ import annotations

import sys
from pathlib import Path

from drifttool.compare import Comparison
from drifttool.trace import read_trace


def main(root: str = "sample_traces") -> None:
    print("| target | suite | drafter | prompts | mean acc. length [95% CI] | i.i.d. est. | rms_in d1 → d8 |"
          " sink mass d1 → d8 | self mass d2 → d8 | drift score |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for p in sorted(Path(root).glob("*.drift")):
        spec, suite = p.name.removesuffix(".drift").split("-", 1)
        cmp = Comparison.of([read_trace(p)])
        summ = cmp.summary().set_index("series")
        pdp = cmp.per_depth().set_index(["series", "depth"])
        k = cmp.depth
        for s in summ.index:
            r = summ.loc[s]
            d = lambda m, i, s=s, pdp=pdp: pdp.loc[(s, i), m]  # noqa: E731
            print(f"| {spec} | {suite} | {s} | {int(r.prompts)} | {r.mean_acceptance_length:.2f} "
                  f"[{r.al_lo:.2f}, {r.al_hi:.2f}] | {r.iid_acceptance_length:.2f} | {d('rms_in', 1):.2f} → "
                  f"{d('rms_in', k):.2f} | {d('sink_mass', 1):.3f} → {d('sink_mass', k):.3f} | "
                  f"{d('self_mass', 2):.2f} → {d('self_mass', k):.2f} | {r.drift_score:.3f} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
