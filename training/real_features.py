"""Target-generated responses and the target features drafters train on, cached on disk, resumable.

For each conversation: render it through the tokenizer's chat template, let the target sample a response
(temperature 0.7, stop at end-of-turn) and keep, for every position, what drafter training needs: the token
id, the aux features (inputs of the aux layers, fp16), the target's post-norm last hidden state (fp16; the
target's logits over any vocabulary subset are `post @ E[subset].T`, E = tied embeddings) and the target's
argmax token. Prefill and sampling share one KV cache, so the response costs no second prompt pass.
Shards of ~`shard_tokens` tokens are written atomically as safetensors; a rerun skips finished shards.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch

from drifttool.model.target import Target, load_target

from .real_conversations import Conversation


def render(tokenizer, conv: Conversation, add_generation_prompt: bool = True) -> list[int]:
    out = tokenizer.apply_chat_template(conv.messages, add_generation_prompt=add_generation_prompt, tokenize=True)
    if hasattr(out, "keys"):
        out = out["input_ids"]
    return list(out)


class PostGrab:
    """Forward hook on the target's final norm: its output is what the lm_head sees."""

    def __init__(self, norm: torch.nn.Module):
        self.value: torch.Tensor | None = None
        self.handle = norm.register_forward_hook(self)

    def __call__(self, mod, args, out):
        self.value = out[0]


@torch.no_grad()
def one(target: Target, post: PostGrab, ids: list[int], max_new: int, eos: int, gen: torch.Generator,
        temperature: float = 0.7) -> dict[str, torch.Tensor]:
    target.reset()
    seq = list(ids)
    feats, posts, tops = [], [], []
    step = torch.tensor(seq)
    for i in range(max_new + 1):
        out = target.forward(step)
        feats.append(out.features.half())
        posts.append(post.value.half())
        tops.append(out.logits.argmax(-1).int())
        if i == max_new or seq[-1] == eos and i > 0:
            break
        p = (out.logits[-1] / temperature).softmax(-1)
        nxt = int(torch.multinomial(p, 1, generator=gen))
        seq.append(nxt)
        step = torch.tensor([nxt])
    n = sum(f.shape[0] for f in feats)
    return {"ids": torch.tensor(seq[:n], dtype=torch.int32), "aux": torch.cat(feats), "post": torch.cat(posts),
            "top1": torch.cat(tops), "prompt_len": torch.tensor([len(ids)])}


def extract(convs: list[Conversation], target_dir: str | Path, out_dir: str | Path, max_len: int = 2048,
            max_new: int = 96, shard_tokens: int = 60_000, seed: int = 0, minutes: float | None = None,
            log=print) -> dict[str, Any]:
    """Fill `out_dir` with shards covering `convs` in order; resumes after the last finished shard."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = load_target(target_dir)
    tok = hf_tokenizer(target_dir)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    post = PostGrab(target.model.model.norm)
    done = sorted(out.glob("shard-*.json"))
    start = json.loads(done[-1].read_text())["next"] if done else 0
    k = len(done)
    t0 = time.perf_counter()
    buf: list[dict[str, torch.Tensor]] = []
    meta: list[dict[str, Any]] = []
    ntok = total = skipped = 0
    i = start
    for i in range(start, len(convs)):
        c = convs[i]
        ids = render(tok, c)
        if len(ids) + 8 > max_len:
            skipped += 1
            continue
        gen = torch.Generator().manual_seed(seed * 1_000_003 + i)
        rec = one(target, post, ids, min(max_new, max_len - len(ids)), eos, gen)
        if not torch.isfinite(rec["aux"]).all():
            raise RuntimeError(f"conversation {c.id}: aux features overflow fp16")
        buf.append(rec)
        meta.append({"id": c.id, "kind": c.kind, "tokens": int(rec["ids"].numel()), "prompt": len(ids)})
        ntok += int(rec["ids"].numel())
        if ntok >= shard_tokens or i == len(convs) - 1:
            write_shard(out, k, buf, meta, i + 1, save_file)
            total += ntok
            el = time.perf_counter() - t0
            log(json.dumps({"shard": k, "conversations": i + 1, "tokens": total, "tok_per_s": round(total / el, 1)}))
            k += 1
            buf, meta, ntok = [], [], 0
            if minutes is not None and el > minutes * 60:
                log(f"features: time budget reached after {i + 1} conversations")
                break
    post.handle.remove()
    return {"shards": k, "next": i + 1, "skipped_too_long": skipped}


def write_shard(out: Path, k: int, buf, meta, nxt: int, save_file) -> None:
    lens = torch.tensor([0] + [int(b["ids"].numel()) for b in buf]).cumsum(0)
    tensors = {"ids": torch.cat([b["ids"] for b in buf]), "aux": torch.cat([b["aux"] for b in buf]),
               "post": torch.cat([b["post"] for b in buf]), "top1": torch.cat([b["top1"] for b in buf]),
               "offsets": lens.long(), "prompt_len": torch.cat([b["prompt_len"] for b in buf]).long()}
    tmp = out / f".shard-{k:04d}.safetensors.tmp"
    save_file({n: t.contiguous() for n, t in tensors.items()}, str(tmp))
    tmp.rename(out / f"shard-{k:04d}.safetensors")
    (out / f"shard-{k:04d}.json").write_text(json.dumps({"next": nxt, "conversations": meta}) + "\n")


def hf_tokenizer(path: str | Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def main(argv: list[str] | None = None) -> int:
    import argparse

    from drifttool.zoo import smollm2

    from . import real_conversations

    p = argparse.ArgumentParser(prog="training.real_features", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--split", default="train", choices=["train", "heldout"])
    p.add_argument("--n", type=int, default=4000, help="conversations in the split")
    p.add_argument("--worker", type=int, default=0)
    p.add_argument("--workers", type=int, default=1, help="worker w takes conversations w, w+W, ...")
    p.add_argument("--max-new", type=int, default=48)
    p.add_argument("--max-len", type=int, default=2048)
    p.add_argument("--shard-tokens", type=int, default=50_000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--minutes", type=float, default=None)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    convs = real_conversations.build(a.n, a.split)[a.worker :: a.workers]
    out = Path(a.out) / a.split / f"w{a.worker}"
    res = extract(convs, smollm2.fetch(), out, a.max_len, a.max_new, a.shard_tokens, seed=a.worker,
                  minutes=a.minutes, log=lambda m: print(time.strftime("%H:%M:%S"), m, flush=True))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
