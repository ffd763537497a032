"""GPU smoke checks for big targets (run by scripts/gpu_check.sh on a machine with CUDA).

Prints a pass/fail table:
- target_sdpa_vs_eager: an HF Llama target in bfloat16, SDPA vs eager attention: aux features and logits.
- drafter_sdpa_vs_eager: a drafter of the Llama-3.1-8B EAGLE-3 shape (hidden 4096, 32/8 heads x 128, vocab
  128256 -> draft 32000, fc 12288 -> 4096, llama3 RoPE; random weights written and read back through
  load_drafter) in bfloat16: logits of a K-step chain, SDPA vs eager.
- capture_rows_vs_eager: the capture's recomputed attention rows (Capture(keep_qk=True)) vs the eager
  attention probabilities of the same steps, every depth and head, at 32k context.
- device_map_placement: that target spread over every GPU (device_map "balanced"; needs >= 2) vs on one:
  features, logits, and the tokens speculation emits with the drafter on its last device.
- lse_masses_vs_full: sink / draft / own masses from the attention kernel's log-sum-exp (what capture computes on
  most rounds) vs the full-row reference of the same round; SKIP when the device's kernel gives no lse.
- long_context_32k: the same drafter refreshed over 32768 positions and drafting K steps with the capture
  attached: finite logits, wall time, peak memory.
Without CUDA it prints one line and exits 0 (CI skips it). `--device cpu --scale tiny` runs the same checks at
toy sizes on CPU (the test suite does, so the checking code itself is tested)."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from drifttool.model.checkpoint import load_drafter, save_drafter  # noqa: E402
from drifttool.model.config import DrafterConfig  # noqa: E402
from drifttool.model.drafter import Eagle3Drafter  # noqa: E402
from drifttool.run.attention_stats import CHECKED_FULL, CHECKED_LSE, MASS_IDX  # noqa: E402
from drifttool.run.hooks import Capture  # noqa: E402
from drifttool.run.loop import RoundRecord, draft_chain, refresh  # noqa: E402

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


@dataclass(frozen=True)
class Scale:
    """Sizes of one run of the checks; `real` is the Llama-3.1-8B EAGLE-3 head at 32k context."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    vocab: int
    draft_vocab: int
    ctx: int  # the long-context check
    parity_ctx: int  # SDPA vs eager (eager materialises T x L scores)
    target: dict  # the HF target of the target parity check
    depth: int = 8


SCALES = {
    "real": Scale(
        4096,
        32,
        8,
        128,
        14336,
        128256,
        32000,
        32768,
        4096,
        {
            "hidden_size": 1024,
            "num_hidden_layers": 8,
            "num_attention_heads": 16,
            "num_key_value_heads": 4,
            "intermediate_size": 4096,
            "vocab_size": 32000,
            "max_position_embeddings": 8192,
        },
    ),
    "tiny": Scale(
        64,
        4,
        2,
        16,
        128,
        512,
        256,
        300,
        96,
        {
            "hidden_size": 64,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "intermediate_size": 128,
            "vocab_size": 512,
            "max_position_embeddings": 512,
        },
    ),
}


