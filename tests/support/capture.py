"""Helpers for the capture / trace / CLI tests: tiny models saved to disk in real layouts, probe files,
and a CLI runner that keeps subprocesses to one CPU thread (the machine is shared)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from drifttool import save_drafter
from drifttool.model.drafter import Eagle3Drafter
from drifttool.model.tiny import tiny_drafter, tiny_drafter_config, tiny_target

TINY = {"vocab": 64, "hidden": 32, "layers": 4, "heads": 4, "kv_heads": 2}
REPO = Path(__file__).resolve().parents[2]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               PYTHONDONTWRITEBYTECODE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               NO_COLOR="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    return env


def build_models(root: Path) -> dict[str, Path]:
    """A tiny GQA Llama target (HF save_pretrained) + an EAGLE-3 and an EAGLE-3.1 drafter (speculators layout)."""
    t = tiny_target(**TINY)
    paths = {"target": root / "target", "eagle3": root / "eagle3", "eagle31": root / "eagle31"}
    t.model.save_pretrained(paths["target"])
    save_drafter(tiny_drafter(t, seed=1), paths["eagle3"])
    save_drafter(tiny_drafter(t, seed=2, fc_norm=True, norm_output=True), paths["eagle31"])
    return paths


def write_probes(path: Path, probes: list[dict]) -> Path:
    path.write_text("".join(json.dumps(p) + "\n" for p in probes))
    return path


def prompt(seed: int, n: int, vocab: int = TINY["vocab"]) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n,), generator=g).tolist()


def cli(*args: str, timeout: float = 1800.0, **kw) -> subprocess.CompletedProcess:
    """`python -m drifttool.cli ARGS` in a fresh interpreter."""
    return subprocess.run([sys.executable, "-m", "drifttool.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=child_env(), **kw)


def make_drafter(t, nh: int, nkv: int, seed: int, zero_keys: bool = False, config: dict | None = None,
                 **flags) -> Eagle3Drafter:
    """A drafter on the tiny target's embeddings and lm_head with sharpened weights (peaky attention, so a wrong
    slot or head shows up); `config`: other DrafterConfig fields (sliding_window, mla, ...)."""
    cfg = dataclasses.replace(tiny_drafter_config(t, **flags), num_attention_heads=nh, num_key_value_heads=nkv,
                              head_dim=8, **(config or {}))
    torch.manual_seed(seed)
    d = Eagle3Drafter(cfg)
    with torch.no_grad():
        d.embed_tokens.weight.copy_(t.input_embeddings())
        d.lm_head.weight.copy_(t.model.lm_head.weight)
        for name, p in d.named_parameters():
            if p.ndim == 2 and name not in ("embed_tokens.weight", "lm_head.weight"):
                p.mul_(3.0)
        if zero_keys:
            d.layer.self_attn.k_proj.weight.zero_()
    return d.eval()


def offline_drift_summary(root: Path, target: Path, drafter: Path, probes: list[list[int]], depth: int = 3,
                          new: int = 8) -> dict[str, float]:
    """The drift logger's scalars (train_log.summary) of an offline `drifttool capture` of a saved drafter on the
    same probes, teacher-forced: what a logged evaluation must equal."""
    import drifttool as dt
    from drifttool.train_log import summary

    (root / "p.jsonl").write_text("".join(json.dumps({"id": f"probe-{i}", "token_ids": p}) + "\n"
                                          for i, p in enumerate(probes)))
    r = cli("capture", "--target", target, "--drafter", f"off={drafter}", "--probes", root / "p.jsonl", "--depth",
            str(depth), "--mode", "teacher-forced", "--max-new-tokens", str(new), "--quiet", "--out",
            root / "offline.drift", timeout=1800)
    assert r.returncode == 0, r.stderr[-2000:]
    off = dt.load(root / "offline.drift")
    return summary(off.depths, off.heads)
