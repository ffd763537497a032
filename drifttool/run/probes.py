"""Probe suites: JSONL, one prompt per line.

Fields: `id` (required), exactly one of `text`, `messages` (chat: [{role, content}], rendered through the
target's own chat template, drifttool's plain role format only when it has none), `token_ids`, or
`source` (text resolved at run time, e.g. {"stdlib_module": "difflib"}: the installed interpreter's
module source, so no third-party text is shipped); optional `cut` (token lengths: one prompt per cut,
keeping the first N tokens; with `"keep": "end"` the first token (BOS) and the last N-1 instead, so a
question at the end survives), `max_new_tokens`, `tags` (list of strings), `group` (the source document:
prompts of one group are one statistical unit, resampled and tested together; default: the line's `id`, so
the cuts of one file share it)."""

from __future__ import annotations

import json
import re
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DriftError
from ..model.chat import check_messages
from .argcheck import is_int

KINDS = ("text", "messages", "token_ids", "source")


@dataclass
class Probe:
    id: str
    text: str | None = None
    token_ids: list[int] | None = None
    max_new_tokens: int | None = None
    tags: list[str] = field(default_factory=list)
    cut: int | None = None
    keep_end: bool = False
    messages: list[dict[str, Any]] | None = None
    group: str = ""  # the source document (statistical unit); parse_line sets it, "" means the probe's id

    def __post_init__(self) -> None:
        self.group = self.group or self.id

    def tokens(self, target) -> list[int]:
        if self.messages is not None:
            ids = target.encode(target.render_chat(self.messages))
        else:
            ids = list(self.token_ids) if self.token_ids is not None else target.encode(self.text)
        if self.cut is not None and len(ids) > self.cut:
            ids = ids[:1] + ids[len(ids) - self.cut + 1 :] if self.keep_end else ids[: self.cut]
        return ids


# the standard library's own test package ships with CPython but is left out of sys.stdlib_module_names
STDLIB_TOPS = frozenset(sys.stdlib_module_names) | {"test"}
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def stdlib_source(name: Any, where: str) -> Path:
    """The source file of a standard-library module given by its dotted name, and nothing else: no paths, no
    third-party or local modules (a probe suite must not pull arbitrary files into a shareable trace)."""
    if not isinstance(name, str) or not _MODULE.fullmatch(name) or name.split(".")[0] not in STDLIB_TOPS:
        raise DriftError(f"{where}: field 'source.stdlib_module' is {name!r}; expected the dotted name of a standard "
                         "library module, e.g. 'difflib' or 'email.parser'")
    base = Path(sysconfig.get_paths()["stdlib"]).resolve()
    rel = name.replace(".", "/")
    for p in (base / f"{rel}.py", base / rel / "__init__.py"):
        if p.is_file() and p.resolve().is_relative_to(base) and "site-packages" not in p.resolve().parts:
            return p
    raise DriftError(f"{where}: stdlib module {name!r} has no Python source under {base}")


def resolve_source(src: Any, where: str) -> str:
    if not isinstance(src, dict):
        raise DriftError(f"{where}: field 'source' must be an object like {{\"stdlib_module\": \"difflib\"}}")
    if "stdlib_module" in src:
        return stdlib_source(src["stdlib_module"], where).read_text(encoding="utf-8", errors="replace")
    if "file" in src:
        p = Path(src["file"])
        if not p.is_file():
            raise DriftError(f"{where}: source file {p} not found")
        return p.read_text(encoding="utf-8", errors="replace")
    raise DriftError(f"{where}: unknown source kind {sorted(src)}; expected stdlib_module or file")


def parse_line(obj: Any, where: str) -> list[Probe]:
    """One JSONL line -> its probe(s) (one per `cut`); every field checked, one error line naming it."""
    if not isinstance(obj, dict):
        raise DriftError(f"{where}: expected a JSON object per line")
    pid = obj.get("id")
    if not _name(pid):
        raise DriftError(f"{where}: field 'id' missing (expected a non-empty string)")
    text, ids, msgs = _content(obj, where)
    mnt = obj.get("max_new_tokens")
    if mnt is not None and (not is_int(mnt) or mnt < 1):
        raise DriftError(f"{where}: field 'max_new_tokens' must be a positive integer")
    tags = obj.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise DriftError(f"{where}: field 'tags' must be a list of strings")
    group = obj.get("group", pid)
    if not _name(group):
        raise DriftError(f"{where}: field 'group' must be a non-empty string (the source document prompts share)")
    keep = obj.get("keep", "start")
    if keep not in ("start", "end"):
        raise DriftError(f"{where}: field 'keep' must be 'start' or 'end'")
    cuts = obj.get("cut")
    if cuts is None:
        return [Probe(str(pid), text, ids, mnt, tags, messages=msgs, group=str(group))]
    cuts = cuts if isinstance(cuts, list) else [cuts]
    if not cuts or not all(is_int(c) and c > 0 for c in cuts):
        raise DriftError(f"{where}: field 'cut' must be a positive integer or a list of them")
    return [Probe(f"{pid}@{c}", text, ids, mnt, tags, c, keep == "end", msgs, str(group)) for c in cuts]