@dataclass
class Row:
    name: str
    ok: bool | None  # None: skipped (e.g. placement over GPUs on a one-GPU machine)
    measured: str
    bar: str


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| relative to max |b|."""
    a, b = a.float(), b.float()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def drafter_of(s: Scale, device: str, dtype: torch.dtype, tmp: Path) -> Eagle3Drafter:
    """Random weights of the given shape, saved (speculators layout) and read back through load_drafter."""
    cfg = DrafterConfig(
        hidden_size=s.hidden,
        num_attention_heads=s.heads,
        num_key_value_heads=s.kv_heads,
        head_dim=s.head_dim,
        intermediate_size=s.inter,
        vocab_size=s.vocab,
        draft_vocab_size=s.draft_vocab,
        target_hidden_size=s.hidden,
        aux_layer_ids=[2, 16, 29],
        rope_theta=500000.0,
        rope_scaling=dict(LLAMA3_ROPE),
        max_position_embeddings=131072,
    )
    torch.manual_seed(0)
    with torch.device(device):
        d = Eagle3Drafter(cfg).to(dtype)
    save_drafter(d, tmp / "drafter", layout="speculators")
    del d
    return load_drafter(tmp / "drafter", device=device, dtype=dtype).eval()


class EagerRows:
    """The last attention-probability row of every eager drafter forward (one per draft depth)."""

    def __init__(self, drafter: Eagle3Drafter):
        self.rows: list[torch.Tensor] = []
        self.h = drafter.layer.self_attn.hook_probs.register_forward_hook(
            lambda _m, _i, out: self.rows.append(out[0, :, -1].float().cpu())
        )


@torch.no_grad()
def one_round(
    d: Eagle3Drafter,
    ctx: int,
    depth: int,
    impl: str,
    cap: Capture | None = None,
    seed: int = 1,
    prefill_impl: str = "sdpa",
):
    """Refresh `ctx` slots (all but the last with `prefill_impl`: at 32k eager would materialise ctx x ctx
    scores), then the last slot and K draft steps with `impl`; returns (per-depth logits [K, V], drafts, eager
    rows if eager)."""
    dev, dt = d.lm_head.weight.device, d.lm_head.weight.dtype
    g = torch.Generator(device="cpu").manual_seed(seed)
    seq = torch.randint(0, d.config.vocab_size, (ctx + 1,), generator=g).tolist()
    feats = torch.randn(ctx, d.config.num_aux * d.config.target_hidden_size, generator=g).to(dev, dt)
    cache = d.new_cache(capacity=ctx + depth + 8)
    d.set_attn_impl(prefill_impl)
    if ctx > 1:
        refresh(d, cache, seq[1:ctx], 0, feats[: ctx - 1])
    d.set_attn_impl(impl)
    eager = EagerRows(d) if impl == "eager" else None
    logits: list[torch.Tensor] = []
    try:
        if cap is not None:
            cap.begin_round(d, 0, ctx, depth, seq)
        step = refresh(d, cache, seq[ctx:], ctx - 1, feats[ctx - 1 :])

        def pick(lg):
            logits.append(lg.float().cpu())
            return int(d.draft_to_target(lg.argmax())), None

        drafts, _, fed = draft_chain(d, cache, step, ctx, depth, seq[ctx], pick)
        if cap is not None:
            rec = RoundRecord(
                round=0,
                context_len=ctx,
                draft_ids=drafts,
                target_ids=[-1] * depth,
                accepted=0,
                match=[False] * depth,
                bonus=-1,
                input_ids=fed,
            )
            cap.end_round(d, cache, rec)
    finally:
        if eager is not None:
            eager.h.remove()
        d.set_attn_impl("sdpa")
    return torch.stack(logits), drafts, (eager.rows if eager else None)


def check_target(s: Scale, device: str, dtype: torch.dtype, tol: float) -> Row:
    from transformers import LlamaConfig, LlamaForCausalLM

    from drifttool.model.target import Target

    torch.manual_seed(0)
    with torch.device(device):
        m = LlamaForCausalLM(LlamaConfig(**s.target, tie_word_embeddings=False)).to(dtype).eval()
    ids = torch.randint(
        0, s.target["vocab_size"], (s.parity_ctx,), generator=torch.Generator().manual_seed(2)
    )
    out = {}
    for impl in ("eager", "sdpa"):
        if hasattr(m, "set_attn_implementation"):
            m.set_attn_implementation(impl)
        else:  # older transformers read the config field at each forward
            m.config._attn_implementation = impl
        t = Target(m, [1, s.target["num_hidden_layers"] // 2, s.target["num_hidden_layers"] - 1])
        out[impl] = t.forward(ids)
    rf, rl = rel(out["sdpa"].features, out["eager"].features), rel(out["sdpa"].logits, out["eager"].logits)
    return Row(
        f"target_sdpa_vs_eager ({s.parity_ctx} tok, {str(dtype)[6:]})",
        max(rf, rl) < tol,
        f"features {rf:.2e}, logits {rl:.2e}",
        f"< {tol:.0e} rel",
    )


def check_placement(s: Scale, device: str, dtype: torch.dtype, tmp: Path, tol: float) -> Row:
    """The target spread by device_map ("balanced" over every GPU; "auto" on CPU, one device) gives the numbers
    of the target on one device, and speculation with the drafter on its last device emits the same tokens."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from drifttool.model.target import load_target
    from drifttool.model.tiny import tiny_drafter
    from drifttool.run.loop import speculate

    gpus = torch.cuda.device_count() if device.startswith("cuda") else 0
    name = f"device_map_placement ({gpus or 1} device{'s' if gpus > 1 else ''})"
    if device.startswith("cuda") and gpus < 2:
        return Row(name, None, "one GPU: nothing to spread", "needs >= 2 GPUs")
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**s.target, tie_word_embeddings=False)).to(dtype).save_pretrained(
        tmp / "target"
    )
    one = load_target(tmp / "target", device=device, dtype=dtype)
    spread = load_target(tmp / "target", dtype=dtype, device_map="balanced" if gpus else "auto")
    ids = torch.randint(
        0, s.target["vocab_size"], (min(s.parity_ctx, 1024),), generator=torch.Generator().manual_seed(3)
    )
    a, b = one.forward(ids), spread.forward(ids)
    r = max(rel(b.features.to(a.features.device), a.features), rel(b.logits.to(a.logits.device), a.logits))
    d = tiny_drafter(one, seed=1).to(device=one.last_device, dtype=dtype)
    prompt = ids[:32].tolist()
    outs = []
    for t in (one, spread):
        t.reset()
        outs.append(speculate(t, d.to(t.last_device), prompt, depth=4, max_new_tokens=16).output_ids)
    same = outs[0] == outs[1]
    return Row(
        name,
        r < tol and same,
        f"{len(spread.devices)} devices, rel {r:.2e}, tokens {'equal' if same else 'DIFFER'}",
        f"< {tol:.0e} rel, same tokens",
    )


