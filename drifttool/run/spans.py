"""Prompt spans for `drifttool patch`'s `prompt.delete` site: which prompt tokens a span names, per prompt, and the
spans a `--scan` tries.

A span is `KIND:ARG`, resolved on each prompt's token ids (so one span means the same thing on every prompt, and
a prompt without it deletes nothing):

- `tokens:A-B`: prompt tokens A..B (0-based, inclusive); `tail:A-B`: the A-th to B-th token counted from the
  prompt's end (1 = the last prompt token).
- `template:PIECE`: every occurrence of one chat-template token (e.g. `template:<|im_end|>`).
- `turn:ROLE`: every turn with that role, from its opening template token up to the next one (ChatML's
  `<|im_start|>system ... <|im_end|>\\n`). The opening token is the template token the prompt uses most often (the
  first on a tie); the role is the text between it and the first newline. `turn:assistant` on a prompt that ends
  with the generation header is that header.
- `sentence:ROLE-I`: the I-th sentence (1-based) of the first turn with that role, its content split after each token
  whose text ends with '.', '!' or '?' or holds a newline.
- `text:STRING`: every token overlapping an occurrence of STRING in the prompt's text.

`scan_spans` lists what `--scan` tries on a suite: the first token, each template token, each turn role, each
sentence of the system turn (up to 6) and fixed windows counted from the prompt's end."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from ..errors import DriftError

KINDS = ("tokens", "tail", "template", "turn", "sentence", "text")
SYNTAX = ("KIND:ARG with KIND one of tokens:A-B, tail:A-B, template:PIECE, turn:ROLE, sentence:ROLE-I, "
          "text:STRING, e.g. turn:system, tail:1-8, template:<|im_end|>")
_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")
_SENTENCE = re.compile(r"^(.+)-(\d+)$")
_END = (".", "!", "?")


@dataclass(frozen=True)
class Span:
    kind: str
    arg: str

    @classmethod
    def parse(cls, text: str) -> Span:
        """`KIND:ARG` -> a Span; one DriftError line otherwise (checked before anything loads)."""
        kind, sep, arg = str(text).partition(":")
        kind = kind.strip()
        if not sep or kind not in KINDS or not arg:
            raise DriftError(f"--span {text!r}: expected {SYNTAX}")
        if kind in ("tokens", "tail"):
            m = _RANGE.match(arg)
            lo, hi = (int(m.group(1)), int(m.group(2))) if m else (-1, -1)
            if not m or hi < lo or (kind == "tail" and lo < 1):
                raise DriftError(f"--span {text!r}: expected {kind}:A-B with {'1' if kind == 'tail' else '0'} <= A <= B")
            arg = f"{lo}-{hi}"
        if kind == "sentence" and not (_SENTENCE.match(arg) and int(_SENTENCE.match(arg).group(2)) >= 1):
            raise DriftError(f"--span {text!r}: expected sentence:ROLE-I (I >= 1), e.g. sentence:system-1")
        return cls(kind, arg if kind == "text" else arg.strip())

    @property
    def spec(self) -> str:
        return f"{self.kind}:{self.arg}"

    def words(self) -> str:
        """What the span is, in words (the answer names it so)."""
        if self.kind == "tokens":
            return f"prompt tokens {self.arg}"
        if self.kind == "tail":
            lo, hi = self.arg.split("-")
            return f"the last prompt tokens {lo}-{hi} (counted from the end)"
        if self.kind == "template":
            return f"every {self.arg} template token"
        if self.kind == "turn":
            return f"the {self.arg} turn"
        if self.kind == "sentence":
            role, i = _SENTENCE.match(self.arg).groups()
            return f"sentence {i} of the {role} turn"
        return f"every occurrence of {self.arg!r}"

    def positions(self, view: PromptView) -> list[int]:
        """The prompt positions this span names on one prompt (sorted; empty where the prompt lacks it)."""
        n = len(view.ids)
        if self.kind in ("tokens", "tail"):
            lo, hi = map(int, self.arg.split("-"))
            idx = range(lo, min(hi, n - 1) + 1) if self.kind == "tokens" else range(max(n - hi, 0), n - lo + 1)
            return [i for i in idx if 0 <= i < n]
        if self.kind == "template":
            return [i for i, p in enumerate(view.pieces) if i in view.template_at and p == self.arg]
        if self.kind == "turn":
            return [i for role, a, _c, b in view.turns() if role == self.arg for i in range(a, b)]
        if self.kind == "sentence":
            role, i = _SENTENCE.match(self.arg).groups()
            sents = view.sentences(role)
            return list(sents[int(i) - 1]) if int(i) <= len(sents) else []
        return view.text_positions(self.arg)


class PromptView:
    """One prompt's tokens as text: each token's piece (decoded alone), where the template tokens are, its turns."""

    def __init__(self, ids: list[int], tokenizer, template_ids: tuple[int, ...]):
        self.ids = [int(i) for i in ids]
        tpl = set(int(t) for t in template_ids)
        self.template_at = {i for i, t in enumerate(self.ids) if t in tpl}
        if tokenizer is None:
            self.pieces = [str(t) for t in self.ids]
        else:
            self.pieces = [tokenizer.decode([t], skip_special_tokens=False) for t in self.ids]

    def turns(self) -> list[tuple[str, int, int, int]]:
        """(role, start, content start, end) per turn: from each opening template token to the next one."""
        if not self.template_at:
            return []
        counts = Counter(self.ids[i] for i in sorted(self.template_at))
        top = max(counts.values())
        opener = next(self.ids[i] for i in sorted(self.template_at) if counts[self.ids[i]] == top)
        starts = [i for i in sorted(self.template_at) if self.ids[i] == opener]
        out = []
        for a, b in zip(starts, [*starts[1:], len(self.ids)]):
            j, role = a + 1, ""
            while j < b and "\n" not in self.pieces[j] and j not in self.template_at:
                role += self.pieces[j]
                j += 1
            out.append((role.strip(), a, min(j + 1, b), b))
        return out

    def sentences(self, role: str) -> list[range]:
        """The first `role` turn's content split into sentences (module doc); template tokens are not content."""
        turn = next((t for t in self.turns() if t[0] == role), None)
        if turn is None:
            return []
        _, _, c, b = turn
        content = [i for i in range(c, b) if i not in self.template_at]
        while content and not self.pieces[content[-1]].strip():
            content.pop()  # the newline after the turn's closing token
        out, start = [], None
        for i in content:
            start = i if start is None else start
            p = self.pieces[i]
            if p.rstrip().endswith(_END) or "\n" in p:
                out.append(range(start, i + 1))
                start = None
        if start is not None:
            out.append(range(start, content[-1] + 1))
        return [r for r in out if any(self.pieces[i].strip() for i in r)]

    def text_positions(self, needle: str) -> list[int]:
        """Every token overlapping an occurrence of `needle` in the concatenated pieces."""
        starts, pos = [], 0
        for p in self.pieces:
            starts.append(pos)
            pos += len(p)
        text = "".join(self.pieces)
        hit = set()
        k = text.find(needle)
        while k >= 0 and needle:
            end = k + len(needle)
            hit.update(i for i, s in enumerate(starts) if s < end and s + len(self.pieces[i]) > k)
            k = text.find(needle, k + 1)
        return sorted(hit)


def scan_spans(views: list[PromptView], window: int = 8, windows: int = 6, sentences: int = 6) -> list[Span]:
    """The spans `--scan` tries on a suite (module doc), each present in at least one prompt."""
    out = [Span("tokens", "0-0")]
    seen = []
    for v in views:
        for i in sorted(v.template_at):
            if v.pieces[i] not in seen:
                seen.append(v.pieces[i])
    out += [Span("template", p) for p in seen]
    roles = []
    for v in views:
        roles += [r for r, *_ in v.turns() if r and r not in roles]
    out += [Span("turn", r) for r in roles]
    n_sys = max((len(v.sentences("system")) for v in views), default=0)
    out += [Span("sentence", f"system-{i}") for i in range(1, min(n_sys, sentences) + 1)]
    shortest = min((len(v.ids) for v in views), default=0)
    n_win = min(windows, max(shortest - 1, 0) // window)
    out += [Span("tail", f"{w * window + 1}-{(w + 1) * window}") for w in range(n_win)]
    return [s for s in out if any(s.positions(v) for v in views)]
