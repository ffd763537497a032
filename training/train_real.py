"""Train EAGLE-3 and EAGLE-3.1 drafters against the real target from cached features (training-time test, docs/eagle3.md §5).

Both variants live in one process and take every optimiser step on the same batch, from the same initial
weights (built under one seed from the EAGLE-3 config; 3.1's extra `fc_norm` weights start at 1): the only
difference is `fc_norm` + `norm_output`. The feature cache may still be growing while this runs (the
extractor writes shards in the background); each step samples conversations from the shards present, with
an RNG keyed by (seed, step). Learning rate: linear warm-up, then cosine over the wall-clock budget, so a
run stopped early has still annealed as far as its time allowed. Checkpoints every few minutes; each one
also exports both drafters (speculators layout, bf16, no embeddings: they are the target's) with a report
of held-out teacher-forced agreement per TTT step, so an interrupted run always leaves usable drafters.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from drifttool.model.checkpoint import (
    save_drafter,  # imported up front: a long run must not pick up later code edits
)
from drifttool.model.config import DrafterConfig
from drifttool.model.drafter import Eagle3Drafter

from .ckpt import load_ckpt, save_ckpt
from .drafters import VARIANTS, DrafterShape, variant_drafters
from .schedule import Budget, adamw, set_lr, warmup_cosine
from .sink_init import SinkInitError, check_sink_layer, init_from_sink_layer


@dataclass
class RealArgs:
    features: str = "runs/real/features"
    work: str = "runs/real/train"
    out: str = "runs/real/drafters"
    target_dir: str = ""
    init: str = ""  # warm start: a folder of exported drafters (<variant>/model.safetensors) and their draft vocab
    sink_layer: int = -1  # >= 0: start both drafters from that target layer (training/sink_init.py)
    minutes: float = 60.0
    max_steps: int = 0  # > 0: a step budget instead (the schedule over steps): a replicate of a run on any machine
    lr: float = 1e-3
    warmup_steps: int = 10
    min_lr_frac: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    clip: float = 0.5
    batch_tokens: int = 2048
    trained_window: int = 2048  # conversations are cut at the feature extractor's --max-len
    bf16: bool = True  # drafter forward/backward under bf16 autocast (~1.5x on CPU), loss and optimiser fp32
    variants: tuple[str, ...] = ("eagle3", "eagle3.1")
    series_every: int = 1  # keep every N-th checkpoint's export under out/steps/ (drift across training)
    ttt_steps: int = 3
    keep: float = 0.5  # fraction of slots scored per TTT step (lm_head + loss)
    loss_decay: float = 0.8
    seed: int = 0
    ckpt_minutes: float = 10.0
    threads: int = 1
    hidden_size: int = 576
    num_attention_heads: int = 9
    num_key_value_heads: int = 3
    head_dim: int = 64
    intermediate_size: int = 1536
    draft_vocab_size: int = 4096
    aux_layer_ids: list[int] = field(default_factory=lambda: [2, 15, 27])


# -- the feature cache --------------------------------------------------------------------------------
class Shards:
    """Conversations in the cache: (file, start, end) rows, re-listed on demand as shards appear."""

    def __init__(self, root: Path):
        self.root = root
        self.files: dict[Path, Any] = {}
        self.rows: list[tuple[Path, int, int]] = []

    def refresh(self) -> int:
        for meta in sorted(self.root.glob("w*/shard-*.json")):
            f = meta.with_suffix(".safetensors")
            if f in self.files or not f.is_file():
                continue
            h = safe_open(str(f), framework="pt")
            self.files[f] = h
            off = h.get_tensor("offsets").tolist()
            self.rows += [(f, off[i], off[i + 1]) for i in range(len(off) - 1)]
        return len(self.rows)

    def get(self, row: tuple[Path, int, int]) -> dict[str, torch.Tensor]:
        f, a, b = row
        h = self.files[f]
        return {k: h.get_slice(k)[a:b] for k in ("ids", "aux", "post", "top1")}

    def tokens(self) -> int:
        return sum(b - a for _, a, b in self.rows)


def cover(shards: Shards, d2t: torch.Tensor, vocab: int) -> float:
    """The share of the cached target argmax choices a draft vocab covers (an upper bound on depth-1 acceptance)."""
    top = torch.zeros(vocab, dtype=torch.long)
    for row in shards.rows:
        top += torch.bincount(shards.get(row)["top1"].long(), minlength=vocab)[:vocab]
    return float(top[torch.arange(len(d2t)) + d2t].sum() / top.sum().clamp(min=1))


def warm_start(models: dict[str, Eagle3Drafter], init: Path) -> None:
    """Each variant's weights from `init/<variant>` (an export of this trainer: speculators layout, no
    embeddings); the draft vocab must be the one the models were built with."""
    from safetensors.torch import load_file

    for v, m in models.items():
        sd = load_file(str(init / v / "model.safetensors"))
        if not torch.equal(sd.pop("d2t").long(), m.d2t.long()):
            raise SystemExit(f"--init {init / v}: another draft vocabulary than {init}/eagle3's")
        sd.pop("t2d", None)
        missing, unexpected = m.load_state_dict({k: t.float() for k, t in sd.items()}, strict=False)
        if unexpected or set(missing) - {"embed_tokens.weight", "d2t"}:  # d2t: checked equal above
            raise SystemExit(f"--init {init / v}: tensors do not match variant {v} ({missing}, {unexpected})")


def init_vocab(init: Path) -> tuple[torch.Tensor, torch.Tensor]:
    with safe_open(str(init / "eagle3" / "model.safetensors"), framework="pt") as h:
        return h.get_tensor("d2t").long(), h.get_tensor("t2d").bool()


def draft_vocab(shards: Shards, target_dir: Path, vocab: int, n: int, conversations: int = 6000,
                ) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The n most frequent tokens of the training data (ties -> lower id), as EAGLE picks its draft vocab:
    every training conversation's rendered prompt (tokenizer only, so the choice does not depend on how far
    the feature cache has grown) plus the cached responses. Returns d2t, t2d and the share of the cached
    target argmax choices the draft vocab covers (an upper bound on depth-1 acceptance)."""
    from . import real_conversations
    from .real_features import hf_tokenizer, render

    tok = hf_tokenizer(target_dir)
    counts = torch.zeros(vocab, dtype=torch.long)
    for c in real_conversations.build(conversations, "train"):
        counts += torch.bincount(torch.tensor(render(tok, c)), minlength=vocab)[:vocab]
    top = torch.zeros(vocab, dtype=torch.long)
    for row in shards.rows:
        d = shards.get(row)
        counts += torch.bincount(d["ids"].long(), minlength=vocab)[:vocab]
        top += torch.bincount(d["top1"].long(), minlength=vocab)[:vocab]
    order = torch.argsort(-counts * vocab - (vocab - 1 - torch.arange(vocab)), stable=True)[:n]  # ties -> low id
    ids = order.sort().values
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[ids] = True
    return ids - torch.arange(n), t2d, float(top[ids].sum() / top.sum().clamp(min=1))


