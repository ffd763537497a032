"""Train the tiny Llama target(s) of the zoo, resumably and within a wall-clock budget.

One run, two phases (docs/eagle3.md §8: a natural attention sink does not form on CPU budgets):
  A. plain LM loss, own warmup + cosine; at its end the "plain" target (no sink) is saved;
  B. continues from A with an auxiliary loss  λ·mean_{l>=1} relu(τ − m_l)  (m_l = layer l's mean attention
     on position 0 for queries >= 16) under eager attention, kept on to the end; saves the "sink" target.
Both are normal HF folders (config.json, float32 model.safetensors, tokenizer files, report.json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from . import DEFAULT_BUILD_DIR
from . import data as zdata
from .ckpt import load_ckpt, save_ckpt
from .schedule import Budget, StepArgs, adamw, cosine, set_lr
from .windows import batch_shape, heldout_windows, sample_windows

PHASES = ("A", "B")


@dataclass
class TargetSpec:
    """Model shape; the defaults are the bundled demo target (≈1.3M parameters)."""

    num_hidden_layers: int = 4
    hidden_size: int = 128
    num_attention_heads: int = 4
    head_dim: int = 32
    num_key_value_heads: int = 4
    intermediate_size: int = 352
    vocab_size: int = 2048
    max_position_embeddings: int = 1024
    rope_theta: float = 10000.0


@dataclass
class TrainArgs(StepArgs):
    build_dir: str = str(DEFAULT_BUILD_DIR)
    minutes_a: float = 25.0
    minutes_b: float = 15.0
    steps_a: int | None = None  # fixed step counts (tests); otherwise planned from measured speed
    steps_b: int | None = None
    weight_decay: float = 0.1
    batch_tokens: int = 4096
    sink_lambda: float = 1.0
    sink_tau: float = 0.5
    sink_min_query: int = 16
    eval_windows: int = 48
    max_bytes: int = 32_000_000
    spec: TargetSpec = field(default_factory=TargetSpec)


def llama_config(spec: TargetSpec):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": spec.rope_theta},
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=None,
        rms_norm_eps=1e-5,
        initializer_range=0.02,
    )


def new_model(spec: TargetSpec, seed: int):
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(llama_config(spec)).float()


# -- data -------------------------------------------------------------------------------------------
def get_batch(stream: np.ndarray, args: TrainArgs, phase: str, step: int) -> torch.Tensor:
    """BOS + the next window-1 stream tokens at offsets drawn from a generator keyed by (seed, phase,
    step): deterministic and resumable without saving RNG state."""
    return sample_windows(stream, *batch_shape(args, step), key=[args.seed, PHASES.index(phase), step])


# -- losses -----------------------------------------------------------------------------------------
def sink_masses(attentions, min_query: int) -> torch.Tensor:
    """Per layer: mean attention probability on position 0 over batch, heads and queries >= min_query."""
    return torch.stack([a[:, :, min_query:, 0].float().mean() for a in attentions])


def sink_aux_loss(attentions, args: TrainArgs) -> tuple[torch.Tensor, torch.Tensor]:
    m = sink_masses(attentions, args.sink_min_query)
    return args.sink_lambda * F.relu(args.sink_tau - m[1:]).mean(), m


def lr_at(args: TrainArgs, step: int, total: int, time_frac: float = 0.0) -> float:
    """Warmup + cosine over progress = max(step / total, fraction of the wall-clock budget used): on a
    machine that slows down (shared cores) the run still anneals by its deadline instead of being cut at
    a high learning rate. Without slowdowns it is the plain step schedule (steps are planned to fit)."""
    progress = min(1.0, max(step / max(1, total), time_frac))
    if progress < args.warmup_frac:
        return args.lr * min(1.0, (progress + 1 / max(1, total)) / args.warmup_frac)
    frac = (progress - args.warmup_frac) / (1 - args.warmup_frac)
    return cosine(args.lr, args.min_lr_frac, frac)


def train_step(model, opt, args: TrainArgs, ids: torch.Tensor, phase: str, lr: float) -> dict[str, float]:
    set_lr(opt, lr)
    if phase == "B":
        out = model(input_ids=ids, labels=ids, output_attentions=True)
        aux, m = sink_aux_loss(out.attentions, args)
        loss = out.loss + aux
    else:
        out = model(input_ids=ids, labels=ids)
        aux, m, loss = torch.zeros(()), None, out.loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
    opt.step()
    rec = {"loss": float(out.loss.detach()), "aux": float(aux.detach()), "gnorm": float(gnorm), "lr": lr}
    if m is not None:
        rec["sink"] = [round(float(x), 4) for x in m.detach()]
    return rec


def make_optimizer(model, args: TrainArgs) -> torch.optim.Optimizer:
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    keep = [p for n, p in model.named_parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": keep, "weight_decay": 0.0}]
    return adamw(groups, args.lr, args.betas)


def set_phase_attn(model, phase: str) -> None:
    """Phase B needs attention probabilities for its loss: eager attention from the fork to the end."""
    model.set_attn_implementation("eager" if phase == "B" else "sdpa")


# -- evaluation -------------------------------------------------------------------------------------
@torch.no_grad()
def evaluate(model, windows: torch.Tensor, min_query: int = 16, batch: int = 8) -> dict[str, Any]:
    """Held-out loss and attention on position 0 (per layer, per head) for queries >= min_query."""
    was = model.training
    impl = model.config._attn_implementation
    model.eval()
    model.set_attn_implementation("eager")
    tot_loss, tot_tok, head_sum, n = 0.0, 0, None, 0
    bos_ratio = []
    for i in range(0, windows.shape[0], batch):
        ids = windows[i : i + batch]
        out = model(input_ids=ids, labels=ids, output_attentions=True, output_hidden_states=True)
        ntok = ids.numel() - ids.shape[0]
        tot_loss += float(out.loss) * ntok
        tot_tok += ntok
        per_head = torch.stack([a[:, :, min_query:, 0].mean(dim=(0, 2)) for a in out.attentions])  # [L, nh]
        head_sum = per_head * ids.shape[0] if head_sum is None else head_sum + per_head * ids.shape[0]
        n += ids.shape[0]
        hs = out.hidden_states[-2]  # input of the last layer
        norms = hs.norm(dim=-1)
        bos_ratio.append(float((norms[:, 0] / norms[:, 1:].mean(-1)).mean()))
    model.set_attn_implementation(impl)
    model.train(was)
    heads = head_sum / n
    return {
        "heldout_loss": round(tot_loss / tot_tok, 4),
        "heldout_tokens": tot_tok,
        "attn_pos0_per_layer": [round(float(x), 4) for x in heads.mean(-1)],
        "attn_pos0_per_head": [[round(float(x), 4) for x in row] for row in heads],
        "bos_hidden_norm_ratio_last_layer_input": round(float(np.mean(bos_ratio)), 3),
        "attn_min_query": min_query,
    }


# -- checkpoints ------------------------------------------------------------------------------------
def _ckpt_dir(args: TrainArgs) -> Path:
    return Path(args.build_dir) / "target" / "ckpt"


def save_checkpoint(model, opt, state: dict[str, Any], args: TrainArgs) -> None:
    save_ckpt(_ckpt_dir(args), {"model.safetensors": model}, {"optim.pt": opt}, state)


def load_checkpoint(model, opt, args: TrainArgs) -> dict[str, Any] | None:
    return load_ckpt(_ckpt_dir(args), {"model.safetensors": model}, {"optim.pt": opt})


def export_hf(model, out_dir: Path, data_dir: Path, report: dict[str, Any]) -> None:
    """A normal HF folder: config.json, float32 model.safetensors, tokenizer files, report.json."""
    impl = model.config._attn_implementation
    model.set_attn_implementation("sdpa")  # keep eager out of the saved config
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    for f in (data_dir / "tokenizer").iterdir():
        shutil.copy2(f, tmp / f.name)
    (tmp / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    model.set_attn_implementation(impl)


# -- planning ---------------------------------------------------------------------------------------
def measure_steps_per_sec(model, args: TrainArgs, stream: np.ndarray, phase: str, n: int = 8) -> float:
    """Time a few steps on a throwaway copy (the real model and optimizer are untouched)."""
    import copy

    probe = copy.deepcopy(model)
    set_phase_attn(probe, phase)
    opt = make_optimizer(probe, args)
    train_step(probe, opt, args, get_batch(stream, args, phase, 0), phase, 1e-5)  # warm-up, untimed
    t0 = time.perf_counter()
    for s in range(n):
        train_step(probe, opt, args, get_batch(stream, args, phase, s), phase, 1e-5)
    return n / (time.perf_counter() - t0)


def plan_steps(args: TrainArgs, phase: str, model, stream: np.ndarray, log) -> int:
    fixed = args.steps_a if phase == "A" else args.steps_b
    if fixed is not None:
        return fixed
    sps = measure_steps_per_sec(model, args, stream, phase)
    minutes = args.minutes_a if phase == "A" else args.minutes_b
    total = max(10, int(minutes * 60 * sps * 0.93))  # ~7% for evals, checkpoints and load noise
    log(f"phase {phase}: {sps:.3f} steps/s = {sps * args.batch_tokens:.0f} tokens/s -> {total} steps")
    return total


# -- the run ----------------------------------------------------------------------------------------
def train(args: TrainArgs, resume: bool = False, log=print) -> dict[str, Path]:
    """Run (or resume) both phases; returns {"plain": dir, "sink": dir} of the exported HF targets."""
    torch.set_num_threads(args.threads)
    build = Path(args.build_dir)
    data_dir = zdata.prepare(build, args.max_bytes, args.spec.vocab_size)
    stream = np.load(data_dir / "train.npy")
    evalw = heldout_windows(data_dir, args.window, args.eval_windows)
    outs = {"plain": build / "target" / "plain", "sink": build / "target" / "sink"}

    model = new_model(args.spec, args.seed)
    opt = make_optimizer(model, args)
    state = load_checkpoint(model, opt, args) if resume else None
    if state is None:
        if (_ckpt_dir(args) / "state.json").exists():
            raise SystemExit(f"{_ckpt_dir(args)} exists: pass --resume or delete it")
        state = {"phase": "A", "step": 0, "planned": {}, "elapsed": {"A": 0.0, "B": 0.0},
                 "args": asdict(args)}
    else:
        log(f"resumed: phase {state['phase']} step {state['step']}")

    while state["phase"] in PHASES:
        phase = state["phase"]
        set_phase_attn(model, phase)
        model.train()
        if phase not in state["planned"]:
            state["planned"][phase] = plan_steps(args, phase, model, stream, log)
        total = state["planned"][phase]
        fixed = (args.steps_a if phase == "A" else args.steps_b) is not None
        budget_s = (args.minutes_a if phase == "A" else args.minutes_b) * 60
        budget = Budget(state["elapsed"], phase, args.ckpt_minutes, lambda: save_checkpoint(model, opt, state, args))
        tok = 0
        while state["step"] < total:
            step = state["step"]
            time_frac = 0.0 if fixed else state["elapsed"][phase] / budget_s
            rec = train_step(model, opt, args, get_batch(stream, args, phase, step), phase,
                             lr_at(args, step, total, time_frac))
            state["step"] = step + 1
            tok += args.batch_tokens
            run_s = budget.tick()
            if step % 25 == 0 or state["step"] == total:
                log(json.dumps({"phase": phase, "step": step, "of": total, "tok_s": round(tok / run_s), **rec}))
            budget.checkpoint_if_due()
            if not fixed and state["elapsed"][phase] >= budget_s:
                log(f"phase {phase}: wall-clock budget reached at step {state['step']} of {total} (annealed)")
                state.setdefault("truncated", {})[phase] = state["step"]
                break
        name = "plain" if phase == "A" else "sink"
        report = {"variant": name, "phase": phase, "steps": state["step"], "planned_steps": total,
                  "tokens": state["step"] * args.batch_tokens, "train_seconds": round(state["elapsed"][phase]),
                  "sink_aux": {"lambda": args.sink_lambda, "tau": args.sink_tau,
                               "min_query": args.sink_min_query} if phase == "B" else None,
                  **evaluate(model, evalw, args.sink_min_query)}
        if phase == "B":
            report["tokens_total"] = report["tokens"] + state.get("tokens_A", 0)
        else:
            state["tokens_A"] = report["tokens"]
        log(f"[{name}] " + json.dumps({k: report[k] for k in ("heldout_loss", "attn_pos0_per_layer")}))
        export_hf(model, outs[name], data_dir, report)
        state["phase"] = "B" if phase == "A" else "done"
        state["step"] = 0
        save_checkpoint(model, opt, state, args)
    return outs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="training.train_target", description=__doc__.splitlines()[0])
    p.add_argument("--build-dir", default=str(DEFAULT_BUILD_DIR))
    p.add_argument("--minutes-a", type=float, default=25.0, help="phase A (plain LM) wall-clock budget")
    p.add_argument("--minutes-b", type=float, default=15.0, help="phase B (sink aux loss) wall-clock budget")
    p.add_argument("--steps-a", type=int, default=None)
    p.add_argument("--steps-b", type=int, default=None)
    p.add_argument("--batch-tokens", type=int, default=4096)
    p.add_argument("--max-bytes", type=int, default=32_000_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--resume", action="store_true")
    a = p.parse_args(argv)
    os.environ.setdefault("RAYON_NUM_THREADS", str(a.threads))
    args = TrainArgs(build_dir=a.build_dir, minutes_a=a.minutes_a, minutes_b=a.minutes_b, steps_a=a.steps_a,
                     steps_b=a.steps_b, batch_tokens=a.batch_tokens, max_bytes=a.max_bytes, seed=a.seed,
                     threads=a.threads)
    outs = train(args, resume=a.resume, log=lambda m: print(time.strftime("%H:%M:%S"), m, flush=True))
    print(json.dumps({k: str(v) for k, v in outs.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