def check_drafter(d: Eagle3Drafter, s: Scale, tol: float) -> Row:
    a, da, _ = one_round(d, s.parity_ctx, s.depth, "sdpa")
    b, db, _ = one_round(d, s.parity_ctx, s.depth, "eager", prefill_impl="eager")  # every slot eager
    r = rel(a, b)
    return Row(
        f"drafter_sdpa_vs_eager ({s.parity_ctx} ctx, K={s.depth})",
        r < tol,
        f"logits {r:.2e}, drafts agree {sum(x == y for x, y in zip(da, db))}/{s.depth}",
        f"< {tol:.0e} rel",
    )


def check_rows(d: Eagle3Drafter, s: Scale, tol: float) -> Row:
    cap = Capture(d, keep_qk=True)
    with cap:
        _, _, rows = one_round(d, s.ctx, s.depth, "eager", cap)
    worst = 0.0
    for j, row in enumerate(rows):
        for h in range(row.shape[0]):
            got = torch.as_tensor(cap.attention(0, j + 1, head=h))
            worst = max(worst, float((got.float() - row[h]).abs().max()))
    return Row(
        f"capture_rows_vs_eager ({s.ctx} ctx, {len(rows)} depths x {rows[0].shape[0]} heads)",
        worst < tol,
        f"max |diff| {worst:.2e}",
        f"< {tol:.0e} abs",
    )