# -- model --------------------------------------------------------------------------------------------
def shape(a: RealArgs) -> DrafterShape:
    """The drafter sizes RealArgs carries (flat, as the command line and the report name them)."""
    return DrafterShape(**{f.name: getattr(a, f.name) for f in fields(DrafterShape)})


def drafter_config(a: RealArgs, tcfg: dict[str, Any], variant: str) -> DrafterConfig:
    rope = tcfg.get("rope_parameters") or {}
    return shape(a).config(variant, vocab_size=tcfg["vocab_size"], target_hidden_size=tcfg["hidden_size"],
                           rms_norm_eps=tcfg["rms_norm_eps"],
                           rope_theta=float(rope.get("rope_theta", tcfg.get("rope_theta", 10000.0))),
                           max_position_embeddings=tcfg["max_position_embeddings"], trained_window=a.trained_window)


def build_pair(a: RealArgs, tcfg, embed: torch.Tensor, d2t: torch.Tensor) -> dict[str, Eagle3Drafter]:
    return variant_drafters(lambda v: drafter_config(a, tcfg, v), a.variants, a.seed, embed, d2t)


def soft_targets(conv: dict[str, torch.Tensor], e_draft: torch.Tensor, steps: int, keep: float = 1.0,
                 gen: torch.Generator | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per TTT step k: the scored slots and the target's distribution over the draft vocab there (from the cached
    post-norm state times the tied embeddings). Computed once per conversation and shared by every variant that
    trains on the batch, so both see the same slots and labels. `keep` < 1 scores a random fraction of slots."""
    n = conv["ids"].shape[0] - 1
    post_t = conv["post"].float()
    out = []
    for k in range(steps):
        if n - k <= 0:
            break
        sel = torch.arange(n - k)
        if keep < 1.0:
            sel = sel[torch.rand(n - k, generator=gen) < keep]
        out.append((sel, (post_t[1 + k + sel] @ e_draft.T).softmax(-1)))
    return out


def ttt_loss(m: Eagle3Drafter, conv: dict[str, torch.Tensor], e_draft: torch.Tensor, draft_ids: torch.Tensor,
             steps: int, decay: float, keep: float = 1.0, gen: torch.Generator | None = None,
             targets: list[tuple[torch.Tensor, torch.Tensor]] | None = None, bf16: bool = False,
             ) -> tuple[torch.Tensor, list[list[float]]]:
    """Σ_k decay^k · soft-CE(step k, target softmax over the draft vocab) summed over scored slots; stats
    per step: [loss sum, top-1 hits (draft argmax mapped to target id == target argmax), count, feedback
    RMS sum]. The decoder layer runs on every slot (they are keys and feed the next step); only the lm_head and
    the loss are restricted to the scored slots (`targets`, else drawn here with `keep`/`gen`). `bf16` runs the
    drafter under bf16 autocast (the loss in fp32)."""
    ids = conv["ids"].long()[None]
    feats = conv["aux"].float()[None]
    n = ids.shape[1] - 1
    if targets is None:
        targets = soft_targets(conv, e_draft, steps, keep, gen)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        outs = m.ttt_forward(ids[:, 1:], feats[:, :-1], steps, logits=False)
    top1 = conv["top1"].long()
    total = feats.new_zeros(())
    stats = []
    for k, (o, (sel, p)) in enumerate(zip(outs, targets)):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = m.lm_head(o.post[0, sel])
        lk = -(p * logits.float().log_softmax(-1)).sum(-1).sum()
        total = total + decay**k * lk
        with torch.no_grad():
            hits = (draft_ids[logits.argmax(-1)] == top1[1 + k + sel]).sum()
            rms = o.feedback[0, : n - k].float().pow(2).mean(-1).sqrt().mean() * len(sel)
        stats.append([float(lk.detach()), float(hits), float(len(sel)), float(rms)])
    return total, stats


def lr_at(a: RealArgs, step: int, elapsed: float) -> float:
    done = step / a.max_steps if a.max_steps else elapsed / (a.minutes * 60)
    return warmup_cosine(a.lr, a.min_lr_frac, step, a.warmup_steps, min(1.0, done))


def running(a: RealArgs, state: dict[str, Any]) -> bool:
    """Within the budget: steps when one is set (same schedule however fast the machine), else wall clock."""
    return state["step"] < a.max_steps if a.max_steps else state["elapsed"] < a.minutes * 60


@torch.no_grad()
def evaluate(models: dict[str, Eagle3Drafter], held: Shards, e_draft, draft_ids, steps: int,
             limit: int | None = None) -> dict[str, Any]:
    """Teacher-forced TTT on held-out conversations: per step, top-1 agreement with the target's argmax.
    Step 0's agreement is the greedy depth-1 acceptance rate on these positions (drafter inputs are target
    features there, exactly as in a real round)."""
    out = {}
    for v, m in models.items():
        m.eval()
        acc = torch.zeros(steps, 4)
        for row in held.rows[:limit]:
            _, st = ttt_loss(m, held.get(row), e_draft, draft_ids, steps, 1.0)
            acc[: len(st)] += torch.tensor(st)
        m.train()
        out[v] = {"heldout_top1_per_step": [round(float(x), 4) for x in acc[:, 1] / acc[:, 2]],
                  "heldout_ce_per_step": [round(float(x), 4) for x in acc[:, 0] / acc[:, 2]],
                  "heldout_feedback_rms_per_step": [round(float(x), 3) for x in acc[:, 3] / acc[:, 2]],
                  "heldout_positions": int(acc[0, 2])}
    return out


# -- the run ------------------------------------------------------------------------------------------
def _target_bits(target_dir: Path) -> tuple[dict[str, Any], torch.Tensor]:
    tcfg = json.loads((target_dir / "config.json").read_text())
    with safe_open(str(target_dir / "model.safetensors"), framework="pt") as h:
        embed = h.get_tensor("model.embed_tokens.weight").float()
    return tcfg, embed


def _ckpt_files(models, opts) -> tuple[dict, dict]:
    return {f"{v}.safetensors": m for v, m in models.items()}, {f"{v}.optim.pt": opts[v] for v in models}


def export(models, out: Path, report: dict[str, Any]) -> None:
    """Both drafters in the speculators layout, bf16, without embed_tokens (drifttool and vLLM take the
    target's when a checkpoint has none), each with its report.json."""
    from safetensors.torch import load_file, save_file

    for v, m in models.items():
        dst = out / v
        tmp = out / f".{v}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        save_drafter(m, tmp, layout="speculators")
        for f in tmp.glob("*.safetensors"):
            sd = load_file(str(f))
            sd.pop("embed_tokens.weight", None)
            sd = {k: (t.to(torch.bfloat16) if t.is_floating_point() else t) for k, t in sd.items()}
            save_file(sd, str(f), metadata={"format": "pt"})
        rep = {"variant": v, **VARIANTS[v], **report["common"], **report["eval"].get(v, {})}
        (tmp / "report.json").write_text(json.dumps(rep, indent=1) + "\n")
        shutil.rmtree(dst, ignore_errors=True)
        tmp.rename(dst)


def train(a: RealArgs, log=print) -> None:
    torch.set_num_threads(a.threads)
    work, out = Path(a.work), Path(a.out)
    work.mkdir(parents=True, exist_ok=True)
    tcfg, embed = _target_bits(Path(a.target_dir))
    shards, held = Shards(Path(a.features) / "train"), Shards(Path(a.features) / "heldout")
    shards.refresh()
    held.refresh()
    if not shards.rows:
        raise SystemExit(f"no feature shards under {a.features}/train yet")
    vocab_file = work / "vocab.safetensors"
    if vocab_file.is_file():
        from safetensors.torch import load_file

        vv = load_file(str(vocab_file))
        d2t, t2d, coverage = vv["d2t"], vv["t2d"], float(vv["coverage"])
    elif a.init:  # warm start: keep the vocab the initial drafters were trained with
        from safetensors.torch import save_file

        d2t, t2d = init_vocab(Path(a.init))
        coverage = cover(shards, d2t, tcfg["vocab_size"])
        save_file({"d2t": d2t, "t2d": t2d, "coverage": torch.tensor(coverage)}, str(vocab_file))
    else:
        from safetensors.torch import save_file

        d2t, t2d, coverage = draft_vocab(shards, Path(a.target_dir), tcfg["vocab_size"], a.draft_vocab_size)
        save_file({"d2t": d2t, "t2d": t2d, "coverage": torch.tensor(coverage)}, str(vocab_file))
    log(f"draft vocab {a.draft_vocab_size}: covers {coverage:.3f} of the target's argmax tokens in the cache")
    draft_ids = torch.arange(a.draft_vocab_size) + d2t
    e_draft = embed[draft_ids]
    models = build_pair(a, tcfg, embed, d2t)
    fresh = not (work / "ckpt" / "state.json").exists()
    sink = {}
    if a.sink_layer >= 0:  # also on resume: the report says the recipe; the checkpoint then overwrites the weights
        sink = init_from_sink_layer(models, Path(a.target_dir), a.sink_layer)
        if fresh:
            log(f"sink init: both drafters start as target layer {a.sink_layer} (aux slot {sink['aux_slot']})")
    if a.init and fresh:
        warm_start(models, Path(a.init))
        log(f"warm start from {a.init}")
    opts = {v: adamw([p for p in m.parameters() if p.requires_grad], a.lr, a.betas, 0.0) for v, m in models.items()}
    state: dict[str, Any] = load_ckpt(work / "ckpt", *_ckpt_files(models, opts)) or {"step": 0, "elapsed": 0.0,
                                                                                      "tokens": 0, "checkpoints": 0}
    if state["step"]:
        log(f"resumed at step {state['step']}")
    curves = (work / "curves.jsonl").open("a")

    def checkpoint(final: bool = False) -> None:
        save_ckpt(work / "ckpt", *_ckpt_files(models, opts), state)
        # intermediate checkpoints score 8 held-out conversations (cheap), the final one all of them
        ev = evaluate(models, held, e_draft, draft_ids, a.ttt_steps, None if final else 8) if held.rows else {}
        curves.write(json.dumps({"step": state["step"], "eval": ev}) + "\n")
        curves.flush()
        common = {"target": "SmolLM2-135M-Instruct (Q4_1 de-quantised)", "steps": state["step"],
                  "train_tokens_seen": state["tokens"], "cache_tokens": shards.tokens(),
                  "cache_conversations": len(shards.rows), "train_seconds": round(state["elapsed"]),
                  "draft_vocab_coverage": round(coverage, 4), "final": final, **({"sink_init": sink} if sink else {}),
                  "train_args": {k: v for k, v in asdict(a).items()}}
        export(models, out, {"common": common, "eval": ev})
        if a.series_every and (state.get("checkpoints", 0) % a.series_every == 0 or final):
            series = out / "steps" / f"step-{state['step']:06d}"  # one folder per checkpoint: drift over training
            series.mkdir(parents=True, exist_ok=True)
            for v in models:
                shutil.copytree(out / v, series / v, dirs_exist_ok=True)
        state["checkpoints"] = state.get("checkpoints", 0) + 1
        log(json.dumps({"checkpoint": state["step"], "eval": {v: e["heldout_top1_per_step"] for v, e in ev.items()}}))

    budget = Budget(state, "elapsed", a.ckpt_minutes, checkpoint)
    if sink and state["step"] == 0 and not (out / "steps" / "step-000000").exists():
        checkpoint()  # the drafters at initialisation, kept under out/steps/step-000000 (measured like the rest)
    while running(a, state):
        step = state["step"]
        t_step = time.monotonic()
        if step % 20 == 0:
            shards.refresh()
        rng = random.Random(f"{a.seed}-{step}")
        batch, ntok = [], 0
        while ntok < a.batch_tokens:
            row = rng.choice(shards.rows)
            batch.append(row)
            ntok += row[2] - row[1]
        convs = [shards.get(r) for r in batch]
        gen = torch.Generator().manual_seed(a.seed * 7919 + step)  # the same scored slots for every variant
        labels = [soft_targets(c, e_draft, a.ttt_steps, a.keep, gen) for c in convs]
        lr = lr_at(a, step, state["elapsed"])
        rec: dict[str, Any] = {"step": step, "lr": round(lr, 7), "tokens": ntok}
        for v, m in models.items():
            opt = opts[v]
            set_lr(opt, lr)
            opt.zero_grad(set_to_none=True)
            agg = torch.zeros(a.ttt_steps, 4)
            for c, lab in zip(convs, labels):
                loss, st = ttt_loss(m, c, e_draft, draft_ids, a.ttt_steps, a.loss_decay, targets=lab, bf16=a.bf16)
                (loss / ntok).backward()
                agg[: len(st)] += torch.tensor(st)
            torch.nn.utils.clip_grad_norm_(m.parameters(), a.clip)
            opt.step()
            rec[v] = {"loss": [round(float(x), 3) for x in agg[:, 0] / agg[:, 2]],
                      "top1": [round(float(x), 3) for x in agg[:, 1] / agg[:, 2]],
                      "rms": [round(float(x), 2) for x in agg[:, 3] / agg[:, 2]]}
        state["step"] = step + 1
        state["tokens"] += ntok
        budget.tick()
        rec["elapsed"] = round(state["elapsed"])
        rec["tokens_per_s"] = round(ntok / max(time.monotonic() - t_step, 1e-9), 1)  # per variant: a stall shows
        curves.write(json.dumps(rec) + "\n")
        curves.flush()
        log(json.dumps({k: rec[k] for k in ("step", "lr", "elapsed", "tokens", "tokens_per_s")}
                       | {v: rec[v]["top1"] for v in models}))
        budget.checkpoint_if_due()
    checkpoint(final=True)


def main(argv: list[str] | None = None) -> int:
    from drifttool.zoo import smollm2

    p = argparse.ArgumentParser(prog="training.train_real", description=__doc__.splitlines()[0])
    p.add_argument("--features", default=RealArgs.features)
    p.add_argument("--work", default=RealArgs.work)
    p.add_argument("--out", default=RealArgs.out)
    p.add_argument("--minutes", type=float, default=RealArgs.minutes)
    p.add_argument("--steps", type=int, default=0, help="a step budget in place of --minutes (schedule over steps)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--draft-vocab", type=int, default=RealArgs.draft_vocab_size)
    p.add_argument("--batch-tokens", type=int, default=RealArgs.batch_tokens)
    p.add_argument("--lr", type=float, default=RealArgs.lr)
    p.add_argument("--trained-window", type=int, default=RealArgs.trained_window)
    p.add_argument("--fp32", action="store_true", help="no bf16 autocast")
    p.add_argument("--ckpt-minutes", type=float, default=RealArgs.ckpt_minutes)
    p.add_argument("--init", default="", help="warm start from a folder of exported drafters (e.g. the shipped ones)")
    p.add_argument("--variants", default=",".join(RealArgs.variants), help="comma list (one process per variant)")
    p.add_argument("--sink-layer", type=int, default=None,
                   help="start both drafters from this target layer (its input must be one of the aux layers); "
                        "leave out for the scratch recipe")
    p.add_argument("--check", action="store_true",
                   help="check the settings (sink layer) and exit before anything is read or written")
    p.add_argument("--seed", type=int, default=RealArgs.seed,
                   help="initial weights, batch order and scored slots (another seed: a replicate run)")
    x = p.parse_args(argv)
    a = RealArgs(features=x.features, work=x.work, out=x.out, target_dir=str(smollm2.fetch()), minutes=x.minutes,
                 threads=x.threads, draft_vocab_size=x.draft_vocab, batch_tokens=x.batch_tokens, lr=x.lr,
                 trained_window=x.trained_window, bf16=not x.fp32, ckpt_minutes=x.ckpt_minutes,
                 variants=tuple(x.variants.split(",")), init=x.init, seed=x.seed,
                 max_steps=x.steps, sink_layer=-1 if x.sink_layer is None else x.sink_layer)
    try:
        if x.sink_layer is not None:  # bad input (a negative layer too) is refused before any feature is read
            tcfg = json.loads((Path(a.target_dir) / "config.json").read_text())
            check_sink_layer(x.sink_layer, tcfg["num_hidden_layers"], list(a.aux_layer_ids))
        if x.check:
            return 0
        train(a, log=lambda m: print(time.strftime("%H:%M:%S"), m, flush=True))
    except SinkInitError as e:
        print(f"training.train_real: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
