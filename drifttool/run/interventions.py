"""Interventions on a drafter's speculation chain, declared as data: what `drifttool patch` changes.

An intervention is one row: a **site** that exists only in drafters, an **operation** there, the **depths** it acts
at and a **strength** s in [0, 1] (0: nothing changes; 1: the full operation; in between, the interpolation the
operation defines). Written `SITE.OP[@K[-K2]][*S]` on the command line, or as a JSON object with those fields in a
file, and stored in the trace's manifest so a CI gate can pin it.

Sites and operations (depth k is the speculation depth of the query; depth 1's input is fc of the target's
features, so the fed-back state exists from depth 2 on):

- `feedback.norm`: the fed-back state at depth >= k is normalised as EAGLE-3.1's `norm_output` would feed it (the
  drafter's own output norm of the state: `post` instead of `pre`); x <- x + s (norm(x) - x). On an EAGLE-3 drafter
  at s = 1 this is exactly EAGLE-3's weights run with `norm_output` on.
- `feedback.rms1`: the fed-back state at depth >= k scaled to the RMS of the same round's depth-1 layer input;
  x <- x (rms_1 / rms(x))^s: the growth removed, the direction kept.
- `feedback.teacher`: the fed-back state at depth >= k replaced by the teacher-forced state at that slot, fc of the
  target's features there (what the drafter saw at training step 1); x <- x + s (fc(f) - x).
- `aux.fc_norm`: every aux chunk of fc's input normalised per chunk as EAGLE-3.1's `fc_norm` would (RMSNorm,
  weight 1) before fc, at every slot that reads target features (context and depth 1); no depth range.
- `aux.zero-I`: aux chunk I (0-based, low to high layer) scaled by 1 - s before fc (s = 1: zeroed).
- `attention.sink` / `attention.own`: the sink slots / the own drafted slots removed from the depth >= k query's
  softmax (scores + log(1 - s)); `attention.recency`: the own slots' scores shifted per head so that they hold the
  share of the non-sink keys the depth-1 query gave its equally recent prompt keys (the recency-matched ratio 1:
  drift removed, recency kept); `attention.sinkhold`: the sink held at its depth-1 share (run/attention_edits.py).
- `prompt.delete` with a `span` (run/spans.py): the span's prompt tokens deleted from the drafter's context (its
  slots and their target features gone, positions renumbered); the target still reads the whole prompt, so its
  continuation and the features of the kept tokens are the clean pass's. Strength 0 or 1 only (0: nothing deleted).

The interventions act through one wrapper around the drafter's forward (`applied`), so the capture hooks see the
edited run exactly as they see any other: every mass and RMS is measured on what the drafter computed."""

from __future__ import annotations

import contextlib
import json
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import DriftError

SITES = {"feedback": ("norm", "rms1", "teacher"), "aux": ("fc_norm", "zero"),
         "attention": ("sink", "own", "recency", "sinkhold"), "prompt": ("delete",)}
DEPTH_SITES = ("feedback", "attention")  # sites that act at query depths (@K-K2)
_SPEC = re.compile(r"^\s*(feedback|aux|attention)\.([a-z_0-9]+(?:-\d+)?)\s*(?:@\s*(\d+)\s*(?:-\s*(\d+))?)?\s*"
                   r"(?:\*\s*([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?))?\s*$")
SYNTAX = ("SITE.OP[@K[-K2]][*S], e.g. feedback.norm@2-8, feedback.rms1@3*0.5, aux.fc_norm, aux.zero-2, "
          "attention.recency@2")


