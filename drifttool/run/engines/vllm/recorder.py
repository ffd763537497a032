"""Hooks on a live `vllm.LLM`, recording per prompt what vLLM's drafter was given and what vLLM decided:
- on the drafter module (vLLM's `Eagle3LlamaForCausalLM` / `Eagle3Qwen3ForCausalLM`): every forward's input
  token ids, positions and input hidden state (the combined target features in the first pass, the fed-back
  tensor in steps 2..K);
- around the proposer's `propose`: the raw aux target features, the row the first draft is sampled from
  (vLLM's padded drafter batch also runs rejected slots), the K drafted tokens, the drafter's wall time;
- on the rejection sampler: vLLM's verdict per verify step (accepted drafts + bonus token) and the target's
  argmax at every drafted position."""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field

import torch

from ....errors import DriftError
from .launch import model_runner


@dataclass
class Step:
    """One forward of vLLM's drafter module: its input ids, positions and input hidden state."""

    ids: torch.Tensor
    pos: torch.Tensor
    hidden: torch.Tensor


@dataclass
class Proposal:
    """One `propose` call: a drafted chain (if a verify step follows) or a prefill chunk / unused chain."""

    feats: torch.Tensor  # raw aux target features of the first pass [T, A*Ht]
    sample_idx: int  # first-pass row the first draft is sampled from
    drafts: list[int]
    steps: list[Step] = field(default_factory=list)
    wall: float = float("nan")


@dataclass
class Verify:
    """One rejection-sampler call (a verify step): vLLM's verdict."""

    drafts: list[int]  # the drafts vLLM verified
    target_argmax: list[int]  # the target's argmax at each drafted position
    sampled: list[int]  # accepted drafts + the bonus/recovered token


def _unwrap(m):
    return m.unwrap() if hasattr(m, "unwrap") else m  # a (breakable) CUDA-graph wrapper around the module


class VllmRecorder:
    """Hooks on a live `vllm.LLM`: drafter module inputs, proposals and verify verdicts, in order (`events`)."""

    def __init__(self, llm, store_device: str | torch.device = "cpu"):
        runner = model_runner(llm)
        self.proposer = getattr(runner, "drafter", None)
        self.sampler = getattr(runner, "rejection_sampler", None)
        if self.proposer is None or not hasattr(self.proposer, "propose") or self.sampler is None:
            raise DriftError(
                f"--engine vllm: {type(runner).__name__} has no EAGLE drafter / rejection sampler "
                "(is speculative_config method eagle3?)"
            )
        self.model = _unwrap(self.proposer.model)
        if not hasattr(self.model, "combine_hidden_states"):
            raise DriftError(
                f"--engine vllm: vLLM's drafter {type(self.model).__name__} is not an EAGLE-3 model"
            )
        self.store = torch.device(store_device)
        self.events: list[Proposal | Verify] = []
        self._handles: list = []
        self._steps: list[Step] | None = None
        self._pending: tuple | None = None

    def _keep(self, t: torch.Tensor) -> torch.Tensor:
        return t.detach().to(self.store, copy=True)  # vLLM reuses its input buffers

    def _propose_wrapper(self, orig):
        sig = inspect.signature(orig)

        def propose(*args, **kwargs):
            a = sig.bind(*args, **kwargs).arguments
            nxt = a.get("next_token_ids")
            if nxt is not None and nxt.shape[0] != 1:
                raise DriftError(
                    f"--engine vllm: {nxt.shape[0]} requests in one step; the recorder follows one"
                )
            self._steps = []
            t0 = time.perf_counter()
            try:
                out = orig(*args, **kwargs)
            finally:
                steps, self._steps = self._steps, None
            wall = time.perf_counter() - t0
            if out is None or out.numel() == 0 or not steps:
                return out
            tis = a.get("token_indices_to_sample")
            idx = int(tis.reshape(-1)[0]) if tis is not None else int(a["target_token_ids"].shape[0]) - 1
            self.events.append(
                Proposal(
                    self._keep(a["target_hidden_states"]),
                    idx,
                    [int(t) for t in out.reshape(-1).tolist()],
                    steps,
                    wall,
                )
            )
            return out

        return propose

    def _model_pre(self, _m, args, kwargs) -> None:
        if self._steps is None:
            return
        names = ("input_ids", "positions", "hidden_states")
        vals = dict(zip(names, args))
        vals.update({k: kwargs[k] for k in names if k in kwargs})
        ids, pos, hid = (vals.get(k) for k in names)
        if ids is None or pos is None or hid is None or pos.dim() != 1:
            raise DriftError(
                "--engine vllm: the drafter was called without token ids / 1-D positions "
                "(multimodal or M-RoPE drafters are not supported)"
            )
        self._steps.append(Step(self._keep(ids).long(), self._keep(pos).long(), self._keep(hid)))

    def _sampler_pre(self, _m, args, kwargs) -> None:
        md = args[0] if args else kwargs["metadata"]
        logits = args[2] if len(args) > 2 else kwargs["logits"]
        self._pending = (
            md.draft_token_ids.reshape(-1).tolist(),
            logits[md.target_logits_indices].argmax(-1).tolist(),
        )

    def _sampler_post(self, _m, _args, _kwargs, out) -> None:
        row = out.sampled_token_ids.reshape(out.sampled_token_ids.shape[0], -1)
        if row.shape[0] != 1:
            raise DriftError(
                f"--engine vllm: {row.shape[0]} requests verified in one step; the recorder follows one"
            )
        drafts, tgt = self._pending or ([], [])
        sampled = []
        for t in row[0].tolist():
            if t < 0:  # PLACEHOLDER_TOKEN_ID pads the rejected tail
                break
            sampled.append(int(t))
        self.events.append(Verify([int(t) for t in drafts], [int(t) for t in tgt], sampled))
        self._pending = None

    def attach(self) -> VllmRecorder:
        self.proposer.propose = self._propose_wrapper(
            self.proposer.propose
        )  # shadows the method; detach() drops it
        self._handles = [
            self.model.register_forward_pre_hook(self._model_pre, with_kwargs=True),
            self.sampler.register_forward_pre_hook(self._sampler_pre, with_kwargs=True),
            self.sampler.register_forward_hook(self._sampler_post, with_kwargs=True),
        ]
        return self

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self.proposer.__dict__.pop("propose", None)

    def reset(self) -> None:
        self.events = []
