"""Teacher-forced target features in batches, bf16: the fast path of the real-target feature cache.

Drafter training needs, per position, the token, the aux features, the target's post-norm hidden state and its
argmax; none of that needs the target to *generate*, only to read. So conversations are rendered through the
chat template and run through the target B at a time (sorted by length, right-padded: causal attention never
lets a real position see the padding after it) under bf16 autocast, which doubles the per-core rate against
fp32 (features within ~1% relative error). Every `sample_every`-th conversation instead gets a response sampled
from the target (the KV-cached single-sequence path of `real_features.one`), so assistant turns the target itself
wrote stay in the mix. Shards are written in the format `real_features` writes and the trainer reads; a rerun
resumes after the last finished shard, and the conversation list is deterministic, so a fresh machine rebuilds
the same cache.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from .real_conversations import Conversation
from .real_features import PostGrab, hf_tokenizer, one, render, write_shard


@torch.no_grad()
def batch_features(model, aux_ids: list[int], batch: list[list[int]], autocast: bool = True,
                   ) -> list[dict[str, torch.Tensor]]:
    """One padded forward over `batch` (token lists); per sequence its unpadded ids/aux/post/top1."""
    layers = model.model.layers
    grabbed: dict[int, torch.Tensor] = {}
    handles = []
    for i in aux_ids:
        if i < len(layers):
            handles.append(layers[i].register_forward_pre_hook(
                lambda mod, args, kw, i=i: grabbed.__setitem__(i, args[0] if args else kw["hidden_states"]),
                with_kwargs=True))
        else:  # id L: the last layer's output before the final norm
            handles.append(layers[-1].register_forward_hook(
                lambda mod, args, out, i=i: grabbed.__setitem__(i, out[0] if isinstance(out, tuple) else out)))
    handles.append(model.model.norm.register_forward_hook(
        lambda mod, args, out: grabbed.__setitem__("post", out[0] if isinstance(out, tuple) else out)))
    n = max(len(s) for s in batch)
    ids = torch.zeros(len(batch), n, dtype=torch.long)
    for b, s in enumerate(batch):
        ids[b, : len(s)] = torch.tensor(s)
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            # the lm_head is skipped (logits over 49k tokens for every position are the costliest tensor here);
            # the argmax comes from the post-norm state times the output embeddings, row by row
            model.model(input_ids=ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    head = model.get_output_embeddings().weight
    pv = grabbed["post"]
    out = []
    for b, s in enumerate(batch):
        L = len(s)
        aux = torch.cat([grabbed[i][b, :L].float() for i in aux_ids], dim=-1)
        p = pv[b, :L].float()
        top1 = torch.cat([(p[j : j + 512] @ head.T).argmax(-1) for j in range(0, L, 512)]).int()
        out.append({"ids": torch.tensor(s, dtype=torch.int32), "aux": aux.half(), "post": p.half(), "top1": top1,
                    "prompt_len": torch.tensor([L])})
    return out


def extract_tf(convs: list[Conversation], target_dir: str | Path, out_dir: str | Path, max_len: int = 4096,
               batch_tokens: int = 2048, shard_tokens: int = 60_000, sample_every: int = 8, max_new: int = 48,
               seed: int = 0, minutes: float | None = None, autocast: bool = True, log=print) -> dict[str, Any]:
    """Fill `out_dir` with shards covering `convs` in order (resumes after the last finished shard)."""
    from safetensors.torch import save_file

    from drifttool.model.target import load_target

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = load_target(target_dir)
    model = target.model
    aux_ids = list(target.aux_layer_ids)
    tok = hf_tokenizer(target_dir)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    done = sorted(out.glob("shard-*.json"))
    start = json.loads(done[-1].read_text())["next"] if done else 0
    k = len(done)
    t0 = time.perf_counter()
    total = skipped = 0
    i = start
    # work in windows of conversations one shard long: sort a window by length, batch, then write in order
    while i < len(convs):
        window: list[tuple[int, Conversation, list[int]]] = []
        ntok = 0
        j = i
        while j < len(convs) and ntok < shard_tokens:
            ids = render(tok, convs[j], add_generation_prompt=True)
            if len(ids) + 8 > max_len:
                skipped += 1
            else:
                window.append((j, convs[j], ids))
                ntok += len(ids)
            j += 1
        recs: dict[int, dict[str, torch.Tensor]] = {}
        sampled = {w[0] for w in window if sample_every > 0 and w[0] % sample_every == 0}
        tf = [w for w in window if w[0] not in sampled]
        for w in window:
            if w[0] in sampled:  # a response sampled from the target, KV-cached
                post = PostGrab(model.model.norm)
                gen = torch.Generator().manual_seed(seed * 1_000_003 + w[0])
                recs[w[0]] = one(target, post, w[2], min(max_new, max_len - len(w[2])), eos, gen)
                post.handle.remove()
        tf.sort(key=lambda w: len(w[2]))
        b = 0
        while b < len(tf):
            e = b + 1
            while e < len(tf) and (e - b + 1) * len(tf[e][2]) <= batch_tokens:
                e += 1
            for w, r in zip(tf[b:e], batch_features(model, aux_ids, [w[2] for w in tf[b:e]], autocast)):
                recs[w[0]] = r
            b = e
        buf = [recs[w[0]] for w in window]
        for w, r in zip(window, buf):
            if not torch.isfinite(r["aux"]).all():
                raise RuntimeError(f"conversation {w[1].id}: aux features overflow fp16")
        meta = [{"id": w[1].id, "kind": w[1].kind, "tokens": int(r["ids"].numel()), "prompt": len(w[2]),
                 "sampled": w[0] in sampled} for w, r in zip(window, buf)]
        if buf:
            write_shard(out, k, buf, meta, j, save_file)
            k += 1
        total += sum(m["tokens"] for m in meta)
        el = time.perf_counter() - t0
        log(json.dumps({"shard": k - 1, "conversations": j, "tokens": total, "tok_per_s": round(total / el, 1)}))
        i = j
        if minutes is not None and el > minutes * 60:
            log(f"features: time budget reached after {j} conversations")
            break
    return {"shards": k, "next": i, "skipped_too_long": skipped, "tokens": total,
            "seconds": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    import argparse

    from drifttool.zoo import smollm2

    from . import real_conversations

    p = argparse.ArgumentParser(prog="training.tf_features", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--split", default="train", choices=["train", "heldout"])
    p.add_argument("--n", type=int, default=8000, help="conversations in the split")
    p.add_argument("--worker", type=int, default=0)
    p.add_argument("--workers", type=int, default=1, help="worker w takes conversations w, w+W, ...")
    p.add_argument("--max-len", type=int, default=4096)
    p.add_argument("--batch-tokens", type=int, default=2048)
    p.add_argument("--shard-tokens", type=int, default=60_000)
    p.add_argument("--sample-every", type=int, default=8, help="every N-th conversation: a target-sampled reply")
    p.add_argument("--max-new", type=int, default=48)
    p.add_argument("--long", action="store_true", help="conversations up to ~4k tokens (the 4096 window)")
    p.add_argument("--first", type=int, default=0,
                   help="start at conversation N of the split (new data beyond an earlier cache; own folder)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--minutes", type=float, default=None)
    p.add_argument("--target", default=None, help="target folder (default: the converted SmolLM2)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    convs = real_conversations.build(a.n, a.split, long=a.long)[a.first :][a.worker :: a.workers]
    # conversations from --first on get their own folder, so a cache of the first ones (same names) stays apart
    out = Path(a.out) / a.split / (f"w{a.worker}" + (f"-from{a.first}" if a.first else ""))
    res = extract_tf(convs, a.target or smollm2.fetch(), out, a.max_len, a.batch_tokens, a.shard_tokens,
                     a.sample_every, a.max_new, seed=a.worker, minutes=a.minutes,
                     log=lambda m: print(time.strftime("%H:%M:%S"), m, flush=True))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
