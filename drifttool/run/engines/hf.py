"""drifttool's own engine: probes x drafters through the speculative loop with the capture hooks, one shard per
prompt (the run's shared body: runner.py); the manifest is run/manifest.py's."""

from __future__ import annotations

import dataclasses
import time
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
from torch import nn

from ...errors import DriftError
from ...model.config import trained_window
from ...model.drafter import Eagle3Drafter
from ...model.target import Target, load_target
from ...trace.sinks import RECENT, SinkSpec
from ..drafters import DrafterSpec, check_mtp_targets, load_drafters, parse_overrides  # noqa: F401 - DrafterSpec, parse_overrides public here too
from ..hooks import Capture
from ..loop import Prefill, check_prompt, positions_needed, prefill_prompt, speculate, teacher_forcing_data
from ..manifest import build_manifest, drafter_identity  # noqa: F401 - drafter_identity re-exported
from ..probes import check_text_length
from ..records import add_rows, prompt_row, prompt_tables
from ..runner import Output, PromptJob, RunSettings, begin, write_run
from ..tree import TreeSpec, parse_tree
from .hf_tree import capture_tree_prompt
from .shard import each_drafter


def capture_one(target: Target, name: str, drafter: Eagle3Drafter, cap: Capture, job: PromptJob, forced=None,
                prefill: Prefill | None = None):
    """One drafter on one prompt through an attached Capture; returns (tables, sampled rows, SpecResult)."""
    t0 = time.perf_counter()
    res = speculate(target, drafter, job.ids, job.decoding(), observers=[cap], forced=forced, prefill=prefill)
    tabs, rows = shard_of(name, drafter, job, res.rounds, cap, len(res.output_ids), time.perf_counter() - t0)
    return tabs, rows, res


def shard_of(name: str, drafter: Eagle3Drafter, job: PromptJob, rounds: list, cap: Capture, n_generated: int,
             wall: float) -> tuple[dict[str, pd.DataFrame], dict]:
    """One drafter's run of one prompt as its shard's tables (and sampled rows): the round records and what the
    attached Capture measured."""
    tabs = prompt_tables(name, job.probe.id, rounds, cap.rounds, drafter.config.input_aux_layer_ids,
                         trained_window(drafter.config.to_dict())["window"], drafter.config.sliding_window)
    tabs["prompts"] = prompt_row(name, job.probe, len(job.ids), n_generated, rounds, wall,
                                 max_new_tokens=job.max_new_tokens)
    return tabs, add_rows(tabs, name, job.probe.id, cap.rounds)


def resolve_sink(st, tgt, prompts: list[list[int]]):
    """`--sink target` / `auto`: the settings with the target's own sink positions (model/target_sinks.py) and the
    evidence for the manifest; `auto` falls back to the first 4 positions where the rule finds no sink (a short
    suite, a target without one), recording why. Other sink rules pass through (evidence None)."""
    if not (st.sink.target or st.sink.auto):
        return st, None
    from ...model.target_sinks import find_sinks

    try:
        ev = find_sinks(tgt, prompts)
    except DriftError as e:
        if not st.sink.auto:
            raise
        return dataclasses.replace(st, sink=SinkSpec()), {"auto": "first:4", "why": str(e)}
    ev = {**ev, "auto": "target"} if st.sink.auto else ev
    return dataclasses.replace(st, sink=SinkSpec(first_n=0, positions=ev["positions"])), ev


def check_tree_ranks(tree, models: dict) -> None:
    """Checked before anything is written: a child rank no drafter can draft."""
    rank = max(max(p) for p in tree.paths) if tree.kind == "static" else tree.top_k - 1
    for name, m in models.items():
        if rank >= m.config.draft_vocab_size:
            raise DriftError(f"--tree: child rank {rank} needs a draft vocabulary of more than {rank} tokens; "
                             f"drafter {name!r} has {m.config.draft_vocab_size}")


