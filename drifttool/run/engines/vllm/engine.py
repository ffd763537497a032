"""The vllm engine's run (`run_capture_vllm`): one vLLM engine per drafter (vLLM serves one at a time); the
prompts go to vLLM together (continuous batching as the user's `max_num_seqs` allows, in submissions of
`SUBMIT` prompts — fewer where their recorded inputs would pass RECORD_BUDGET — so an interruption loses at most
one), the recorder in vLLM's worker keys what it sees by
request, and each prompt is replayed through drifttool's drafter, cross-checked and written as the shard
`DRAFTER:PROMPT` by the runner's shared body.

Requirements (set by `launch`): the V1 model runner, an eager drafter, no prefix caching, the recorder as vLLM's
worker extension; tensor / pipeline parallel, batching and the engine core's process as the user sets them."""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ....errors import DriftError
from ....model.checkpoint import detect_layout, save_drafter
from ....model.config import trained_window
from ....model.drafter import DrafterBase
from ....trace.sinks import SinkSpec
from ...drafters import DrafterSpec, load_drafters
from ...hooks import Capture
from ...loop import RoundRecord, positions_needed
from ...manifest import build_manifest
from ...probes import Probe
from ...records import add_rows, prompt_row, prompt_tables
from ...runner import Output, RunSettings, begin, prompt_seed, write_run
from .crosscheck import acceptance_counts, check_acceptance, metrics_delta, spec_metrics, tolerance, verdict
from .events import read_events
from .launch import DEFAULT_ARGS, first_line, import_vllm, parse_vllm_args, shutdown, start_llm
from .launch import engine_args as llm_engine_args
from .mtp import confirm_on_worker, prepare_mtp_drafter
from .recorder import Proposal
from .replay import REPLAY_BATCH, ReplayStats, replay_prompts
from .target_info import TargetInfo


@dataclass(frozen=True)
class VllmRun:
    """What every prompt of a vLLM capture shares: vLLM itself, the target, the checked settings."""

    vllm: Any  # the imported vllm module
    target: TargetInfo
    target_path: str
    settings: RunSettings
    engine_kwargs: dict[str, Any]  # the user's --vllm-arg


def given_as_is(spec: DrafterSpec) -> bool:
    """Whether vLLM can be given the folder as is (speculators layout, no what-if overrides); read_drafter
    already reads a speculators config as vLLM does (top-level flags, norm_before_residual absent = true, the
    draft-layer window from layer_types). Any other layout is converted to the drafter drifttool replays."""
    try:
        layout = detect_layout(json.loads((Path(spec.path) / "config.json").read_text()))
    except (OSError, json.JSONDecodeError, DriftError):
        return False  # load_drafter reports it
    return layout == "speculators" and not spec.overrides


@contextmanager
def vllm_checkpoint(spec: DrafterSpec, drafter: DrafterBase) -> Iterator[str | None]:
    """The drafter folder vLLM loads: the user's, or a temporary speculators copy of exactly what is replayed;
    None for an MTP head (vLLM reads it from the target's own checkpoint)."""
    if drafter.config.mtp:
        yield None
        return
    if given_as_is(spec):
        yield spec.path
        return
    tmp = tempfile.mkdtemp(prefix="drifttool-vllm-")
    try:
        save_drafter(drafter, tmp, layout="speculators")
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def checked_prompts(
    info: TargetInfo, todo: list[Probe], st: RunSettings
) -> list[tuple[Probe, list[int], int]]:
    """(probe, token ids, new tokens) for each probe, every one checked before vLLM starts."""
    out = []
    for probe in todo:
        ids = probe.tokens(info)
        mnt = st.new_tokens(probe)
        need = positions_needed(len(ids), mnt, st.depth)
        if not ids:
            raise DriftError(f"prompt {probe.id}: empty (expected at least one token)")
        if need > info.max_positions:
            raise DriftError(
                f"prompt {probe.id}: {len(ids)} tokens + generation needs {need} positions, beyond the "
                f"target's max_position_embeddings {info.max_positions}"
            )
        out.append((probe, ids, mnt))
    return out


# Prompts per llm.generate call: vLLM batches within one (continuous batching up to max_num_seqs); the shards
# of a submission are written when it returns, so an interruption loses at most this many prompts' work.
SUBMIT = 64


# Recorded inputs a submission may hold on the host until its replay (mostly the prefills' aux features): a
# 70B-class target's three aux layers are 48 KiB per token in bf16, so 64 prompts of 8k tokens would hold 25 GiB.
RECORD_BUDGET = 8 << 30


