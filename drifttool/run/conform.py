"""`drifttool conform`: is the engine running this drafter as it was trained?

Three parts, one report. Static: the checkpoint's config against its weights and each engine's reading of it
(model/conformance.py). Dynamic: the engine runs the drafter on the probes (greedy, generate mode) and writes a
trace; drifttool's reference drafter, loaded as the checkpoint declares, is re-run on the engine's own rounds
(run/follow.py) and its drafts compared per depth, with the fed-back and fc-input RMS of both sides. Diagnosis:
when they disagree, the reference is re-run under each combination of fc_norm, norm_output, norm_before_fc,
norm_before_residual, aux-feature order and attention window, and the combination that reproduces the engine
is named (or none). Training vs serving: the trainer's held-out depth-1 agreement (report.json) against the
measured depth-1 acceptance, with its interval over groups (source documents). An MTP head (a target folder with
multi-token-prediction layers) gets its family's readings instead of EAGLE-3 flags (conform_mtp.py)."""

from __future__ import annotations

import itertools
import json
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import DriftError
from ..model.checkpoint import read_drafter
from ..model.conformance import Finding, static_findings
from ..model.flags import conflicts, reading_names
from ..model.target import load_target
from .conform_mtp import diagnose_mtp, mtp_declared, mtp_static_findings, own_tensors
from .conform_rules import AGREE, NAMES, agreement, drafts_of, judged  # noqa: F401 - AGREE, NAMES: public here
from .drafters import DrafterSpec
from .follow import Followed, committed_sequence, follow, variant, varied
from .probes import load_suite

# the weights' health findings (model/weight_health.py): reported, not part of the engine's conformance
HEALTH_CODES = ("norm_never_trained", "norm_barely_moved", "norm_mostly_untouched", "nonfinite_weights", "zero_rows")


@dataclass
class ConformReport:
    drafter: str
    engine: str
    declared: dict[str, Any]
    findings: list[Finding]
    trace: str | None = None
    per_depth: list[dict[str, Any]] = field(default_factory=list)
    divergence: dict[str, Any] = field(default_factory=dict)
    diagnosis: dict[str, Any] | None = None
    training: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def conformant(self) -> bool:
        """The engine runs the drafter as declared: no error or warning about its reading, drafts that agree. The
        weights' health (norms that never trained, ...: model/weight_health.py) is reported beside it, not part
        of it: a bad training run is not an engine misreading its checkpoint."""
        bad = [f for f in self.findings if f.severity in ("error", "warning") and f.code not in HEALTH_CODES]
        agree = self.divergence.get("agreement")  # None: the engine or the reference could not run it
        return not bad and agree is not None and agree >= AGREE and not (self.training or {}).get("flagged")

    @property
    def healthy(self) -> bool:
        """No error or warning about the weights themselves (model/weight_health.py)."""
        return not [f for f in self.findings if f.code in HEALTH_CODES and f.severity in ("error", "warning")]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["conformant"] = self.conformant
        d["weights_healthy"] = self.healthy
        return d


def _rounds_of(trace, drafter: str) -> dict[str, list[dict]]:
    """Per prompt, the engine's rounds in order: context length, accepted, bonus, drafts and target ids per depth."""
    r = trace.rounds
    r = r[r["drafter"].astype(str) == drafter].sort_values(["prompt_id", "round"])
    d = trace.depths
    d = d[d["drafter"].astype(str) == drafter].sort_values(["prompt_id", "round", "depth"])
    out: dict[str, list[dict]] = {}
    by = {k: g for k, g in d.groupby([d["prompt_id"].astype(str), "round"], sort=False)}
    for row in r.itertuples():
        g = by[(str(row.prompt_id), row.round)]
        out.setdefault(str(row.prompt_id), []).append({
            "context_len": int(row.context_len), "accepted": int(row.accepted), "bonus": int(row.bonus),
            "draft_ids": g["draft_id"].to_numpy(np.int64), "target_ids": g["target_id"].to_numpy(np.int64),
            "rms_in": g["rms_in"].to_numpy(np.float64)})
    return out


def _features(target, prompt_ids: list[int], rounds: list[dict]) -> tuple[list[int], torch.Tensor]:
    """The committed sequence (the prompt, the target's first token, each round's commits) and its features."""
    target.reset()
    out = target.forward(torch.tensor(prompt_ids))
    first = int(out.logits[-1].argmax())
    seq = committed_sequence([*prompt_ids, first], rounds)
    rest = target.forward(torch.tensor(seq[len(prompt_ids):]))
    return seq, torch.cat([out.features, rest.features])


