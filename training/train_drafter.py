"""Train EAGLE-3 and EAGLE-3.1 drafters for one frozen zoo target with training-time test (docs/eagle3.md §5).

Both variants get the same data order, step count, seed and initial weights; they differ only by
`fc_norm` and `norm_output` (what is fed back), so any difference in drift is the variant's.
Layout: slot t pairs token t+1 with the target's aux features at position t; TTT step k's output at
slot t predicts token t+2+k, i.e. is trained against the target's distribution at position t+1+k.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from drifttool.model.config import DrafterConfig
from drifttool.model.drafter import Eagle3Drafter

from . import DEFAULT_BUILD_DIR
from .ckpt import load_ckpt, save_ckpt
from .drafters import VARIANTS, DrafterShape, variant_drafters
from .schedule import Budget, StepArgs, adamw, set_lr, warmup_cosine
from .windows import batch_shape, heldout_windows, sample_windows

DrafterSpec = DrafterShape  # the name this module used before the shape was shared with train_real


@dataclass
class DrafterTrainArgs(StepArgs):
    target_dir: str = ""
    data_dir: str = str(DEFAULT_BUILD_DIR / "data")
    work_dir: str = str(DEFAULT_BUILD_DIR / "drafters")  # checkpoints, plan
    out_dir: str = ""  # final folders out_dir/<variant>
    minutes: float = 9.0  # per variant
    steps: int | None = None  # fixed step count (tests); otherwise planned once from measured speed
    ttt_steps: int = 4
    loss_decay: float = 0.8
    eval_windows: int = 24
    variants: tuple[str, ...] = ("eagle3", "eagle3.1")
    spec: DrafterShape = field(default_factory=DrafterShape)


# -- setup ------------------------------------------------------------------------------------------
def draft_vocab(stream: np.ndarray, vocab_size: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The n most frequent target tokens (ties -> lower id), in target-id order:
    d2t[i] = target_id(i) - i and t2d a bool mask over the target vocabulary."""
    counts = np.bincount(stream.astype(np.int64), minlength=vocab_size)[:vocab_size]
    order = np.lexsort((np.arange(vocab_size), -counts))[:n]
    ids = torch.from_numpy(np.sort(order)).long()
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[ids] = True
    return ids - torch.arange(n), t2d


def drafter_config(spec: DrafterShape, target_cfg, variant: str) -> DrafterConfig:
    rope = getattr(target_cfg, "rope_parameters", None) or {}
    return spec.config(variant, vocab_size=target_cfg.vocab_size, target_hidden_size=target_cfg.hidden_size,
                       rms_norm_eps=target_cfg.rms_norm_eps,
                       rope_theta=float(rope.get("rope_theta", getattr(target_cfg, "rope_theta", 10000.0))),
                       max_position_embeddings=target_cfg.max_position_embeddings)


def init_drafter(args: DrafterTrainArgs, target, d2t: torch.Tensor, variant: str) -> Eagle3Drafter:
    """Same initial weights for every variant (drafters.variant_drafters); embed_tokens = the target's, frozen."""
    return variant_drafters(lambda v: drafter_config(args.spec, target.config, v), [variant], args.seed,
                            target.get_input_embeddings().weight, d2t)[variant]


