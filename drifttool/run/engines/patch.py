"""`drifttool patch`: the same prompts with and without an intervention (run/interventions.py), paired round by
round so that a difference is the drafter's, not the engine's or the prompt's.

Pairing. Under greedy decoding the committed tokens are the target's greedy continuation whatever the drafter
drafts; only where the rounds start depends on the drafter's acceptance. So per prompt the target runs once
(its greedy continuation and every position's features, as teacher forcing computes them) and both passes read
it: the **clean** pass drafts as `capture` does (each depth fed the previous draft; a round accepts the longest
prefix of drafts equal to the continuation, and the next round starts after it and its bonus token), and each
**intervened** pass drafts at exactly the clean pass's round starts (its `context_len`s), its drafts scored
against the same continuation tokens. Round r of both passes therefore sees the same context and the same target
tokens; an intervention at strength 0 reproduces the clean pass bit for bit (tested).

The result is an ordinary trace: each drafter's clean series under its own name, each intervened one as
`NAME+LABEL` (e.g. `eagle3+feedback-norm@2-K`), the interventions in the manifest (`patch`), so `compare`, the
dashboard and `check` read it as any trace; `analysis/patching.py` states what each intervention changes."""

from __future__ import annotations

import dataclasses
import time
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from ...errors import DriftError
from ...model.drafter import Eagle3Drafter
from ...model.target import load_target
from ..drafters import DrafterSpec, load_drafters
from ..hooks import Capture
from ..interventions import Intervention, applied
from ..loop import RoundRecord, draft_chain, draft_token, run_rounds, teacher_forcing_data, teacher_verify
from ..manifest import build_manifest
from ..runner import Output, PromptJob, begin, write_run
from ..spans import PromptView, Span, scan_spans
from .hf import checked_tokens, recorded_settings, resolve_sink, shard_of, token_cost
from .shard import each_drafter


@torch.no_grad()
def chain_pass(drafter: Eagle3Drafter, prompt_ids: list[int], depth: int, max_new_tokens: int, forced,
               observers=(), schedule: list[int] | None = None) -> list[RoundRecord]:
    """One drafter over one prompt against the target's precomputed greedy continuation `forced` (tokens,
    features): rounds advance by their own acceptance (clean), or by `schedule[r]` committed tokens (the clean
    pass's, so round r starts where the clean round r started)."""
    forced_seq, feats = forced
    seq = [*prompt_ids, forced_seq[len(prompt_ids)]]
    cache = drafter.new_cache(capacity=len(prompt_ids) + max_new_tokens + 2 * depth + 8)
    pick = partial(draft_token, drafter, temperature=0.0)

    def one_round(index: int, step, n: int, t0: float):
        drafts, dprobs, fed = draft_chain(drafter, cache, step, n, depth, seq[-1], pick, None)
        draft_s = time.perf_counter() - t0
        v = teacher_verify(forced_seq, feats, drafts, dprobs, n)
        rec = RoundRecord(round=index, context_len=n, draft_ids=drafts, target_ids=v.target_ids,
                          accepted=v.accepted, match=[d == t for d, t in zip(drafts, v.target_ids)], bonus=v.bonus,
                          input_ids=fed, draft_s=draft_s)
        if schedule is None:
            adv = len(committed(rec))
        elif index < len(schedule):
            adv = schedule[index]
        else:
            raise DriftError("patch: the intervened pass ran past the clean pass's rounds")
        return rec, forced_seq[n + 1:n + 1 + adv], feats[n:n + adv]

    return run_rounds(drafter, cache, list(prompt_ids), seq, feats[:len(prompt_ids)], max_new_tokens, (), depth,
                      list(observers), one_round)


def committed(r: RoundRecord) -> list[int]:
    """The tokens a round commits: its accepted drafts, then the target's bonus token."""
    return [*r.draft_ids[:r.accepted], r.bonus]