def _describe(declared: dict[str, Any], combo: dict[str, Any]) -> str:
    names = reading_names()
    parts = [names.get((k, v), f"{k}={v}") for k, v in combo.items()
             if k in varied() and bool(declared.get(k)) != bool(v)]
    if combo.get("aux_order") == "reversed":
        parts.append("aux features in reverse order")
    if combo.get("window") == "off":
        parts.append("attention window not applied")
    return "; ".join(parts) or "as declared"


def diagnose(target, drafter, prompts: dict[str, tuple[list[int], torch.Tensor, list[dict]]], depth: int,
             engine_drafts: np.ndarray, screen: int = 6, finalists: int = 3) -> dict[str, Any]:
    """Every flag combination (and aux order, window) re-run on the engine's rounds; the best match named.
    Each combination is screened on the first `screen` rounds of every prompt; the `finalists` best (and the
    declared reading) are re-run on every round, and the verdict rests on those."""
    flag_names = varied()
    base = {k: drafter.config.flag(k) for k in flag_names}
    a = drafter.config.num_aux
    orders = {"declared": None, "reversed": list(range(a))[::-1]} if a > 1 else {"declared": None}
    windows = {"declared": drafter.config.sliding_window}
    if drafter.config.sliding_window:
        windows["off"] = None
    sizes = [len(rr) for _, _, rr in prompts.values()]
    starts = np.cumsum([0, *sizes[:-1]])  # each prompt's first row in engine_drafts
    screened_rows = np.concatenate([o + np.arange(min(screen, n)) for o, n in zip(starts, sizes)])
    tried = []
    for vals in itertools.product([False, True], repeat=len(flag_names)):
        flags = dict(zip(flag_names, vals))
        if conflicts(flags):
            continue
        for (oname, order), (wname, win) in itertools.product(orders.items(), windows.items()):
            combo = {**flags, "aux_order": oname, "window": wname}
            m = variant(drafter, **flags, sliding_window=win)
            drafts = drafts_of(target, m, prompts, depth, order, screen)
            tried.append({**combo, "as": _describe(base, combo), "screened_rounds": int(len(screened_rows)),
                          "screen_agreement": agreement(drafts, engine_drafts[screened_rows]), "agreement": None,
                          "_model": (m, order)})
    tried.sort(key=lambda t: (-t["screen_agreement"], t["as"] != "as declared"))
    final = tried[:finalists] + [t for t in tried[finalists:] if t["as"] == "as declared"]
    for t in final:
        m, order = t["_model"]
        t["agreement"] = agreement(drafts_of(target, m, prompts, depth, order, None), engine_drafts)
    for t in tried:
        t.pop("_model")
    best, declared, verdict = judged(final, "this checkpoint", "combination")
    return {"verdict": verdict, "best": best, "declared": declared, "finalists": final, "tried": tried,
            "method": f"{len(tried)} combinations screened on the first {screen} rounds of each prompt; the "
                      f"{finalists} best and the declared reading re-run on all {len(engine_drafts)} rounds"}


def training_gap(folder: Path, depth1: dict[str, np.ndarray]) -> dict[str, Any] | None:
    """The trainer's held-out depth-1 agreement (drifttool's report.json: heldout_top1_per_step) against the
    measured depth-1 acceptance, with a t-interval over groups (`depth1`: group -> per-round accepted flags;
    rounds of one source document are not independent)."""
    f = folder / "report.json"
    if not f.is_file():
        return None
    try:
        trained = float(json.loads(f.read_text())["heldout_top1_per_step"][0])
    except (ValueError, TypeError, OSError, KeyError, IndexError):
        return None  # a report.json of another trainer's format: nothing to compare
    if not 0.0 <= trained <= 1.0:  # NaN or 7.5 is no agreement rate: not compared (it was, as the trained value)
        return {"trained_heldout_depth1": None, "flagged": False,
                "note": f"{f}: heldout_top1_per_step[0] is {trained!r}, not an agreement rate in [0, 1]; not compared"}
    per_group = np.array([v.mean() for v in depth1.values() if len(v)])
    out: dict[str, Any] = {"trained_heldout_depth1": trained, "measured_depth1": float(per_group.mean()),
                           "n_groups": int(len(per_group))}
    if len(per_group) < 6:
        out.update(flagged=False, note=f"{len(per_group)} groups: too few to judge a gap (needs 6 or more)")
        return out
    from scipy import stats

    half = float(stats.t.ppf(0.975, len(per_group) - 1) * per_group.std(ddof=1) / np.sqrt(len(per_group)))
    lo, hi = out["measured_depth1"] - half, out["measured_depth1"] + half
    out.update(ci95=[lo, hi], flagged=not lo <= trained <= hi,
               note="held-out positions are teacher-forced conversations, the probes are another distribution: "
                    "a gap says to look, not that the engine is wrong")
    return out


