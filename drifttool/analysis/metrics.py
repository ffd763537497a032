"""Statistics over trace tables: acceptance under every common definition, bootstrap CIs over groups of prompts (source documents),
context buckets, and which measured quantity tracks rejections.

Acceptance definitions (K = speculation depth, R = drafted chains, a_r = accepted drafts in chain r):
- vLLM mean acceptance length: AL = 1 + sum(a_r) / R (the bonus token included);
- vLLM per-position rate: rate[i] = #{r: a_r >= i} / R (cumulative: depth i accepted);
- EAGLE n-alpha: alpha_n = #{a_r >= n} / #{a_r >= n-1} (acceptance at depth n given depths < n accepted);
- draft acceptance rate: sum(a_r) / (R * K);
- i.i.d. estimate: with p = sum(a_r) / #{reached depths} (the MLE of a constant per-token acceptance),
  AL_iid = (1 - p^(K+1)) / (1 - p); it differs from AL when acceptances are not independent of depth."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from ..trace.metric_table import acceptance_length

# Every acceptance definition users meet, by the key it has in summaries and JSON; docs/acceptance.md explains
# where they differ. `name` is what compare prints; `source` is the public definition it follows.
ACCEPTANCE_DEFINITIONS: dict[str, dict[str, str]] = {
    "mean_acceptance_length": {
        "name": "mean acceptance length (vLLM)",
        "definition": "1 + accepted drafts / drafted chains (bonus token included)",
        "source": "vllm-project/vllm vllm/v1/spec_decode/metrics.py (SpecDecodingLogging)",
    },
    "per_position_rate": {
        "name": "per-position rate (vLLM)",
        "definition": "rate[d] = chains with depth d accepted / all chains (unconditional, non-increasing in d)",
        "source": "vllm-project/vllm vllm/v1/spec_decode/metrics.py (Per-position acceptance rate)",
    },
    "n_alpha": {
        "name": "n-alpha (EAGLE)",
        "definition": "alpha[d] = chains with depth d accepted / chains with depths < d accepted; depth d = EAGLE's (d-1)-alpha",
        "source": "Li et al., EAGLE (arXiv:2401.15077), metric n-alpha; SafeAILab/EAGLE issues #80, #180",
    },
    "draft_acceptance_rate": {
        "name": "draft acceptance rate",
        "definition": "accepted drafts / drafted tokens = (AL - 1) / K",
        "source": "vllm-project/vllm vllm/v1/spec_decode/metrics.py (Draft acceptance rate)",
    },
    "iid_acceptance_length": {
        "name": "i.i.d. estimate",
        "definition": "(1 - p^(K+1)) / (1 - p), p = accepted / drafted positions reached: AL if every position were "
                      "accepted independently with one rate",
        "source": "Leviathan et al., Fast Inference from Transformers via Speculative Decoding (arXiv:2211.17192) sec. 3.3",
    },
}

CONTEXT_EDGES = (0, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 1 << 30)


def acceptance(accepted: np.ndarray, k: int) -> dict[str, float | list[float]]:
    """All acceptance definitions from per-chain accepted counts (see module docstring)."""
    a = np.asarray(accepted, dtype=np.int64)
    r = len(a)
    if r == 0:
        return {"drafts": 0}
    reach = np.array([(a >= i - 1).sum() for i in range(1, k + 1)])  # chains that reached depth i
    acc_at = np.array([(a >= i).sum() for i in range(1, k + 1)])
    p = a.sum() / max(1, reach.sum())
    iid = (1 - p ** (k + 1)) / (1 - p) if p < 1 else k + 1.0
    return {
        "drafts": int(r),
        "mean_acceptance_length": acceptance_length(a.sum(), r),
        "per_position_rate": (acc_at / r).tolist(),
        "n_alpha": np.divide(acc_at, reach, out=np.full(k, np.nan), where=reach > 0).tolist(),
        "draft_acceptance_rate": float(a.sum() / (r * k)),
        "iid_p": float(p),
        "iid_acceptance_length": float(iid),
    }


@lru_cache(maxsize=256)
def _resample_weights(n: int, n_boot: int, seed: int) -> np.ndarray:
    """Multinomial resampling counts [n_boot, n]; depend only on (n, n_boot, seed), so computed once."""
    w = np.random.default_rng(seed).multinomial(n, np.full(n, 1 / n), size=n_boot).astype(float)
    w.flags.writeable = False
    return w


# A percentile bootstrap over fewer clusters than this has far below 95% coverage (2 clusters: 3 distinct
# resamples); no CI is given then, as no sign-flip test over so few groups can reach p < 0.05 either.
MIN_CLUSTERS = 6


def bootstrap_ratio(sums: np.ndarray, counts: np.ndarray, n_boot: int = 10_000, seed: int = 0,
                    min_clusters: int = MIN_CLUSTERS) -> tuple[float, float, float]:
    """Point estimate and 95% CI of sum(x)/sum(n) with clusters (groups of prompts) resampled with
    replacement; the CI is NaN below `min_clusters` clusters."""
    sums, counts = np.asarray(sums, float), np.asarray(counts, float)
    if counts.sum() == 0:
        return (np.nan, np.nan, np.nan)
    est = sums.sum() / counts.sum()
    if len(sums) < max(2, min_clusters):
        return (est, np.nan, np.nan)
    w = _resample_weights(len(sums), n_boot, seed)
    den = w @ counts
    stats = np.divide(w @ sums, den, out=np.full(n_boot, np.nan), where=den > 0)
    lo, hi = np.nanpercentile(stats, [2.5, 97.5])
    return (float(est), float(lo), float(hi))


def cluster_mean(df: pd.DataFrame, col: str, by: list[str], seed: int = 0) -> pd.DataFrame:
    """Mean of `col` per group of `by` with a cluster-bootstrap CI: columns col, col_lo, col_hi. The clusters are
    the prompts' groups (source documents) when `df` has a `group` column, else the prompts."""
    unit = "group" if "group" in df.columns else "prompt_id"
    g = df.groupby([*by, unit], observed=True)[col].agg(["sum", "count"]).reset_index()
    out = []
    for key, sub in g.groupby(by, observed=True):
        est, lo, hi = bootstrap_ratio(sub["sum"].to_numpy(), sub["count"].to_numpy(), seed=seed)
        row = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        row.update({col: est, f"{col}_lo": lo, f"{col}_hi": hi})
        out.append(row)
    return pd.DataFrame(out, columns=[*by, col, f"{col}_lo", f"{col}_hi"])  # columns kept when there are no rows


def context_bucket(ctx: pd.Series) -> pd.Series:
    edges = list(CONTEXT_EDGES)
    labels = [f"{lo}-{hi - 1}" for lo, hi in zip(edges[:-2], edges[1:-1])] + [f">={edges[-2]}"]
    return pd.cut(ctx, bins=edges, right=False, labels=labels)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Rank correlation (average ranks for ties); nan when either side is constant."""
    if len(x) < 3:
        return float("nan")
    rx = pd.Series(x).rank().to_numpy()
    ry = pd.Series(y).rank().to_numpy()
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])

