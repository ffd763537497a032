"""Hooks on vLLM's model runner (in whichever process it lives: the engine core's, a TP worker's), recording per
request what vLLM's drafter was given and what vLLM decided, for any batch vLLM schedules:
- on the drafter module (vLLM's `Eagle3LlamaForCausalLM` / `Eagle3Qwen3ForCausalLM`, or an MTP model such as
  `DeepSeekMTP` / `Glm4MoeMTP`): every forward's input token ids, positions and input hidden state (the combined
  target features in the first pass — for MTP the target's last hidden state itself —, the fed-back tensor in
  steps 2..K), cut per request (first pass: the request's rows of the batch; later steps: its row);
- around the proposer's `propose`: the raw aux target features, the row the first draft is sampled from
  (vLLM's padded drafter batch also runs rejected slots), the K drafted tokens, the drafter's wall time;
- on the rejection sampler: vLLM's verdict per verify step (accepted drafts + bonus token) and the target's
  argmax at every drafted position.
Requests are told apart by the runner's batch order (`input_batch.req_ids`), the order both the proposer and
the rejection sampler see."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ....errors import DriftError


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
    wall: float = float("nan")  # the drafter's batched step, divided by the requests in it (its share)
    batch: int = 1  # requests in the drafter's batched step


@dataclass
class Verify:
    """One rejection-sampler call (a verify step): vLLM's verdict."""

    drafts: list[int]  # the drafts vLLM verified
    target_argmax: list[int]  # the target's argmax at each drafted position
    sampled: list[int]  # accepted drafts + the bonus/recovered token


def external_id(req_id: str) -> str:
    """vLLM's engine suffixes the request id it was given ("3" -> "3-1a2b3c4d"); the given id."""
    head, dash, tail = str(req_id).rpartition("-")
    return head if dash and len(tail) == 8 else str(req_id)


def fingerprint(w: torch.Tensor, rows: int | None = None) -> list[float]:
    """Three float64 sums that tell two [V, H] tensors apart (vLLM pads the vocabulary: the first `rows` rows,
    or all): the sum, the absolute sum and the row-index-weighted sum; vocabulary-sharded ranks give a shard's."""
    w = w.detach()[: rows if rows is not None else w.shape[0]].double().cpu()
    idx = torch.arange(1, w.shape[0] + 1, dtype=torch.float64)[:, None]
    return [float(w.sum()), float(w.abs().sum()), float((w * idx).sum())]


def _unwrap(m):
    return m.unwrap() if hasattr(m, "unwrap") else m  # a (breakable) CUDA-graph wrapper around the module