def checked_tokens(suite, tgt, st, tree, probes: str) -> dict[str, list[int]]:
    """Every probe's token ids, each checked against the target's positions before anything is written; the error
    names the file and the probe."""
    token_ids = {}
    for probe in suite:
        try:
            check_text_length(probe, tgt, st.new_tokens(probe) + st.depth + 1)
            ids = probe.tokens(tgt)
            check_prompt(ids, tgt, positions_needed(len(ids), st.new_tokens(probe),
                                                    tree.max_nodes if tree is not None else st.depth))
        except DriftError as e:
            raise DriftError(f"{probes}: probe {probe.id!r}: {e}") from None
        token_ids[probe.id] = ids
    return token_ids


def recorded_settings(st, suite, probes: str, tgt, template_ids, sink_evidence, tree) -> dict[str, Any]:
    """The manifest's capture block: the run settings and what this engine did with them."""
    cs = {
        **st.record(probes, len(suite)),
        "attention": "masses from the fused attention kernel's log-sum-exp over the sink and draft keys; on full rounds "
                     "softmax rows of the K draft queries against the round's final key cache (no L x L maps)",
        "draft_sampling": st.draft_sampling if st.temperature > 0 else "greedy (temperature 0)",
        "rejection": "standard",  # drifttool's verifier: the target's own tokens (speculative sampling at T > 0)
    }
    cs["template_ids"] = list(template_ids)
    if sink_evidence is not None:
        cs["sink_rule"] = sink_rule(sink_evidence)
        cs["sink_target"] = sink_evidence
    if any(p.messages is not None for p in suite):
        cs["chat_format"] = tgt.chat_format
    if tree is not None:
        cs["tree"] = tree.to_dict()
        cs["attention"] = ("softmax rows of the tree's query rows (root + expanded nodes) against the "
                           "round's final key cache under the ancestor mask (no L x L maps)")
        cs["draft_sampling"] = "tree: drafter top-k at temperature 1 (EAGLE); sampled verification q = 1"
        # what a tree capture does, whatever --keep-rows / --full-every said: every node's row in full, no rows/
        cs.update(keep_rows=0, full_every=1, full_every_note=(
            "tree capture: every node's attention row is computed in full on every round (entropy and head maxima "
            "everywhere); no sampled rows are written (--keep-rows and --full-every do not apply to trees)"))
    return cs


def check_recent(recent: int, token_ids: dict[str, list[int]], probes: str) -> None:
    """A --recent window longer than every prompt makes the recent mass the whole prompt's (less the sinks) on every
    round: refused when asked for; the default window is never refused (short suites keep running)."""
    longest = max((len(v) for v in token_ids.values()), default=0)
    if recent != RECENT and token_ids and recent >= longest:
        raise DriftError(f"--recent {recent}: longer than every prompt of {probes} (the longest has {longest} tokens), "
                         "so the recent mass would be the whole prompt's; give a window shorter than the prompts")


def sink_rule(evidence: dict) -> str:
    """The manifest's capture.sink_rule for a resolved `target` / `auto` sink."""
    if evidence.get("auto") == "first:4":
        return "auto: first:4 (the target's own sink was not found: " + evidence["why"] + ")"
    return "auto: target" if evidence.get("auto") else "target"


def capture_prompt(target: Target, drafters: dict[str, Eagle3Drafter],
                   job: PromptJob) -> tuple[dict[str, pd.DataFrame], dict]:
    """All drafters on one prompt (the target's teacher-forced pass shared); the shard's tables and rows."""
    st = job.settings
    # the target's work on the prompt is done once and shared: its teacher-forced pass, or its prompt forward
    t0 = time.perf_counter()
    forced = (teacher_forcing_data(target, job.ids, st.depth, job.max_new_tokens) if st.mode == "teacher-forced"
              else None)
    prefill = prefill_prompt(target, job.ids) if st.mode == "generate" and len(drafters) > 1 else None
    shared = forced is not None or prefill is not None
    prefill_s = time.perf_counter() - t0 if shared else 0.0  # the target's shared work: in no drafter's wall_s

    def run(name: str, d: Eagle3Drafter):
        with Capture(d, sink=st.sink, keep_rows=st.keep_rows, seed=job.seed, full_every=st.full_every,
                     recent=st.recent, template_ids=tuple(job.template_ids)) as cap:
            tabs, arr, _ = capture_one(target, name, d, cap, job, forced, prefill)
        tabs["prompts"] = tabs["prompts"].assign(prefill_s=prefill_s)
        return tabs, arr

    return each_drafter(drafters, run)