def intended_flags(declared: dict[str, Any], findings: list[Finding]) -> dict[str, bool]:
    """What the trainer meant where an engine reads the checkpoint otherwise: a flag stored in the speculators
    transformer_layer_config (no engine reads it there), and speculators' own false for an absent
    norm_before_residual (vLLM assumes true). The reference runs this reading, so the dynamic check shows the
    engine's misread instead of sharing it."""
    out: dict[str, bool] = {}
    for f in findings:
        if f.code == "flag_not_read" and f.value is not None:
            out[f.flag] = bool(f.value)
        elif f.code == "default_differs":
            out["norm_before_residual"] = False
    return out


def mtp_config_of(path: Path) -> dict[str, Any] | None:
    """The raw config of an MTP head's folder (a target with multi-token-prediction layers), else None."""
    from ..jsonfile import read_json_object
    from ..model.mtp_checkpoint import is_mtp_config

    cfg = path / "config.json"
    try:
        raw = read_json_object(cfg, "a drafter config") if cfg.is_file() else None
    except DriftError:
        return None  # static_findings reports an unreadable config
    return raw if isinstance(raw, dict) and is_mtp_config(raw) else None


def _check_usage(depth: int, max_new_tokens: int, limit: int | None, engine_overrides: dict | None) -> None:
    """Usage errors first (exit 2 through DriftError): before, an engine that refused them was reported as the
    verdict "NOT conformant" (exit 1, which CI reads as a non-conformant drafter)."""
    from ..model.ckpt_config import parse_override
    from .argcheck import run_settings

    run_settings(depth, max_new_tokens, 0.0, 0, 0, limit, None)
    if max_new_tokens < 2:
        raise DriftError(f"--max-new-tokens {max_new_tokens}: conform needs at least one drafted round; give >= 2")
    for k, v in (engine_overrides or {}).items():
        parse_override(k, v)  # raises "--override k=v: expected ..." for a value no engine could take


def per_depth_agreement(same: np.ndarray, eng_rms: np.ndarray, ref_rms: np.ndarray) -> list[dict[str, Any]]:
    """Per depth: the engine's drafts against the reference's (all rounds, and rounds whose earlier depths
    agreed), and both layer-input RMS. same: [rounds, K] bool."""
    prefix = np.cumprod(same, axis=1).astype(bool)
    out = []
    for k in range(same.shape[1]):
        reach = prefix[:, k - 1] if k else np.ones(len(same), bool)
        out.append({
            "depth": k + 1, "rounds": int(len(same)), "agreement": float(same[:, k].mean()),
            "agreement_after_agreeing_prefix": float(same[reach, k].mean()) if reach.any() else None,
            "rounds_with_agreeing_prefix": int(reach.sum()),
            "engine_layer_input_rms": float(np.nanmean(eng_rms[:, k])), "reference_layer_input_rms": float(ref_rms[:, k].mean())})
    return out


def divergence(same: np.ndarray) -> dict[str, Any]:
    """Overall agreement and, per depth, how many rounds first diverge there."""
    first = np.where(same.all(1), 0, np.argmin(same, axis=1) + 1)
    return {"agreement": float(same.mean()), "rounds": int(len(same)), "rounds_fully_agreeing": int(same.all(1).sum()),
            "first_divergence_depth": {str(k): int((first == k).sum()) for k in range(1, same.shape[1] + 1)
                                       if (first == k).any()}}


CONFORM_RUN: dict[str, Any] = {"depth": 4, "max_new_tokens": 32, "limit": None, "device": "cpu", "dtype": "float32"}