def schedule_of(rounds: list[RoundRecord]) -> list[int]:
    """How many tokens each clean round committed: the intervened pass's round starts."""
    return [len(committed(r)) for r in rounds]


def without(job: PromptJob, forced, positions: list[int]):
    """The prompt job and the target's precomputed continuation with the prompt `positions` deleted (prompt.delete:
    the drafter's context loses those slots and their features; the continuation's tokens and features stay the
    clean pass's, so round r, which starts at the same generated position, is scored against the same tokens)."""
    if not positions:
        return job, forced
    n = len(job.ids)
    gone = set(positions)
    keep = [i for i in range(n) if i not in gone]
    if not keep:
        raise DriftError(f"patch: a span covers the whole prompt of probe {job.probe.id!r}; nothing would be left")
    seq, feats = forced
    idx = torch.tensor(keep + list(range(n, feats.shape[0])), dtype=torch.long)
    return (dataclasses.replace(job, ids=[job.ids[i] for i in keep]),
            ([seq[i] for i in keep] + list(seq[n:]), feats.index_select(0, idx.to(feats.device))))


def _pass(name: str, d: Eagle3Drafter, iv: Intervention | None, job: PromptJob, forced, schedule, deleted=()):
    """One pass through an attached Capture: its tables, sampled rows and round records (`deleted`: the prompt
    positions a prompt.delete takes out of the drafter's context)."""
    job, forced = without(job, forced, list(deleted))
    st = job.settings
    t0 = time.perf_counter()
    with Capture(d, sink=st.sink, keep_rows=st.keep_rows, seed=job.seed, full_every=st.full_every, recent=st.recent,
                 template_ids=tuple(job.template_ids)) as cap, applied(d, iv, st.depth, forced[1], cap):
        rounds = chain_pass(d, job.ids, st.depth, job.max_new_tokens, forced, [cap], schedule)
    n_gen = min(job.max_new_tokens, sum(len(committed(r)) for r in rounds))
    tabs, rows = shard_of(name, d, job, rounds, cap, n_gen, time.perf_counter() - t0)
    return tabs, rows, rounds


def patch_prompt(target, drafters: dict[str, Eagle3Drafter], ivs: list[Intervention], job: PromptJob):
    """Every drafter's clean pass and each intervention's paired pass on one prompt (the target's work once)."""
    st = job.settings
    forced = teacher_forcing_data(target, job.ids, st.depth, job.max_new_tokens)
    view = PromptView(job.ids, target.tokenizer, job.template_ids)
    deleted = {iv.label: (Span.parse(iv.span).positions(view) if iv.strength else [])
               for iv in ivs if iv.site == "prompt"}

    def run(name: str, d: Eagle3Drafter):
        tabs, rows, rounds = _pass(name, d, None, job, forced, None)
        parts = [tabs]
        for iv in ivs:
            t, r, _ = _pass(patched_name(name, iv), d, iv, job, forced, schedule_of(rounds), deleted.get(iv.label, ()))
            parts.append(t)
            rows.update(r or {})
        return {k: pd.concat([p[k] for p in parts], ignore_index=True) for k in parts[0]}, rows

    return each_drafter(drafters, run)


def patched_name(name: str, iv: Intervention) -> str:
    return f"{name}+{iv.label}"


def _check_sites(interventions: list[Intervention], scan: int | None = None) -> None:
    if not interventions and not scan:
        raise DriftError("patch: give at least one --site, --span or --scan (or --sites FILE)")
    if scan is not None and scan < 1:
        raise DriftError(f"--scan-window {scan}: expected a window of at least 1 token")
    labels = [iv.label for iv in interventions]
    if len(set(labels)) < len(labels):
        raise DriftError(f"patch: the same intervention given twice ({', '.join(labels)})")