def drafter_device(target: Target, device: str, device_map: str | None) -> str:
    """Where the drafters run: `device`, or with a device_map the target's last device (its lm_head's), where
    its features and logits come out, so a round moves no tensor between devices."""
    return str(target.last_device) if device_map is not None else device


def _tree_settings(tree: TreeSpec | str | None, st: RunSettings) -> tuple[TreeSpec | None, RunSettings]:
    """`--tree` parsed, with the settings it implies: trees are verified by the target (generate mode only), and
    the tree's depth bound is the run's depth."""
    if tree is None:
        return None, st
    tree = parse_tree(tree) if isinstance(tree, str) else tree
    if st.mode != "generate":
        raise DriftError("--tree: trees are verified by the target (--mode generate only)")
    return tree, dataclasses.replace(st, depth=tree.max_depth)


def _capture_probe(tgt: Target, models: dict[str, Eagle3Drafter], job: PromptJob,
                   tree: TreeSpec | None) -> tuple[dict[str, pd.DataFrame], dict | None]:
    """One probe through every drafter as draft trees or chains: the shard's tables and sampled rows (trees
    write none)."""
    if tree is not None:
        return capture_tree_prompt(tgt, models, job, tree), None
    return capture_prompt(tgt, models, job)


def token_cost(token_ids: dict[str, list[int]], st: RunSettings, n_models: int, probe) -> int:
    """A prompt's work in tokens for the progress display: its prompt and its new tokens, once per drafter."""
    return (len(token_ids[probe.id]) + st.new_tokens(probe)) * n_models


def run_capture(
    target: str | Target,
    drafters: list[DrafterSpec],
    probes: str,
    out: str,
    settings: RunSettings | None = None,
    *,
    extra_manifest: dict[str, Any] | None = None,
    tree: TreeSpec | str | None = None,
    ray: str | None = None,
    ray_workers: int = 2,
    **kw: Any,
) -> Path:
    """Capture every probe with every drafter into the trace `out`; returns its path.

    `settings` is a checked `RunSettings`, or give its fields as keywords (`depth=8`, `mode`, `max_new_tokens`,
    `dtype`, `device`, `sink`, `seed`, `keep_rows`, `temperature`, `limit`, `draft_sampling`, `device_map`,
    `full_every`, `recent`). The output's keywords (runner.Output): `resume`, `overwrite`, `progress`, `compact`
    (merge the shards into one file per table when the capture finishes). `draft_sampling` (temperature > 0
    only): "greedy" as vLLM drafts by default, or "probabilistic" (see loop.DRAFT_SAMPLING). `device_map` (e.g.
    "auto") spreads the target over devices; the drafters then run on its last device. `tree` (run/tree.py:
    static rank paths or dynamic:top_k=..,depth=..,total=..): draft trees instead of chains; the depth is then
    the tree's depth bound. `ray` (an address, or "local" for a cluster of this machine): the prompts shared by
    `ray_workers` Ray actors (run/engines/ray_pool.py), the trace identical to a single-process run's."""
    output = Output.take(out, kw)
    _check_ray(ray, ray_workers, target, kw)
    st, suite = begin(settings, kw, drafters, probes, "run_capture", target=target, out=output)  # before loading
    tree, st = _tree_settings(tree, st)
    tgt_path, tgt, dev, drafters, models = _load_models(target, drafters, st, tree)
    st, sink_evidence = resolve_sink(st, tgt, [p.tokens(tgt) for p in suite[:8]])
    template_ids = tuple(tgt.template_ids)
    token_ids = checked_tokens(suite, tgt, st, tree, probes)
    check_recent(st.recent, token_ids, probes)
    settings_ = recorded_settings(st, suite, probes, tgt, template_ids, sink_evidence, tree)
    manifest = build_manifest(tgt, tgt_path, models, settings_, extra_manifest)

    def step(writer, bar, probe) -> None:
        job = PromptJob(st, probe, token_ids[probe.id], template_ids)
        try:
            tables, rows = _capture_probe(tgt, models, job, tree)
        except DriftError as e:  # e.g. NaN/inf target features: name the target and the probe
            raise DriftError(f"{tgt_path or tgt.name}: probe {probe.id!r}: {e}") from None
        writer.add(probe.id, tables, rows)
        bar.advance(probe.id, int(len(tables.get("rounds", []))), cost(probe))

    cost = partial(token_cost, token_ids, st, len(models))
    tok = Path(tgt_path) / "tokenizer.json" if tgt_path else None
    if ray is not None:  # what each worker loads, and where
        spec = dict(address=ray, workers=ray_workers, target=str(Path(tgt_path).resolve()), settings=st, tree=tree,
                    drafters=[DrafterSpec(d.name, str(Path(d.path).resolve()), d.overrides) for d in drafters],
                    capture=_capture_probe, drafter_device=dev, gpus=1 if str(st.device).startswith("cuda") else 0)
        return _on_ray(output, manifest, suite, token_ids, template_ids, cost, len(models), tok, spec)
    writer = write_run(output, manifest, lambda w: [(1, p) for p in suite if p.id not in w.done], step, len(models),
                       tok, cost=cost)
    return writer.path