def submit_size(engine_kwargs: dict[str, Any]) -> int:
    return max(SUBMIT, int(engine_kwargs.get("max_num_seqs") or 0))


def submissions(prompts: list, size: int, bytes_per_token: int, budget: int = RECORD_BUDGET) -> list[list]:
    """The prompts (probe, ids, new tokens) in submission order, cut into batches of at most `size` prompts whose
    recorded inputs (prompt + new tokens, `bytes_per_token` each) stay within `budget` (at least one prompt each)."""
    out: list[list] = []
    cur: list = []
    held = 0
    for p in prompts:
        need = (len(p[1]) + p[2]) * bytes_per_token
        if cur and (len(cur) >= size or held + need > budget):
            out.append(cur)
            cur, held = [], 0
        cur.append(p)
        held += need
    return out + [cur] if cur else out


def generate(run: VllmRun, llm, batch: list[tuple[Probe, list[int], int]]) -> tuple[list, float]:
    """One llm.generate over the batch (per-prompt seed and length); the outputs in batch order and the wall."""
    st = run.settings
    params = [run.vllm.SamplingParams(temperature=st.temperature, max_tokens=mnt, ignore_eos=True,
                                      detokenize=False, seed=prompt_seed(st.seed, p.id)) for p, _, mnt in batch]
    t0 = time.perf_counter()
    try:
        res = llm.generate([{"prompt_token_ids": list(ids)} for _, ids, _ in batch], params, use_tqdm=False)
    except DriftError:
        raise
    except Exception as e:  # vLLM accepted the models but failed running them: one line, not its traceback
        raise DriftError(
            f"--engine vllm: prompts {batch[0][0].id}..{batch[-1][0].id}: vLLM failed while generating "
            f"({type(e).__name__}: {first_line(e)})"
        ) from None
    return res, time.perf_counter() - t0


def take_events(llm) -> dict[str, list]:
    """The recording rank's events since the last take (collective_rpc: every rank answers, one records)."""
    paths = [p for p in llm.collective_rpc("drifttool_take") if p]
    if len(paths) != 1:
        raise DriftError(f"--engine vllm: {len(paths)} of vLLM's workers recorded the drafter (expected one)")
    return read_events(paths[0])


def per_request_counts(records: list[RoundRecord], metrics) -> dict[str, Any] | None:
    """vLLM's own counts for one request, from its per-request spec-decode stats (`RequestOutput`'s
    `spec_decode_metrics`: the histogram of accepted drafts per verify step); None when vLLM gave none (the
    batch's counters are then the only check)."""
    hist = list(getattr(metrics, "histogram", None) or [])
    if not hist:
        return None
    k = len(records[0].draft_ids) if records else len(hist) - 1
    return {"num_drafts": sum(hist), "num_draft_tokens": int(getattr(metrics, "num_draft_tokens", 0)),
            "num_accepted_tokens": sum(j * c for j, c in enumerate(hist)),
            "accepted_per_pos": [sum(c for j, c in enumerate(hist) if j > i) for i in range(k)]}


@dataclass
class Served:
    """One request as vLLM served it, as the replay needs it: the vLLM engine's capture and the live monitor's
    replay both describe their requests this way (`replay_served`)."""

    probe: Probe
    ids: list[int]  # the prompt's token ids
    max_new: int  # the request's max new tokens
    token_ids: list[int]  # what vLLM emitted
    events: list  # what the recorder saw of the drafter
    wall: float = float("nan")  # the request's share of its batch's generate time
    spec_decode_metrics: Any = None  # vLLM's per-request counters, where it gives them


def prompt_shard(st: RunSettings, name: str, drafter: DrafterBase, s: Served, cap: Capture,
                 records: list[RoundRecord], stats: ReplayStats) -> tuple[dict, dict, str | None]:
    """One replayed request as its shard's tables and sampled rows, and the replay's problem (None: agrees)."""
    metrics = s.spec_decode_metrics
    counts = per_request_counts(records, metrics)
    if counts is not None:
        check_acceptance(records, counts, metrics, f"prompt {s.probe.id}")
    else:  # vLLM gave no per-request stats: the trace's own counts; the batch check is vLLM's
        counts = acceptance_counts(records)
    problem = verdict(stats.to_dict(), st.dtype)
    cfg = drafter.config
    tabs = prompt_tables(name, s.probe.id, records, cap.rounds, cfg.input_aux_layer_ids,
                         trained_window(cfg.to_dict())["window"], cfg.sliding_window)
    out_ids = [int(t) for t in s.token_ids]
    tabs["prompts"] = prompt_row(
        name, s.probe, len(s.ids), len(out_ids), records, s.wall, max_new_tokens=s.max_new, engine="vllm",
        vllm_num_drafts=counts["num_drafts"], vllm_num_draft_tokens=counts["num_draft_tokens"],
        vllm_num_accepted_tokens=counts["num_accepted_tokens"],
        vllm_accepted_per_pos=[int(x) for x in counts["accepted_per_pos"]], output_ids=out_ids,
        vllm_max_batch=max((e.batch for e in s.events if isinstance(e, Proposal)), default=1),
        **stats.to_dict(), replay_ok=problem is None,
    )
    return tabs, add_rows(tabs, name, s.probe.id, cap.rounds), problem