@dataclass(frozen=True)
class Intervention:
    site: str  # feedback | aux | attention
    op: str  # norm | rms1 | teacher | fc_norm | zero | sink | own | recency | sinkhold
    lo: int = 2  # first depth it acts at (feedback and attention sites)
    hi: int | None = None  # last depth (None: to K)
    strength: float = 1.0
    chunk: int | None = None  # aux.zero's chunk
    span: str | None = None  # prompt.delete's span (run/spans.py)

    def __post_init__(self) -> None:
        if self.site not in SITES or self.op not in SITES[self.site]:
            raise DriftError(f"--site {self.site}.{self.op}: unknown; known: "
                             + ", ".join(f"{s}.{o}" for s, ops in SITES.items() for o in ops))
        if not (isinstance(self.strength, (int, float)) and math.isfinite(self.strength)
                and 0 <= self.strength <= 1):
            raise DriftError(f"--site {self.label}: strength {self.strength!r}; expected a number in [0, 1]")
        if self.site in DEPTH_SITES:
            if self.lo < 1 or (self.hi is not None and self.hi < self.lo):
                raise DriftError(f"--site {self.label}: depths {self.lo}-{self.hi}; expected 1 <= K <= K2")
        if (self.op == "zero") != (self.chunk is not None):
            raise DriftError(f"--site aux.{self.op}: aux.zero takes its chunk (aux.zero-I), nothing else does")
        if (self.site == "prompt") != (self.span is not None):
            raise DriftError(f"--site {self.site}.{self.op}: only prompt.delete takes a span (--span KIND:ARG)")
        if self.site == "prompt":
            from .spans import Span

            object.__setattr__(self, "span", Span.parse(self.span).spec)
            if self.strength not in (0, 1):
                raise DriftError(f"--span {self.span}: strength {self.strength:g}; a deletion takes 0 or 1")

    @property
    def label(self) -> str:
        """The series-name suffix and the manifest's short form: `feedback-norm@2-8`, `aux-zero-2x0.5`."""
        op = f"{self.op}-{self.chunk}" if self.op == "zero" else self.op
        if self.site == "prompt":
            op += "-" + (re.sub(r"[^A-Za-z0-9_.@-]+", "-", self.span).strip("-") or "span")
        where = f"@{self.lo}-{self.hi if self.hi is not None else 'K'}" if self.site in DEPTH_SITES else ""
        return f"{self.site}-{op}{where}" + (f"x{self.strength:g}" if self.strength != 1 else "")

    def words(self, k: int) -> str:
        """What it does, in words (the answer and the manifest)."""
        d = f"at depths {max(self.lo, 2)}\u2013{self.hi or k}"
        s = "" if self.strength == 1 else f" (strength {self.strength:g})"
        return {"norm": f"the fed-back state normalised as norm_output would feed it {d}",
                "rms1": f"the fed-back state scaled to its round's depth-1 RMS {d}",
                "teacher": f"the fed-back state replaced by the teacher-forced state {d}",
                "fc_norm": "each aux chunk normalised as fc_norm would, before fc",
                "zero": f"aux chunk {self.chunk} zeroed before fc",
                "sink": f"the sink keys removed from the attention {d}",
                "own": f"the own drafted slots removed from the attention {d}",
                "recency": f"the own drafted slots' attention matched to recency (own-draft preference removed) {d}",
                "sinkhold": f"the sink held at its depth-1 share {d}",
                "delete": f"{self._span_words()} deleted from the drafter's context (the target reads it)"}[self.op] + s

    def _span_words(self) -> str:
        from .spans import Span

        return Span.parse(self.span).words() if self.span else ""

    def acts_at(self, depth: int, k: int) -> bool:
        return self.site in DEPTH_SITES and max(self.lo, 2) <= depth <= (self.hi or k)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label}


def parse(text: str) -> Intervention:
    """`SITE.OP[@K[-K2]][*S]` (module doc) -> an Intervention; one DriftError line otherwise."""
    m = _SPEC.match(str(text))
    if not m:
        raise DriftError(f"--site {text!r}: malformed; expected {SYNTAX}")
    site, op, lo, hi, s = m.groups()
    chunk = None
    if op.startswith("zero-"):
        op, chunk = "zero", int(op.split("-", 1)[1])
    if site == "aux" and lo is not None:
        raise DriftError(f"--site {text!r}: aux sites act wherever target features enter; drop '@{lo}'")
    return Intervention(site, op, int(lo) if lo is not None else 2, int(hi) if hi is not None else None,
                        float(s) if s is not None else 1.0, chunk)


def from_file(path: str | Path) -> list[Intervention]:
    """A JSON list of objects {site, op, lo?, hi?, strength?, chunk?} (or one object): interventions a gate pins."""
    from ..jsonfile import read_json_object

    p = Path(path)
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError:
        raise DriftError(f"{p}: missing (the interventions file)") from None
    except (OSError, ValueError) as e:
        raise DriftError(f"{p}: not valid JSON ({e})") from None
    items = raw if isinstance(raw, list) else [read_json_object(p, "the interventions file")]
    out = []
    for i, it in enumerate(items):
        if not isinstance(it, dict) or "site" not in it or "op" not in it:
            raise DriftError(f"{p}: item {i}: expected an object with 'site' and 'op' (and lo, hi, strength, chunk, "
                             "span)")
        unknown = set(it) - {"site", "op", "lo", "hi", "strength", "chunk", "span", "label"}
        if unknown:
            raise DriftError(f"{p}: item {i}: unknown fields {sorted(unknown)}")
        try:
            out.append(Intervention(str(it["site"]), str(it["op"]), int(it.get("lo", 2)),
                                    None if it.get("hi") is None else int(it["hi"]),
                                    float(it.get("strength", 1.0)),
                                    None if it.get("chunk") is None else int(it["chunk"]),
                                    None if it.get("span") is None else str(it["span"])))
        except (TypeError, ValueError) as e:
            raise DriftError(f"{p}: item {i}: {e}") from None
    return out


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x.float().pow(2).mean(-1, keepdim=True).sqrt()