def _load_models(target, drafters: list[DrafterSpec], st: RunSettings, tree) -> tuple:
    """(target folder or None, target, the drafters' device, the resolved specs, the drafters by name); hub ids
    become their cached snapshot folders here, so identity, tokenizer copy and manifest see files."""
    from ...model.hub import resolve

    tgt_path = None if isinstance(target, (Target, nn.Module)) else str(resolve(target, "target"))
    tgt = load_target(tgt_path or target, device=st.device, dtype=st.torch_dtype, device_map=st.device_map)
    dev = drafter_device(tgt, st.device, st.device_map)
    drafters = [DrafterSpec(d.name, str(resolve(d.path, "drafter")), d.overrides) for d in drafters]
    models = load_drafters(drafters, tgt.shape(), dev, st.torch_dtype)
    check_mtp_targets(drafters, models, tgt_path)
    if tree is not None:
        check_tree_ranks(tree, models)
    tgt.set_aux_layer_ids(next(iter(models.values())).config.input_aux_layer_ids)
    return tgt_path, tgt, dev, drafters, models


def _check_ray(ray: str | None, workers: int, target, kw: dict) -> None:
    """--ray's own settings, before anything loads: a target folder each worker can load, a worker count."""
    if ray is None:
        return
    if isinstance(target, (Target, nn.Module)) or kw.get("device_map"):
        raise DriftError("--ray: give the target as a folder (each worker loads it) and no --device-map")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise DriftError(f"--ray-workers {workers!r}: expected a whole number >= 1")


def _on_ray(output, manifest, suite, token_ids, template_ids, cost, n_models: int, tok, spec: dict) -> Path:
    """run_capture's prompts on Ray workers (ray_pool; `spec`: address, workers, what each loads): one planned
    item, the prompts not written yet."""
    from .ray_pool import connect, run_on_ray

    address, n = spec["address"], spec["workers"]
    ray, started = connect(address, n, spec["gpus"])

    def step(writer, bar, todo) -> None:
        writer.record("ray", {"address": address, "workers": n})
        run_on_ray(ray, writer, bar, todo, token_ids, template_ids, cost, spec)

    try:
        todo = lambda w: [(len(t), t)] if (t := [p for p in suite if p.id not in w.done]) else []  # noqa: E731
        writer = write_run(output, manifest, todo, step, n_models, tok, cost=lambda t: sum(map(cost, t)))
    finally:
        if started:
            ray.shutdown()
    return writer.path