def _name(v: Any) -> bool:
    """An id or group: a non-empty string or an integer (never a bool)."""
    return isinstance(v, (str, int)) and not isinstance(v, bool) and str(v) != ""


def _content(obj: dict, where: str) -> tuple[str | None, list[int] | None, list | None]:
    """(text, token ids, messages): exactly one of the KINDS fields, checked."""
    kinds = [k for k in KINDS if k in obj]
    if len(kinds) != 1:
        raise DriftError(f"{where}: expected exactly one of {', '.join(KINDS)} (got {kinds or 'none'})")
    kind = kinds[0]
    if kind == "text":
        if not isinstance(obj["text"], str) or not obj["text"]:
            raise DriftError(f"{where}: field 'text' must be a non-empty string")
        return obj["text"], None, None
    if kind == "messages":
        return None, None, check_messages(obj["messages"], where)  # rendered per target (its own chat template)
    if kind == "source":
        return resolve_source(obj["source"], where), None, None
    ids = obj["token_ids"]
    if not isinstance(ids, list) or not ids or not all(is_int(i) and i >= 0 for i in ids):
        raise DriftError(f"{where}: field 'token_ids' must be a non-empty list of non-negative integers")
    return None, ids, None


def check_text_length(probe: Probe, target, extra: int) -> None:
    """Refuse, before tokenizing, a text that cannot fit: every token covers at most the target vocabulary's
    longest token string, so a text longer than that many characters per position (x2 for normalisers) needs
    more positions than the target has. Probes with `cut` keep only part of their text and are not refused;
    `messages` probes are measured as the target renders them (its chat template)."""
    if probe.cut is not None:
        return
    text = target.render_chat(probe.messages) if probe.messages is not None else probe.text
    if text is None:
        return
    limit = 2 * target.max_token_chars * max(target.max_positions - extra, 0)
    if len(text) > limit:
        raise DriftError(f"text of {len(text)} characters needs more than the target's max_position_embeddings "
                         f"{target.max_positions} (at most {target.max_token_chars} characters per token); "
                         "shorten it or give it a 'cut'")


def load_suite(path) -> list[Probe]:
    p = Path(path)
    if not p.is_file():
        from ..suggest import path_hint

        raise DriftError(f"{p}: probe suite not found (expected a JSONL file){path_hint(p)}")
    probes: list[Probe] = []
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise DriftError(f"{p}: not UTF-8 text (expected JSONL)") from None
    for i, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("//"):
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as e:  # JSONDecodeError, int digit limit, nesting
            raise DriftError(f"{p}:{i}: not valid JSON ({getattr(e, 'msg', e)})") from None
        probes.extend(parse_line(obj, f"{p}:{i}"))
    if not probes:
        raise DriftError(f"{p}: probe suite is empty (expected at least one JSONL line with an id)")
    seen = set()
    for pr in probes:
        if pr.id in seen:
            raise DriftError(f"{p}: duplicate probe id {pr.id!r}")
        seen.add(pr.id)
    return probes


# The EAGLE 3.1 paper's template perturbation: each chat prompt rendered four ways. SmolLM2's tokenizer names
# <|im_start|> as its bos_token and its chat template opens with it, so "BoS" is the bos_token id at the start of the
# sequence: with the template, dropping it removes the first turn's opening delimiter; without the template the
# message text is encoded plainly and the bos id is (or is not) put in front of it.
TEMPLATE_VARIANTS = ("template+bos", "template-bos", "plain+bos", "plain-bos")


def template_variants(suite: list[Probe], target) -> list[Probe]:
    """Every chat probe of `suite` as four token-id probes (TEMPLATE_VARIANTS, in the tags and ids `ID@VARIANT`), one
    group per original probe; probes without messages are refused in one line (there is no template to take away)."""
    bos = target.tokenizer.token_to_id(str(getattr(target.chat_template, "special", {}).get("bos_token", "")
                                           or "")) if target.tokenizer is not None else None
    if bos is None or target.chat_template is None:
        raise DriftError(f"template perturbation: target {target.name} has no chat template with a bos_token to take "
                         "away (tokenizer_config.json: chat_template and bos_token)")
    out = []
    for p in suite:
        if p.messages is None:
            raise DriftError(f"template perturbation: probe {p.id!r} has no chat messages (it has no template form)")
        full = target.encode(target.render_chat(p.messages))
        plain = target.encode("\n\n".join(str(m.get("content", "")) for m in p.messages))
        forms = {"template+bos": full if full[:1] == [bos] else [bos, *full],
                 "template-bos": [t for i, t in enumerate(full) if not (i == 0 and t == bos)],
                 "plain+bos": [bos, *plain], "plain-bos": plain}
        for v in TEMPLATE_VARIANTS:
            out.append(Probe(id=f"{p.id}@{v}", token_ids=forms[v], max_new_tokens=p.max_new_tokens,
                             tags=[*p.tags, v], group=p.group))
    return out