def conform(drafter: str, target: str, probes: str, engine: str = "hf", *,
            engine_overrides: dict[str, str] | None = None, engine_options: dict[str, Any] | None = None,
            out: str | None = None, run_diagnosis: bool = True, progress: bool = False, **run: Any) -> ConformReport:
    """The whole check; see the module docstring. `run`: the engine run's `depth`, `max_new_tokens`, `limit`,
    `device` and `dtype` (defaults CONFORM_RUN). `engine_overrides` make the engine side load the checkpoint
    differently (`?flag=value` on --drafter: a planted misread to test the diagnosis with)."""
    unknown = sorted(set(run) - set(CONFORM_RUN))
    if unknown:
        raise TypeError(f"conform: unexpected keyword {unknown[0]!r}; the run takes {', '.join(CONFORM_RUN)}")
    depth, max_new_tokens, limit, device, dtype = ({**CONFORM_RUN, **run}[k] for k in CONFORM_RUN)
    from ..model.hub import resolve
    from ..trace.reader import read_trace
    from .engines import engine as engine_named

    _check_usage(depth, max_new_tokens, limit, engine_overrides)
    path = resolve(drafter, "drafter")
    mtp = mtp_config_of(path)
    if mtp is not None:  # an MTP head: the family's readings, not EAGLE-3 flags (conform_mtp.py)
        declared, findings = mtp_declared(mtp, path), mtp_static_findings(path, mtp, depth)
    else:
        declared, findings = static_findings(path)
    rep = ConformReport(str(path), engine, declared, findings)
    eng = engine_named(engine)
    with tempfile.TemporaryDirectory() as tmp:
        trace_dir = out or str(Path(tmp) / "conform.drift")
        try:
            t = eng.run(target, [DrafterSpec("engine", str(path), dict(engine_overrides or {}))], probes, trace_dir,
                        depth=depth, max_new_tokens=max_new_tokens, limit=limit, mode="generate", temperature=0.0,
                        device=device, dtype=dtype, progress=progress,
                        **(engine_options or {}))
        except DriftError as e:
            rep.notes.append(f"the engine could not run the checkpoint: {e}")
            return rep
        rep.trace = str(out) if out else None
        ctx = _reference_inputs(rep, read_trace(t), path, target, probes, declared, findings, device, dtype)
        if ctx is None:
            return rep
        tgt, ref, suite, prompts, aux = ctx
    _follow_engine(rep, tgt, ref, prompts, aux, depth, run_diagnosis, path, mtp)
    by_group: dict[str, list[bool]] = {}  # the statistical unit is the source document (probe.group)
    for pid, (_, _, rr) in prompts.items():
        by_group.setdefault(suite[pid].group or pid, []).extend(r["accepted"] >= 1 for r in rr)
    rep.training = training_gap(path, {g: np.array(v, float) for g, v in by_group.items()})
    return rep


def _follow_engine(rep: ConformReport, tgt, ref, prompts: dict, aux, depth: int, run_diagnosis: bool, path,
                   mtp) -> None:
    """The reference drafter follows the engine's rounds: per-depth agreement, divergence, the fc input RMS, and
    (when they disagree) the diagnosis, onto `rep`."""
    followed: dict[str, Followed] = {
        pid: follow(tgt, ref, seq, [r["context_len"] for r in rr], depth, feats) for pid, (seq, feats, rr) in prompts.items()}
    eng_drafts = np.concatenate([np.stack([r["draft_ids"] for r in rr]) for _, _, rr in prompts.values()])
    eng_rms = np.concatenate([np.stack([r["rms_in"] for r in rr]) for _, _, rr in prompts.values()])
    same = np.concatenate([f.drafts for f in followed.values()]) == eng_drafts
    rep.per_depth = per_depth_agreement(same, eng_rms, np.concatenate([f.fed_rms for f in followed.values()]))
    rep.divergence = divergence(same)
    if len(aux):
        ref_feat = np.concatenate([f.feature_rms for f in followed.values()])
        rep.divergence["fc_input_rms"] = {
            "engine": aux.groupby("chunk")["rms_before"].mean().astype(float).round(4).tolist(),
            "reference": ref_feat.mean(0).round(4).tolist()}
    if run_diagnosis and same.mean() < AGREE:
        rep.diagnosis = (diagnose_mtp(tgt, ref, prompts, depth, eng_drafts, own_tensors(path, mtp)) if mtp is not None
                         else diagnose(tgt, ref, prompts, depth, eng_drafts))


def _reference_inputs(rep: ConformReport, trace, path, target: str, probes: str, declared, findings, device: str,
                      dtype: str):
    """(target, reference drafter, suite, per prompt (sequence, target features, engine rounds), engine aux rows)
    for following the engine's rounds; None (with a note on `rep`) when the reference cannot load the checkpoint."""
    rounds = _rounds_of(trace, "engine")
    aux = trace.aux
    aux = aux[aux["drafter"].astype(str) == "engine"] if len(aux) else aux
    tgt = load_target(target, device=device, dtype=dtype)
    intent = intended_flags(declared, findings)
    if intent:
        rep.notes.append("the reference reads the checkpoint as its trainer meant it: " + ", ".join(
            f"{k}={v}" for k, v in intent.items()) + " (see the findings above)")
    try:
        ref = read_drafter(path, tgt.shape(), overrides={k: str(v).lower() for k, v in intent.items()},
                           device=device, dtype=dtype)
    except DriftError as e:
        rep.notes.append(f"the reference cannot load the checkpoint as declared: {e}")
        return None
    tgt.set_aux_layer_ids(ref.config.input_aux_layer_ids)
    suite = {p.id: p for p in load_suite(probes)}
    prompts = {}
    for pid, rr in rounds.items():
        seq, feats = _features(tgt, suite[pid].tokens(tgt), rr)
        prompts[pid] = (seq, feats, rr)
    return tgt, ref, suite, prompts, aux