def scanned(interventions: list[Intervention], views: list[PromptView], window: int) -> list[Intervention]:
    """The interventions with every span `--scan` tries on the suite (run/spans.scan_spans) added once."""
    have = {iv.label for iv in interventions}
    extra = []
    for sp in scan_spans(views, window):
        iv = Intervention("prompt", "delete", span=sp.spec)
        if iv.label not in have:
            have.add(iv.label)
            extra.append(iv)
    if not extra and not interventions:
        raise DriftError("patch --scan: no span found in the suite's prompts")
    return [*interventions, *extra]


def patch_manifest(manifest: dict, models: dict, interventions: list[Intervention]) -> dict:
    """The manifest with, on each intervened series' drafter entry, what it is (`patch`: of which drafter, which
    intervention)."""
    for entry in manifest["drafters"]:
        for name in models:
            for iv in interventions:
                if entry["name"] == patched_name(name, iv):
                    entry["patch"] = {"of": name, **iv.to_dict()}
    return manifest


def run_patch(target: str, drafters: list[DrafterSpec], probes: str, out: str, interventions: list[Intervention],
              **kw: Any) -> Path:
    """Capture every probe with every drafter clean and under each intervention, paired (module doc), into the
    trace `out`; returns its path. Keywords as run_capture's (greedy decoding only: the pairing needs the target's
    continuation to be the drafter's no matter what it drafts); `scan=W` adds every span `scan_spans` finds on the
    suite (windows of W tokens), after the given interventions."""
    scan = kw.pop("scan", None)
    _check_sites(interventions, scan)
    output = Output.take(out, kw)
    st, suite = begin(None, kw, drafters, probes, "run_patch", target=target, out=output)
    if st.temperature != 0 or st.mode != "generate":
        raise DriftError("patch: pairs rounds under greedy decoding only (--temperature 0, --mode generate)")
    from ...model.hub import resolve

    tgt_path = str(resolve(target, "target"))
    tgt = load_target(tgt_path, device=st.device, dtype=st.torch_dtype)
    drafters = [DrafterSpec(d.name, str(resolve(d.path, "drafter")), d.overrides) for d in drafters]
    models = load_drafters(drafters, tgt.shape(), st.device, st.torch_dtype)
    for name, m in models.items():
        if m.config.num_aux == 0 and any(iv.site == "aux" for iv in interventions):
            raise DriftError(f"drafter {name!r}: no aux features (an MTP head); aux sites do not apply")
    tgt.set_aux_layer_ids(next(iter(models.values())).config.input_aux_layer_ids)
    st, sink_evidence = resolve_sink(st, tgt, [p.tokens(tgt) for p in suite[:8]])
    template_ids = tuple(tgt.template_ids)
    token_ids = checked_tokens(suite, tgt, st, None, probes)
    if scan:
        interventions = scanned(interventions, [PromptView(token_ids[p.id], tgt.tokenizer, template_ids)
                                                for p in suite], scan)
    settings_ = recorded_settings(st, suite, probes, tgt, template_ids, sink_evidence, None)
    settings_["pairing"] = ("patch: the target's greedy continuation computed once per prompt; intervened passes "
                            "draft at the clean pass's round starts, scored against the same tokens")
    series = {n: m for name, m in models.items() for n in (name, *(patched_name(name, iv) for iv in interventions))}
    patch = {"interventions": [iv.to_dict() for iv in interventions],  # in the identity: --resume checks it
             "words": {iv.label: iv.words(st.depth) for iv in interventions}}
    manifest = patch_manifest(build_manifest(tgt, tgt_path, series, settings_, {"patch": patch}), models,
                              interventions)

    def step(writer, bar, probe) -> None:
        job = PromptJob(st, probe, token_ids[probe.id], template_ids)
        tables, rows = patch_prompt(tgt, models, interventions, job)
        writer.add(probe.id, tables, rows)
        bar.advance(probe.id, int(len(tables.get("rounds", []))), cost(probe))

    cost = partial(token_cost, token_ids, st, len(series))
    writer = write_run(output, manifest, lambda w: [(1, p) for p in suite if p.id not in w.done], step, len(series),
                       Path(tgt_path) / "tokenizer.json", cost=cost)
    return writer.path
