"""Train tiny EAGLE-3 / 3.1 drafters against a tiny target in seconds (docs/eagle3.md §5 TTT, soft CE vs the
target's distribution), for tests that need an imperfect but non-trivial drafter."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

import drifttool
from drifttool.model.drafter import Eagle3Drafter
from drifttool.model.target import Target
from drifttool.model.tiny import tiny_drafter, tiny_target


@torch.no_grad()
def sample_sequences(target: Target, n: int, length: int, seed: int, prefix: int = 4) -> torch.Tensor:
    """n sequences sampled from the target at temperature 1 (random `prefix`-token starts)."""
    g = torch.Generator().manual_seed(seed)
    seqs = torch.randint(0, target.vocab_size, (n, prefix), generator=g)
    for _ in range(length - prefix):
        logits = target.model(input_ids=seqs).logits[:, -1].float()
        seqs = torch.cat([seqs, torch.multinomial(logits.softmax(-1), 1, generator=g)], 1)
    return seqs


@torch.no_grad()
def target_batch(target: Target, seqs: torch.Tensor):
    """Aux features [B,T,A*Ht] (inputs of the aux layers) and next-token probabilities [B,T,V]."""
    out = target.model(input_ids=seqs, output_hidden_states=True)
    feats = torch.cat([out.hidden_states[i] for i in target.aux_layer_ids], -1).float()
    return feats, out.logits.float().softmax(-1)


def ttt_loss(drafter: Eagle3Drafter, seqs: torch.Tensor, feats: torch.Tensor, probs: torch.Tensor,
             steps: int) -> torch.Tensor:
    """Slot t pairs token t+1 with feature t; step k at slot t predicts token t+k+2, whose target
    distribution is probs[:, t+k+1]. Soft CE over the draft vocab (target probs gathered via d2t)."""
    ids, f = seqs[:, 1:], feats[:, :-1]
    t = ids.shape[1]
    cols = drafter.draft_to_target(torch.arange(drafter.config.draft_vocab_size))
    loss = torch.zeros(())
    for k, o in enumerate(drafter.ttt_forward(ids, f, steps)):
        n = t - k
        lab = probs[:, 1 + k : 1 + k + n][..., cols]
        lab = lab / lab.sum(-1, keepdim=True).clamp_min(1e-9)
        loss = loss + 0.8**k * -(lab * o.logits[:, :n].float().log_softmax(-1)).sum(-1).mean()
    return loss


def train_drafter(target: Target, seqs: torch.Tensor, iters: int = 60, steps: int = 3, batch: int = 16,
                  lr: float = 3e-3, seed: int = 1, **flags) -> tuple[Eagle3Drafter, list[float]]:
    feats, probs = target_batch(target, seqs)
    drafter = tiny_drafter(target, seed=seed, **flags).train()
    opt = torch.optim.AdamW(drafter.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(iters):
        b = torch.randint(0, seqs.shape[0], (batch,), generator=g)
        loss = ttt_loss(drafter, seqs[b], feats[b], probs[b], steps)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return drafter.eval().requires_grad_(False), losses


@torch.no_grad()
def greedy_reference(target: Target, prompt: list[int], n: int) -> list[int]:
    """Target-only greedy decoding with HF generate, without its EOS stop (speculate has none here)."""
    from transformers import GenerationConfig

    gcfg = target.model.generation_config
    eos, gcfg.eos_token_id = gcfg.eos_token_id, None
    try:
        out = target.model.generate(
            torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            generation_config=GenerationConfig(do_sample=False, max_new_tokens=n, pad_token_id=0),
        )
    finally:
        gcfg.eos_token_id = eos
    assert out.shape[1] == len(prompt) + n
    return out[0, len(prompt):].tolist()


@dataclass
class TinyPair:
    """A tiny target, a drafter trained against it (saved to `checkpoint`), and prompts whose greedy
    continuation does not collapse into one repeated token. Load other drafters against a fresh
    target (`make_target()`): load_drafter re-points the target's aux layers."""

    target: Target
    drafter: Eagle3Drafter
    checkpoint: Path
    prompts: list[list[int]]
    losses: list[float]
    flags: dict = field(default_factory=dict)


TARGET_KW = dict(vocab=64, hidden=64, layers=4, heads=4, kv_heads=2, seed=0)


def make_target(mix: float = 60.0, sharp: float = 0.5, seed: int = 0, **shape) -> Target:
    """A tiny Llama with a periodic backbone: embeddings are random unit-variance vectors and lm_head row j
    is the embedding of perm^-1(j), so the residual stream alone predicts next = perm(current) (greedy
    text follows the permutation's long cycles instead of collapsing into one token). Attention and MLP
    outputs are scaled by `mix` so the context overrides that bigram often enough (~16% of positions at
    the defaults) for a small drafter to be imperfect; `sharp` sets the entropy (~1.4 nats)."""
    kw = {**TARGET_KW, **shape}  # shape overrides, e.g. hidden=128 for vLLM's CPU backend (head_dim >= 32)
    t = tiny_target(**kw)
    v, h = kw["vocab"], kw["hidden"]
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(v, generator=g)
    emb = torch.randn(v, h, generator=g)
    m = t.model
    with torch.no_grad():
        m.model.embed_tokens.weight.copy_(emb)
        m.lm_head.weight.copy_(sharp * 4 * emb[torch.argsort(perm)] / h**0.5)
        for layer in m.model.layers:
            layer.self_attn.o_proj.weight.mul_(mix)
            layer.mlp.down_proj.weight.mul_(mix)
            layer.self_attn.q_proj.weight.mul_(3)
            layer.self_attn.k_proj.weight.mul_(3)
    t.perm = perm
    return t


def pick_prompts(target: Target, n: int, length: int = 8, gen: int = 24, seed: int = 3) -> list[list[int]]:
    """Prompts whose greedy continuation keeps >= 3 distinct tokens in its last half."""
    g = torch.Generator().manual_seed(seed)
    cands = torch.randint(0, target.vocab_size, (6 * n, length), generator=g)
    seqs = cands.clone()
    with torch.no_grad():
        for _ in range(gen):
            seqs = torch.cat([seqs, target.model(input_ids=seqs).logits[:, -1:].argmax(-1)], 1)
    scored = sorted(range(len(cands)), key=lambda i: -len(set(seqs[i, length + gen // 2 :].tolist())))
    return [cands[i].tolist() for i in scored[:n]]


def build_pair(out_dir: Path, **flags) -> TinyPair:
    target = make_target()
    seqs = sample_sequences(target, n=48, length=24, seed=0)
    drafter, losses = train_drafter(target, seqs, iters=60, lr=1e-2, batch=8, **flags)
    ckpt = drifttool.save_drafter(drafter, out_dir)
    return TinyPair(target, drafter, ckpt, pick_prompts(target, 4), losses, flags)