class Applied:
    """The state of one intervention on one drafter while a chain runs: the depth of the next query (set by the
    loop's calls: a call with target features refreshes, each fed-back call is one depth deeper), the round's
    depth-1 RMS, the slot of the query (teacher state)."""

    def __init__(self, drafter, iv: Intervention, k: int, features: torch.Tensor | None):
        self.d, self.iv, self.k, self.features = drafter, iv, k, features
        self.depth = 0
        self.rms1: torch.Tensor | None = None

    def forward(self, orig, input_ids, hidden, positions, cache, hidden_is_feature, mask=None):
        iv, s = self.iv, self.iv.strength
        if hidden_is_feature:
            self.depth = 1
            if iv.site == "feedback" and iv.op == "rms1":
                self.rms1 = _rms(self.d.combine(hidden[:, -1:]))
        else:
            self.depth += 1
            if s > 0 and iv.acts_at(self.depth, self.k):
                hidden = self._edit(hidden, positions)
        return orig(input_ids, hidden, positions, cache, hidden_is_feature, mask)

    def _edit(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        iv, s = self.iv, self.iv.strength
        if iv.op == "norm":
            return x + s * (self.d.norm(x) - x)
        if iv.op == "rms1":
            return x * (self.rms1 / _rms(x)).pow(s).to(x.dtype)
        # teacher: fc of the target's features at the query's slot (slot t pairs feature t with token t+1)
        slot = int(positions.reshape(-1)[-1])
        if self.features is None or slot >= self.features.shape[0]:
            raise DriftError("feedback.teacher: no target feature at the query's slot (the continuation is too short)")
        f = self.features[slot:slot + 1][None].to(device=x.device, dtype=self.d.lm_head.weight.dtype)
        return x + s * (self.d.combine(f) - x)


@contextlib.contextmanager
def applied(drafter, iv: Intervention | None, k: int, features: torch.Tensor | None = None, capture=None):
    """`drafter` with `iv` in effect (None or strength 0 at a feedback site: the drafter unchanged, same code path).
    An attention site needs the Capture of the pass (`capture`): its sink rule, and it reads the shifts back."""
    if iv is None or iv.site == "prompt":  # a deletion edits the pass's inputs (engines/patch.py), not the drafter
        yield drafter
        return
    if iv.site == "attention":
        with _attention(drafter, iv, k, capture):
            yield drafter
        return
    hooks = []
    orig = drafter.forward
    if iv.site == "feedback":
        state = Applied(drafter, iv, k, features)
        drafter.forward = lambda *a, **kw: state.forward(orig, *_args(a, kw))
    else:
        s = iv.strength

        def chunk_hook(i):
            def hook(_m, _inp, out):
                if s == 0:
                    return out
                if iv.op == "fc_norm":
                    normed = (out.float() * torch.rsqrt(out.float().pow(2).mean(-1, keepdim=True)
                                                        + drafter.config.rms_norm_eps)).to(out.dtype)
                    return out + s * (normed - out)
                return out * (1 - s) if i == iv.chunk else out
            return hook

        n_aux = len(drafter.hook_aux_pre)
        if iv.op == "zero" and not 0 <= iv.chunk < n_aux:
            raise DriftError(f"--site {iv.label}: the drafter has aux chunks 0..{n_aux - 1}")
        hooks = [hp.register_forward_hook(chunk_hook(i)) for i, hp in enumerate(drafter.hook_aux_pre)]
    try:
        yield drafter
    finally:
        if iv.site == "feedback":
            del drafter.forward  # the class's forward again
        for h in hooks:
            h.remove()


@contextlib.contextmanager
def _attention(drafter, iv: Intervention, k: int, capture):
    from .attention_edits import AttentionEdit

    if capture is None:
        raise DriftError(f"--site {iv.label}: an attention site runs under a capture (its sink rule)")
    edit = AttentionEdit(drafter, iv, k, capture.sink_slots)
    fwd, attend = drafter.forward, edit.attn.attend

    def forward(*a, **kw):
        edit.count(bool(_args(a, kw)[4]))
        return fwd(*a, **kw)

    drafter.forward = forward
    edit.attn.attend = lambda *a, **kw: edit.attend(attend, *a, **kw)
    capture.shift_source = edit
    try:
        yield
    finally:
        del drafter.forward, edit.attn.attend
        capture.shift_source = None


def _args(a: tuple, kw: dict) -> tuple:
    """(input_ids, hidden, positions, cache, hidden_is_feature, mask) from a drafter call's arguments."""
    names = ("input_ids", "hidden", "positions", "cache", "hidden_is_feature", "mask")
    vals = dict(zip(names, a))
    vals.update(kw)
    return tuple(vals.get(n) for n in names[:5]) + (vals.get("mask"),)
