"""Tabulate the sign-flip test's own minimum detectable effect (analysis/stats.py SIGNFLIP_MDE).

For n groups whose changes are Normal(delta, sd^2), find the multiplier c(n) such that the two-sided sign-flip test
at alpha 0.05 rejects with probability 0.80 when delta = c(n) * sd. n <= 16: the exact test (all 2^n sign patterns,
as stats.sign_flip_p computes it); n > 16: the permutation distribution's normal limit (|sum x| / sqrt(sum x^2) >
z_0.975), which a unit test checks against the tool's own 20,000-pattern test at n = 24 and 40. Common random
numbers across the bisection keep power monotone in c. Prints the Python table to paste into stats.py.

    python scripts/signflip_mde_table.py [--draws 8000] [--max-n 60]
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np
from scipy.stats import norm

ALPHA, POWER = 0.05, 0.80


def reject_exact(x: np.ndarray) -> np.ndarray:
    """[M] whether the exact two-sided sign-flip test rejects at ALPHA, for datasets x [M, n]."""
    n = x.shape[1]
    s = np.array(list(itertools.product((1.0, -1.0), repeat=n)), np.float32)  # [P, n]
    out = np.empty(len(x), bool)
    for i in range(0, len(x), 256):
        xb = x[i:i + 256].astype(np.float32)
        stats = np.abs(s @ xb.T)  # [P, B]
        obs = np.abs(xb.sum(1))
        p = (stats >= obs[None, :] - 1e-6 * np.maximum(1.0, obs[None, :])).mean(0)
        out[i:i + 256] = p < ALPHA
    return out


def reject_normal(x: np.ndarray) -> np.ndarray:
    return np.abs(x.sum(1)) / np.sqrt((x * x).sum(1)) > norm.ppf(1 - ALPHA / 2)


def multiplier(n: int, draws: int, seed: int = 12345) -> float:
    z = np.random.default_rng(seed + n).standard_normal((draws, n))
    test = reject_exact if n <= 16 else reject_normal
    lo, hi = 0.0, 4.0
    for _ in range(14):
        mid = (lo + hi) / 2
        if test(z + mid).mean() >= POWER:
            hi = mid
        else:
            lo = mid
    return round((lo + hi) / 2, 3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=8000)
    ap.add_argument("--max-n", type=int, default=60)
    a = ap.parse_args()
    table = {n: multiplier(n, a.draws) for n in range(6, a.max_n + 1)}
    print("SIGNFLIP_MDE = {")
    items = [f"{n}: {c}" for n, c in table.items()]
    for i in range(0, len(items), 10):
        print("    " + ", ".join(items[i:i + 10]) + ",")
    print("}")


if __name__ == "__main__":
    main()