def replay_served(st: RunSettings, template_ids, name: str, drafter: DrafterBase,
                  served: list[Served]) -> Iterator[tuple[Served, dict, dict, str | None, list[RoundRecord]]]:
    """Each served request replayed through `drafter` (REPLAY_BATCH side by side) and made its shard: (request,
    tables, sampled rows, replay problem or None, its rounds) — the one replay of the vLLM engine and the monitor."""
    for i in range(0, len(served), REPLAY_BATCH):
        part = served[i : i + REPLAY_BATCH]
        caps = [Capture(drafter, sink=st.sink, keep_rows=st.keep_rows, seed=prompt_seed(st.seed, s.probe.id),
                        full_every=st.full_every, recent=st.recent, template_ids=tuple(template_ids)) for s in part]
        jobs = [(s.events, s.ids, s.token_ids) for s in part]
        for cap, s, (records, stats) in zip(caps, part, replay_prompts(drafter, caps, jobs, st.depth)):
            tabs, rows, problem = prompt_shard(st, name, drafter, s, cap, records, stats)
            yield s, tabs, rows, problem, records


def capture_batch(run: VllmRun, llm, writer, bar, name: str, drafter: DrafterBase,
                  batch: list[tuple[Probe, list[int], int]]) -> None:
    """The batch through vLLM together, then its prompts replayed side by side (REPLAY_BATCH at a time) and each
    written as its shard. vLLM's counters over the batch must equal the rounds of all its prompts (and each
    prompt's its per-request stats)."""
    st = run.settings
    llm.collective_rpc("drifttool_take")  # drop anything recorded outside this batch
    before = spec_metrics(llm)
    res, wall = generate(run, llm, batch)
    delta = metrics_delta(before, spec_metrics(llm))
    events = take_events(llm)
    if len(res) != len(batch):
        raise DriftError(f"--engine vllm: vLLM returned {len(res)} outputs for {len(batch)} prompts")
    mine = []
    for (probe, _, _), r in zip(batch, res):
        if str(r.request_id) not in events:
            raise DriftError(f"--engine vllm: prompt {probe.id}: nothing recorded for vLLM request {r.request_id}")
        mine.append(events[str(r.request_id)])
    every: list[RoundRecord] = []
    share = wall / len(batch)  # a batch's wall time, shared: a request's own time is not separable
    served = [Served(probe, ids, mnt, list(r.outputs[0].token_ids), ev, share,
                     getattr(r.outputs[0], "spec_decode_metrics", None))
              for (probe, ids, mnt), r, ev in zip(batch, res, mine)]
    for s, tabs, rows, problem, records in replay_served(st, run.target.template_ids, name, drafter, served):
        every += records
        writer.add(f"{name}:{s.probe.id}", tabs, rows)
        if problem is not None:  # after the shard: the flag names a prompt the trace holds
            writer.flag(f"{name}:{s.probe.id}", "replay", problem)
        bar.advance(s.probe.id, len(records))
    check_acceptance(every, delta, None, f"prompts {batch[0][0].id}..{batch[-1][0].id} (one vLLM batch)")