def check_lse(d: Eagle3Drafter, s: Scale, tol: float) -> Row:
    """The masses capture writes on most rounds (from the attention kernel's log-sum-exp, sink + draft keys only)
    vs the full-row reference path, same round; and whether this device's kernel gave an lse at all (if not,
    capture falls back to full rows every round: correct, slower)."""
    lse, ref = Capture(d, full_every=0), Capture(d, full_every=1)
    for cap in (lse, ref):
        with cap:
            one_round(d, s.ctx, s.depth, "sdpa", cap)
    got, want = lse.rounds[0], ref.rounds[0]
    if got.full:  # no lse from the kernel: the round was computed from full rows
        return Row(f"lse_masses_vs_full ({s.ctx} ctx)", None, "kernel gave no lse: full rows every round",
                   "lse available")
    idx = list(MASS_IDX)  # every mass the lse path computes (sink, draft, own, recent, ..., matched, window)
    a, b = got.heads[..., idx], want.heads[..., idx]
    same_nan = bool((np.isnan(a) == np.isnan(b)).all())  # the matched mass: NaN at depth 1 on both paths
    diff = float(np.nanmax(abs(a - b))) if same_nan else float("nan")
    same_counts = bool((got.counts == want.counts).all())
    return Row(f"lse_masses_vs_full ({s.ctx} ctx, sink/draft/own/recent, every depth x head; key counts)",
               diff < tol and same_counts, f"max |diff| {diff:.2e}, counts {'equal' if same_counts else 'DIFFER'}",
               f"< {tol:.0e} abs")


def check_long(d: Eagle3Drafter, s: Scale, device: str) -> Row:
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    cap = Capture(d)
    with cap:
        logits, _, _ = one_round(d, s.ctx, s.depth, "sdpa", cap)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    mem = f", peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if device.startswith("cuda") else ""
    heads = cap.rounds[0].heads[..., list(CHECKED_FULL if cap.rounds[0].full else CHECKED_LSE)]  # NaN by design: out
    ok = bool(torch.isfinite(logits).all()) and bool(torch.isfinite(torch.as_tensor(heads)).all())
    return Row(
        f"long_context ({s.ctx} ctx, K={s.depth}, capture on)",
        ok,
        f"{wall:.1f} s{mem}",
        "finite logits and masses",
    )


def run(device: str, scale: str, dtype: torch.dtype) -> list[Row]:
    s = SCALES[scale]
    bf16 = dtype in (torch.bfloat16, torch.float16)
    parity_tol, rows_tol = (3e-2, 1e-2) if bf16 else (1e-4, 1e-5)
    out = [check_target(s, device, dtype, parity_tol)]
    with tempfile.TemporaryDirectory(prefix="drifttool-gpu-check-") as tmp:
        out.append(check_placement(s, device, dtype, Path(tmp), parity_tol))
        d = drafter_of(s, device, dtype, Path(tmp))
        out += [check_drafter(d, s, parity_tol), check_rows(d, s, rows_tol), check_lse(d, s, rows_tol),
                check_long(d, s, device)]
    return out


def table(rows: list[Row]) -> str:
    w = max(len(r.name) for r in rows)
    m = max(len(r.measured) for r in rows)
    lines = [f"{'check':<{w}}  result  {'measured':<{m}}  bar"]
    word = {True: "PASS", False: "FAIL", None: "SKIP"}
    lines += [f"{r.name:<{w}}  {word[r.ok]:<6}  {r.measured:<{m}}  {r.bar}" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda (default) | cuda:N | cpu (with --scale tiny)")
    ap.add_argument("--scale", default="real", choices=sorted(SCALES))
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    a = ap.parse_args(argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: skipped: no CUDA device (torch.cuda.is_available() is False)")
        return 0
    if a.device == "cpu" and a.scale == "real":
        print("gpu_check: --device cpu runs only --scale tiny (the real scale needs a GPU)", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(a.device) if a.device.startswith("cuda") else "cpu"
    print(f"gpu_check: {name}, scale {a.scale}, {a.dtype}, torch {torch.__version__}")
    rows = run(a.device, a.scale, getattr(torch, a.dtype))
    print(table(rows))
    return 0 if all(r.ok is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