def load_frozen_target(path: str | Path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    model.set_attn_implementation("sdpa")
    model.eval().requires_grad_(False)
    return model


# -- data -------------------------------------------------------------------------------------------
def get_batch(stream: np.ndarray, args: DrafterTrainArgs, step: int) -> torch.Tensor:
    """BOS + window-1 stream tokens at offsets keyed by (seed, step): the same for every variant."""
    return sample_windows(stream, *batch_shape(args, step), key=[args.seed, 7, step])


@torch.no_grad()
def target_pass(target, ids: torch.Tensor, aux_layer_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Aux features [B,T,A*Ht] (HF hidden_states[i], low -> high) and logits [B,T,V] of the frozen target."""
    out = target(input_ids=ids, output_hidden_states=True)
    feats = torch.cat([out.hidden_states[i] for i in aux_layer_ids], dim=-1)
    return feats.float(), out.logits.float()


# -- loss -------------------------------------------------------------------------------------------
def ttt_loss(
    drafter: Eagle3Drafter, ids: torch.Tensor, feats: torch.Tensor, tlogits: torch.Tensor, steps: int, decay: float
) -> tuple[torch.Tensor, list[dict[str, float]]]:
    """Σ_k decay^k · soft-CE(drafter step k, target softmax restricted to the draft vocab). Slots whose
    step-k target position runs past the window are sliced off (they hold padding in ttt_forward)."""
    draft_ids = drafter.draft_to_target(torch.arange(drafter.config.draft_vocab_size))
    outs = drafter.ttt_forward(ids[:, 1:], feats[:, :-1], steps)
    n = ids.shape[1] - 1
    total = feats.new_zeros(())
    stats = []
    for k, o in enumerate(outs):
        tl = tlogits[:, 1 + k :]  # target positions t+1+k for slots t = 0..n-1-k
        p = tl[..., draft_ids].softmax(-1)
        logq = o.logits[:, : n - k].float().log_softmax(-1)
        lk = -(p * logq).sum(-1).mean()
        total = total + decay**k * lk
        with torch.no_grad():
            agree = (draft_ids[o.logits[:, : n - k].argmax(-1)] == tl.argmax(-1)).float()
            rms = o.feedback[:, : n - k].float().pow(2).mean(-1).sqrt().mean()
        stats.append({"loss": float(lk.detach()), "top1": float(agree.mean()), "feedback_rms": float(rms)})
    return total, stats


def lr_at(args: DrafterTrainArgs, step: int, total: int) -> float:
    warm = max(1, int(args.warmup_frac * total))
    return warmup_cosine(args.lr, args.min_lr_frac, step, warm, min(1.0, (step - warm) / max(1, total - warm)))


def make_optimizer(model: Eagle3Drafter, args: DrafterTrainArgs) -> torch.optim.Optimizer:
    return adamw([p for p in model.parameters() if p.requires_grad], args.lr, args.betas, args.weight_decay)


def train_step(drafter, opt, target, args: DrafterTrainArgs, ids: torch.Tensor, lr: float) -> list[dict[str, float]]:
    set_lr(opt, lr)
    feats, tlogits = target_pass(target, ids, args.spec.aux_layer_ids)
    loss, stats = ttt_loss(drafter, ids, feats, tlogits, args.ttt_steps, args.loss_decay)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(drafter.parameters(), args.clip)
    opt.step()
    return stats


# -- evaluation -------------------------------------------------------------------------------------
@torch.no_grad()
def evaluate(drafter, target, windows: torch.Tensor, args: DrafterTrainArgs, batch: int = 4) -> dict[str, Any]:
    """Acceptance proxy on held-out text: per TTT step, greedy top-1 agreement of the drafter (mapped to
    target ids) with the target's argmax, and the mean run of leading agreements per slot (a teacher-
    forced stand-in for accepted drafts per round; inputs are the data tokens, not the drafts)."""
    was = drafter.training
    drafter.eval()
    k_steps = args.ttt_steps
    agree = torch.zeros(k_steps)
    loss = torch.zeros(k_steps)
    rms = torch.zeros(k_steps)
    count = torch.zeros(k_steps)
    runs, nruns = 0.0, 0
    draft_ids = drafter.draft_to_target(torch.arange(drafter.config.draft_vocab_size))
    for i in range(0, windows.shape[0], batch):
        ids = windows[i : i + batch]
        feats, tlogits = target_pass(target, ids, args.spec.aux_layer_ids)
        outs = drafter.ttt_forward(ids[:, 1:], feats[:, :-1], k_steps)
        n = ids.shape[1] - 1
        m = n - (k_steps - 1)  # slots where every step is valid
        ok = []
        for k, o in enumerate(outs):
            tl = tlogits[:, 1 + k :]
            hit = draft_ids[o.logits[:, : n - k].argmax(-1)] == tl.argmax(-1)
            p = tl[..., draft_ids].softmax(-1)
            loss[k] += float(-(p * o.logits[:, : n - k].float().log_softmax(-1)).sum(-1).sum())
            agree[k] += float(hit.float().sum())
            rms[k] += float(o.feedback[:, : n - k].float().pow(2).mean(-1).sqrt().sum())
            count[k] += hit.numel()
            ok.append(hit[:, :m])
        run = torch.stack(ok, -1).long().cumprod(-1).sum(-1)
        runs += float(run.sum())
        nruns += run.numel()
    drafter.train(was)
    r = lambda t: [round(float(x), 4) for x in t]  # noqa: E731
    return {
        "heldout_top1_agreement_per_step": r(agree / count),
        "heldout_soft_ce_per_step": r(loss / count),
        "heldout_feedback_rms_per_step": r(rms / count),
        "mean_leading_agreements": round(runs / max(1, nruns), 4),
        "acceptance_proxy_note": "teacher-forced TTT unroll on held-out stdlib modules; greedy top-1 vs target",
        "heldout_slots": int(count[0]),
    }


# -- checkpoints ------------------------------------------------------------------------------------
def _save_ckpt(ck: Path, drafter, opt, state: dict[str, Any]) -> None:
    save_ckpt(ck, {"drafter.safetensors": drafter}, {"optim.pt": opt}, state)


def _load_ckpt(ck: Path, drafter, opt) -> dict[str, Any] | None:
    return load_ckpt(ck, {"drafter.safetensors": drafter}, {"optim.pt": opt})


def save_final(drafter: Eagle3Drafter, out: Path, t2d: torch.Tensor, report: dict[str, Any]) -> Path:
    """speculators/vLLM layout via drifttool.model.checkpoint, with the training report beside it."""
    from drifttool.model.checkpoint import save_drafter

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_drafter(drafter, tmp, layout="speculators")
    (tmp / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


# -- the run ----------------------------------------------------------------------------------------
def plan_steps(args: DrafterTrainArgs, target, stream, d2t, work: Path, log) -> int:
    """One step count for every variant (same data, same steps), from EAGLE-3's measured speed."""
    plan = work / "plan.json"
    if plan.exists():
        return int(json.loads(plan.read_text())["steps"])
    if args.steps is not None:
        total = args.steps
    else:
        probe = init_drafter(args, target, d2t, "eagle3")
        opt = make_optimizer(probe, args)
        train_step(probe, opt, target, args, get_batch(stream, args, 0), 1e-5)
        n = 2 * max(args.long_every, 1)
        t0 = time.perf_counter()
        for s in range(n):
            train_step(probe, opt, target, args, get_batch(stream, args, s), 1e-5)
        sps = n / (time.perf_counter() - t0)
        total = max(10, int(args.minutes * 60 * sps * 0.93))
        log(f"drafters: {sps:.3f} steps/s = {sps * args.batch_tokens:.0f} tokens/s -> {total} steps per variant")
    work.mkdir(parents=True, exist_ok=True)
    plan.write_text(json.dumps({"steps": total}) + "\n")
    return total


def train_variant(args: DrafterTrainArgs, variant: str, target, stream, d2t, t2d, total: int, evalw, log) -> Path:
    out = Path(args.out_dir) / variant
    if (out / "report.json").exists():
        return out
    ck = Path(args.work_dir) / variant / "ckpt"
    drafter = init_drafter(args, target, d2t, variant)
    drafter.train()
    opt = make_optimizer(drafter, args)
    state = _load_ckpt(ck, drafter, opt) or {"step": 0, "elapsed": 0.0}
    if state["step"]:
        log(f"{variant}: resumed at step {state['step']}")
    budget_s = args.minutes * 60 * 2  # hard stop only: both variants should run the same planned steps
    budget = Budget(state, "elapsed", args.ckpt_minutes, lambda: _save_ckpt(ck, drafter, opt, state))
    while state["step"] < total:
        step = state["step"]
        stats = train_step(drafter, opt, target, args, get_batch(stream, args, step), lr_at(args, step, total))
        state["step"] = step + 1
        budget.tick()
        if step % 25 == 0 or state["step"] == total:
            log(json.dumps({"variant": variant, "step": step, "of": total,
                            "loss": [round(s["loss"], 3) for s in stats],
                            "top1": [round(s["top1"], 3) for s in stats],
                            "rms": [round(s["feedback_rms"], 2) for s in stats]}))
        budget.checkpoint_if_due()
        if args.steps is None and state["elapsed"] > budget_s:
            log(f"{variant}: wall-clock budget exhausted at step {state['step']} of {total}")
            state["truncated"] = True
            break
    report = {
        "variant": variant, **VARIANTS[variant], "target": str(args.target_dir), "steps": state["step"],
        "planned_steps": total, "truncated": bool(state.get("truncated")), "train_seconds": round(state["elapsed"]),
        "tokens": state["step"] * args.batch_tokens, "ttt_steps": args.ttt_steps, "loss_decay": args.loss_decay,
        "aux_layer_ids": list(args.spec.aux_layer_ids), "draft_vocab_size": args.spec.draft_vocab_size,
        "train_args": {k: v for k, v in asdict(args).items() if k not in ("spec",)},
        **evaluate(drafter, target, evalw, args),
    }
    log(f"[{variant}] " + json.dumps({k: report[k] for k in (
        "heldout_top1_agreement_per_step", "mean_leading_agreements", "heldout_feedback_rms_per_step")}))
    save_final(drafter, out, t2d, report)
    shutil.rmtree(ck, ignore_errors=True)
    return out


def train(args: DrafterTrainArgs, log=print) -> dict[str, Path]:
    """Train every variant in `args.variants` (skipping finished ones); returns {variant: folder}."""
    torch.set_num_threads(args.threads)
    target = load_frozen_target(args.target_dir)
    stream = np.load(Path(args.data_dir) / "train.npy")
    d2t, t2d = draft_vocab(stream, target.config.vocab_size, args.spec.draft_vocab_size)
    evalw = heldout_windows(Path(args.data_dir), args.window, args.eval_windows)
    work = Path(args.work_dir)
    total = plan_steps(args, target, stream, d2t, work, log)
    return {v: train_variant(args, v, target, stream, d2t, t2d, total, evalw, log) for v in args.variants}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="training.train_drafter", description=__doc__.splitlines()[0])
    p.add_argument("--target-dir", required=True)
    p.add_argument("--data-dir", default=str(DEFAULT_BUILD_DIR / "data"))
    p.add_argument("--work-dir", required=True, help="checkpoints and the shared step plan")
    p.add_argument("--out-dir", required=True, help="final drafters land in OUT_DIR/<variant>")
    p.add_argument("--minutes", type=float, default=9.0, help="wall-clock budget per variant")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    args = DrafterTrainArgs(target_dir=a.target_dir, data_dir=a.data_dir, work_dir=a.work_dir, out_dir=a.out_dir,
                            minutes=a.minutes, steps=a.steps, seed=a.seed, threads=a.threads)
    outs = train(args, log=lambda m: print(time.strftime("%H:%M:%S"), m, flush=True))
    print(json.dumps({k: str(v) for k, v in outs.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