def _training_lines(tr: dict | None) -> list[str]:
    """The training-vs-serving block of the report (with a drifttool training report), else nothing."""
    if not tr:
        return []
    out = []
    if tr.get("trained_heldout_depth1") is not None:
        ci = f" (95% CI over {tr['n_groups']} groups {tr['ci95'][0]:.3f}-{tr['ci95'][1]:.3f})" if tr.get("ci95") else ""
        out += ["", f"training vs serving: held-out depth-1 agreement {tr['trained_heldout_depth1']:.3f}, measured "
                    f"depth-1 acceptance {tr['measured_depth1']:.3f}{ci}" + ("  GAP" if tr.get("flagged") else "")]
    if tr.get("note"):
        out.append(f"  {tr['note']}")
    return out


def render(rep: ConformReport) -> str:
    """The report as text (one screen)."""
    lines = [f"conform {rep.drafter}  (engine: {rep.engine})", "",
             f"declared: layout {rep.declared['layout']}; " + ", ".join(
                 f"{k}={v}" for k, v in rep.declared["flags"].items()) + f"; aux ids {rep.declared['aux_layer_ids']}"
             + f"; draft vocab {rep.declared['draft_vocab_size']}"]
    lines.append("static: " + ("clean" if not rep.findings else f"{len(rep.findings)} finding(s)"))
    for f in rep.findings:
        lines.append(f"  [{f.severity}] {f.code}: {f.message}")
        for e, what in f.engines.items():
            lines.append(f"      {e}: {what}")
    for n in rep.notes:
        lines.append(f"note: {n}")
    if rep.per_depth:
        d = rep.divergence
        lines += ["", f"dynamic: {d['rounds']} rounds; reference drafts = engine drafts in {d['agreement']:.1%} "
                      f"(all depths); {d['rounds_fully_agreeing']} rounds agree at every depth",
                  "  depth  agree  agree|prefix agreed (rounds)  layer-input RMS engine / reference"]
        for r in rep.per_depth:
            ap = "-" if r["agreement_after_agreeing_prefix"] is None else f"{r['agreement_after_agreeing_prefix']:.3f}"
            lines.append(f"  {r['depth']:>5}  {r['agreement']:.3f}  {ap:>6} ({r['rounds_with_agreeing_prefix']:>4})"
                         f"              {r['engine_layer_input_rms']:.3f} / {r['reference_layer_input_rms']:.3f}")
        if d.get("first_divergence_depth"):
            lines.append("  first divergence at depth: " + ", ".join(f"{k}: {v}" for k, v in d["first_divergence_depth"].items()))
        if d.get("fc_input_rms"):
            lines.append(f"  fc input RMS per aux chunk, engine {d['fc_input_rms']['engine']} / reference "
                         f"{d['fc_input_rms']['reference']}")
    if rep.diagnosis:
        dg = rep.diagnosis
        lines += ["", f"diagnosis: {dg['verdict']}", f"  ({dg['method']})"]
        for t in dg["finalists"]:
            lines.append(f"  {t['agreement']:.1%}  {t['as']}")
    lines += _training_lines(rep.training)
    lines += ["", "verdict: " + ("conformant" if rep.conformant else "NOT conformant")]
    if not rep.healthy:
        lines.append("weights: NOT healthy (see the weight findings above: a training problem, not the engine's)")
    return "\n".join(wrapped(lines))


WIDTH = 80  # a terminal's width: long lines wrap at word boundaries under their own indent (paths stay whole)


def wrapped(lines: list[str], width: int = WIDTH) -> list[str]:
    """Each line within `width` columns where its words allow: continuation lines indented 4 more than the line."""
    import textwrap

    out = []
    for ln in lines:
        if len(ln) <= width:
            out.append(ln)
            continue
        indent = ln[: len(ln) - len(ln.lstrip())]
        out += textwrap.wrap(ln, width=width, subsequent_indent=indent + "    ", break_long_words=False,
                             break_on_hyphens=False)
    return out