def run_drafter(
    run: VllmRun, writer, bar, spec: DrafterSpec, drafter: DrafterBase, todo: list[Probe]
) -> None:
    """One vLLM engine serving `drafter`; every prompt not yet in the trace becomes a shard (flagged when the
    replay disagrees with vLLM beyond tolerance)."""
    prompts = checked_prompts(run.target, todo, run.settings)
    st = run.settings
    size, cfg = submit_size(run.engine_kwargs), drafter.config
    with vllm_checkpoint(spec, drafter) as draft_dir, tempfile.TemporaryDirectory(prefix="drifttool-rec-") as rec_dir:
        kw = llm_engine_args(run.vllm, run.target_path, draft_dir, st.depth, st.dtype, st.seed, run.engine_kwargs)
        llm = start_llm(run.vllm, kw, run.target_path, spec.path)
        try:
            ranks = llm.collective_rpc("drifttool_attach", args=(rec_dir,))
            if sum(bool(r.get("recording")) for r in ranks) != 1:
                raise DriftError(f"--engine vllm: the recorder attached on {ranks} (expected one recording rank)")
            pid = next(r["pid"] for r in ranks if r.get("recording"))
            if drafter.config.mtp:
                confirm_on_worker(ranks, drafter, spec.name)
            inproc = engine_core() == "in-process"
            single = int(kw.get("tensor_parallel_size") or 1) * int(kw.get("pipeline_parallel_size") or 1) == 1
            if (inproc and single and pid != os.getpid()) or (not inproc and pid == os.getpid()):
                raise DriftError(f"--engine vllm: the recorder runs in process {pid}, but the engine core is "
                                 f"recorded as {engine_core()!r} (this process: {os.getpid()})")
            width = max(cfg.num_aux, 1) * cfg.target_hidden_size  # recorded feature width per token
            for batch in submissions(prompts, size, width * torch.finfo(st.torch_dtype).bits // 8):
                capture_batch(run, llm, writer, bar, spec.name, drafter, batch)
        finally:
            shutdown(llm)


def engine_core() -> str:
    """Where vLLM runs its engine core (and, at TP = 1, the model runner the recorder hooks)."""
    return "in-process" if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0" else "own process"


def check_vllm_settings(st: RunSettings, target) -> None:
    if st.draft_sampling != "greedy":
        raise DriftError(
            f"--draft-sampling {st.draft_sampling}: the vllm engine records vLLM's own drafts, drawn "
            "with its default draft_sample_method greedy"
        )
    if st.mode != "generate":
        raise DriftError(f"--mode {st.mode}: the vllm engine runs vLLM's own loop; only --mode generate")
    if not isinstance(target, (str, Path)):
        raise DriftError("--engine vllm: give the target as an HF model folder (vLLM loads it itself)")


def vllm_sink(st: RunSettings) -> tuple[RunSettings, str | None]:
    """The sink settings this engine can honour, and the manifest's sink_rule where it changed them: it does not
    read the target's attention, so `auto` is the first 4 positions (said), and `target` (the target's sink, read
    from its attention in an HF forward) is the hf engine's, refused."""
    sink_rule = None
    if st.sink.auto:
        st = dataclasses.replace(st, sink=SinkSpec())
        sink_rule = ("auto: first:4 (the vllm engine does not read the target's attention; give --sink pos:i,j from "
                     "an hf capture's capture.sink_target)")
    if st.sink.target:
        raise DriftError("--sink target: the vllm engine takes the positions found by an hf capture (its manifest's "
                         "capture.sink_target.positions) as --sink pos:i,j")
    return st, sink_rule


def prepare_drafters(vllm, drafters: list[DrafterSpec], models: dict[str, DrafterBase], target: str,
                     llm_kwargs: dict[str, Any]) -> None:
    """Each drafter made ready for vLLM before any engine starts: an MTP head is the target's own MTP layers
    (method mtp; the replay reads them as vLLM does); an MLA EAGLE-3 head, which vLLM cannot serve, is refused."""
    specs = {d.name: d for d in drafters}
    for name, m in models.items():
        if m.config.mtp:
            prepare_mtp_drafter(vllm, specs[name], target, name, m, int(llm_kwargs.get("pipeline_parallel_size") or 1))
            continue
        if m.config.mla:
            raise DriftError(
                f"--engine vllm: drafter {name!r} has an MLA (DeepSeek-style latent attention) draft layer; "
                "vLLM 0.32 does not serve MLA EAGLE-3 heads (it reads a deepseek_v3 draft config as "
                "DeepSeek MTP and has no Eagle3 model for it); use --engine hf"
            )


def run_capture_vllm(
    target: str,
    drafters: list[DrafterSpec],
    probes: str,
    out: str,
    settings: RunSettings | None = None,
    *,
    extra_manifest: dict[str, Any] | None = None,
    vllm_kwargs: dict[str, Any] | None = None,
    engine_args: list[str] | None = None,
    **kw: Any,
) -> Path:
    """Like `run_capture`, but vLLM runs the speculative decoding; returns the trace path.

    `settings` is a checked `RunSettings`, or give its fields as keywords (`depth=8`, `max_new_tokens`, `dtype`,
    `device`, `sink`, `seed`, `keep_rows`, `temperature`, `limit`, ...); the output's keywords (runner.Output):
    `resume`, `overwrite`, `progress`. One vLLM engine per drafter;
    shards are keyed `DRAFTER:PROMPT`. `dtype` applies to vLLM and to the replay drafter, `device` to the replay
    drafter. `vllm_kwargs` (or `engine_args`, `--vllm-arg` strings KEY=VALUE) go to `vllm.LLM` (they may not
    contradict launch.REQUIRED_ARGS)."""
    output = Output.take(out, kw)
    st, suite = begin(settings, kw, drafters, probes, "run_capture_vllm", target=target, out=output)
    st, sink_rule = vllm_sink(st)
    llm_kwargs = {**parse_vllm_args(engine_args or []), **(vllm_kwargs or {})}
    check_vllm_settings(st, target)
    vllm = import_vllm()
    info = TargetInfo(target, trust_remote_code=llm_kwargs.get("trust_remote_code") is True)
    models = load_drafters(drafters, info.shape(), st.device, st.torch_dtype)
    info.set_aux_layer_ids(next(iter(models.values())).config.input_aux_layer_ids)  # as the manifest records
    prepare_drafters(vllm, drafters, models, str(target), llm_kwargs)
    run = VllmRun(vllm, info, str(target), st, llm_kwargs)
    settings = capture_settings(run, probes, len(suite), drafters, {n for n, m in models.items() if m.config.mtp})
    if sink_rule:
        settings["sink_rule"] = sink_rule
    manifest = build_manifest(info, str(target), models, settings, extra_manifest)

    def plan(writer):
        for d in drafters:
            todo = [p for p in suite if f"{d.name}:{p.id}" not in writer.done]
            if todo:
                yield len(todo), (d, todo)

    def step(writer, bar, item) -> None:
        spec, todo = item
        run_drafter(run, writer, bar, spec, models[spec.name], todo)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    writer = write_run(output, manifest, plan, step, len(models))
    for f in writer.manifest.get("flags", []):
        print(f"drifttool: warning: {f['key']}: {f['message']}", file=sys.stderr)
    return writer.path


def capture_settings(
    run: VllmRun, probes: str, n_prompts: int, drafters: list[DrafterSpec], mtp: set[str]
) -> dict[str, Any]:
    """The manifest's capture settings: the shared ones plus what vLLM ran and how the replay is judged."""
    st = run.settings
    given = {d.name: "as is" if given_as_is(d) else "converted to speculators layout" for d in drafters}
    given.update({name: "the target's own MTP layers (speculative_config method mtp)" for name in mtp})
    return {
        **st.record(probes, n_prompts),
        "template_ids": list(run.target.template_ids),
        "engine": "vllm",
        "shard_key": "DRAFTER:PROMPT",  # how this engine names its shards (trace/layout.shard_prompts reads it)
        "rejection": "standard",  # vLLM's rejection sampler as drifttool starts it (rejection_sample_method)
        "draft_sampling": "greedy (vLLM's draft_sample_method)"
        if st.temperature > 0
        else "greedy (temperature 0)",
        "vllm": {
            "version": getattr(run.vllm, "__version__", "?"),
            "model_runner": "v1",
            "recorder": "worker extension (collective_rpc), tensor-parallel rank 0",
            "engine_core": engine_core(),
            "drafter_eager": True,  # speculative_config.enforce_eager: the recorder's hooks need it
            "target_eager": bool(run.engine_kwargs.get("enforce_eager", DEFAULT_ARGS["enforce_eager"])),
            "prompts_per_submission": submit_size(run.engine_kwargs),
            "recorded_bytes_per_submission": f"at most {RECORD_BUDGET >> 30} GiB of recorded inputs (fewer prompts "
                                             "per submission when they would hold more)",
            "draft_s": "the drafter's batched step time divided by the requests in it",
            "wall_s": "a submission's generate time divided by its prompts",
            "engine_args": run.engine_kwargs,
            "checkpoint_given_to_vllm": given,
            "replay_tolerance": tolerance(st.dtype),
        },
        "attention": "vLLM's recorded drafter inputs replayed through drifttool's drafter; masses from its attention "
        "kernel's log-sum-exp over the sink and draft keys, on full rounds softmax rows of the K draft queries "
        "against the round's final key cache (no L x L maps); acceptance from vLLM",
    }