class VllmRecorder:
    """Hooks on a vLLM model runner: drafter module inputs, proposals and verify verdicts, per request in order
    (`events[request id]`, vLLM's given ids)."""

    def __init__(self, runner, store_device: str | torch.device = "cpu"):
        self.runner = runner
        self.proposer = getattr(runner, "drafter", None)
        self.sampler = getattr(runner, "rejection_sampler", None)
        if self.proposer is None or not hasattr(self.proposer, "propose") or self.sampler is None:
            raise DriftError(
                f"--engine vllm: {type(runner).__name__} has no EAGLE drafter / rejection sampler "
                "(is speculative_config method eagle3?)"
            )
        self.model = _unwrap(self.proposer.model)
        self.method = str(getattr(self.proposer, "method", ""))
        # an MTP model's first pass takes the target's last hidden state as is; EAGLE-3 combines aux features
        if self.method != "mtp" and not hasattr(self.model, "combine_hidden_states"):
            raise DriftError(
                f"--engine vllm: vLLM's drafter {type(self.model).__name__} is not an EAGLE-3 or MTP model"
            )
        self.store = torch.device(store_device)
        self.events: dict[str, list[Proposal | Verify]] = {}
        # which requests to record (the live monitor samples a fraction); None: every request. A batch with no
        # wanted request passes through untouched: no copies, no host sync.
        self.want: Callable[[str], bool] | None = None
        self.on_error: Callable[[Exception], None] | None = None  # the monitor: report, never raise into vLLM
        self._handles: list = []
        self._steps: list[Step] | None = None
        self._pending: tuple | None = None

    def _keep(self, t: torch.Tensor) -> torch.Tensor:
        return t.detach().to(self.store, copy=True)  # vLLM reuses its input buffers

    def _req_ids(self, n: int) -> list[str]:
        ids = [external_id(r) for r in list(self.runner.input_batch.req_ids)[:n]]
        if self.want is not None and len(ids) < n:  # the monitor: a warm-up / profile run holds no real request
            return []
        if len(ids) != n or None in ids:
            raise DriftError(f"--engine vllm: {n} requests in a step but the runner's batch lists {len(ids)}")
        return ids

    def _wanted(self, reqs: list[str]) -> bool:
        return self.want is None or any(self.want(r) for r in reqs)  # [] (a warm-up run): nothing wanted

    def _add(self, req: str, ev: Proposal | Verify) -> None:
        if self.want is None or self.want(req):
            self.events.setdefault(req, []).append(ev)

    def _propose_wrapper(self, orig):
        sig = inspect.signature(orig)

        def propose(*args, **kwargs):
            pre = self._soft(self._propose_pre, sig, args, kwargs)
            if pre is None:  # no wanted request in the batch (or the monitor's bookkeeping failed): as vLLM runs
                return orig(*args, **kwargs)
            self._steps = []
            t0 = time.perf_counter()
            try:
                out = orig(*args, **kwargs)
            finally:
                steps, self._steps = self._steps, None
            self._soft(self._propose_post, pre, out, steps, (time.perf_counter() - t0) / max(1, pre[1]))
            return out

        return propose

    def _soft(self, fn, *args):
        """`fn(*args)`; with `on_error` set (the live monitor), an error in drifttool's bookkeeping is reported
        there and vLLM's step goes on as if unrecorded; without it (a capture) the error stops the run."""
        if self.on_error is None:
            return fn(*args)
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - a served request never fails for the monitor
            self.on_error(e)
            return None

    def _propose_pre(self, sig, args, kwargs) -> tuple | None:
        a = sig.bind(*args, **kwargs).arguments
        qsl = [int(x) for x in a["common_attn_metadata"].query_start_loc_cpu.tolist()]
        b = len(qsl) - 1
        tis = a.get("token_indices_to_sample")
        last = [int(x) for x in tis.reshape(-1).tolist()[:b]] if tis is not None else [q - 1 for q in qsl[1:]]
        reqs = self._req_ids(b)
        if not self._wanted(reqs):
            return None
        return qsl, b, last, reqs, self._keep(a["target_hidden_states"][: qsl[-1]])

    def _propose_post(self, pre: tuple, out, steps: list[Step], wall: float) -> None:
        qsl, b, last, reqs, feats = pre
        if out is None or out.numel() == 0 or not steps:
            return
        drafts = out.reshape(b, -1).tolist()
        first = steps[0]
        for i, req in enumerate(reqs):
            lo, hi = qsl[i], qsl[i + 1]
            mine = [Step(first.ids[lo:hi], first.pos[lo:hi], first.hidden[lo:hi])]
            mine += [Step(st.ids[i : i + 1], st.pos[i : i + 1], st.hidden[i : i + 1]) for st in steps[1:]]
            self._add(req, Proposal(feats[lo:hi], last[i] - lo, [int(t) for t in drafts[i]], mine, wall, b))

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
        if not self._wanted(self._req_ids(len(md.num_draft_tokens))):
            self._pending = "skip"
            return
        self._pending = (
            [int(n) for n in md.num_draft_tokens],
            md.draft_token_ids.reshape(-1).tolist(),
            logits[md.target_logits_indices].argmax(-1).tolist(),
        )

    def _sampler_post(self, _m, _args, _kwargs, out) -> None:
        if self._pending == "skip":
            self._pending = None
            return
        rows = out.sampled_token_ids.reshape(out.sampled_token_ids.shape[0], -1).tolist()
        counts, drafts, tgt = self._pending or ([0] * len(rows), [], [])
        if len(counts) != len(rows):
            raise DriftError(f"--engine vllm: {len(rows)} sampled rows for {len(counts)} requests in a step")
        at = 0
        for req, n, row in zip(self._req_ids(len(rows)), counts, rows):
            sampled = []
            for t in row:
                if t < 0:  # PLACEHOLDER_TOKEN_ID pads the rejected tail
                    break
                sampled.append(int(t))
            self._add(req, Verify([int(t) for t in drafts[at : at + n]], [int(t) for t in tgt[at : at + n]], sampled))
            at += n
        self._pending = None

    def describe(self) -> dict:
        """What vLLM built: the proposer's method, its drafter model, and (MTP) whether that model returns
        (logits hidden, fed-back hidden) — which tensor vLLM feeds back (engines/vllm/mtp.py)."""
        tup = getattr(self.proposer, "model_returns_tuple", None)
        out = {"method": self.method, "model": type(self.model).__name__,
               "returns_tuple": bool(tup()) if callable(tup) else None}
        if self.method == "mtp":  # which embedding / head tensors vLLM loaded (a checkpoint may hold two)
            params = dict(self.model.named_parameters())
            heads = [k for k in params if k.endswith("shared_head.head.weight")] or ["lm_head.weight"]
            vocab = int(self.runner.model_config.get_vocab_size())
            for part, name in (("embed", "model.embed_tokens.weight"), ("head", sorted(heads)[0])):
                if name in params:
                    out[f"{part}_fingerprint"] = fingerprint(params[name], vocab)
        return out

    def _forward_wrapper(self, orig):
        sig = inspect.signature(orig)

        def forward(*args, **kwargs):
            self._soft(self._model_pre, self.model, (), dict(sig.bind(*args, **kwargs).arguments))
            return orig(*args, **kwargs)

        return forward

    def attach(self) -> VllmRecorder:
        self.proposer.propose = self._propose_wrapper(
            self.proposer.propose
        )  # shadows the method; detach() drops it
        soft = lambda fn: lambda *a: self._soft(fn, *a)  # noqa: E731
        self._handles = [
            self.sampler.register_forward_pre_hook(soft(self._sampler_pre), with_kwargs=True),
            self.sampler.register_forward_hook(soft(self._sampler_post), with_kwargs=True),
        ]
        if type(self.model).__call__ is torch.nn.Module.__call__:
            self._handles.append(self.model.register_forward_pre_hook(soft(self._model_pre), with_kwargs=True))
        else:  # vLLM's @support_torch_compile replaces __call__ and calls self.forward: hooks never fire
            self.model.forward = self._forward_wrapper(self.model.forward)  # detach() drops it
        return self

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self.proposer.__dict__.pop("propose", None)
        self.model.__dict__.pop("forward", None)

    def take(self) -> dict[str, list[Proposal | Verify]]:
        """The events recorded since the last take, per request; the recorder starts empty again."""
        out, self.events = self.events, {}
        return out
