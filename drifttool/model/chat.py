"""Chat prompts rendered the way the model's own tokenizer renders them.

A `messages` probe goes through the target's chat template (`chat_template.jinja`, or `chat_template` in
`tokenizer_config.json`) in a sandboxed Jinja environment, as transformers' `apply_chat_template` does, so
the drafter sees the exact special tokens a served model sees. Only a target without a template falls back
to drifttool's plain role format, and the trace says which was used.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DriftError

FALLBACK = "drifttool-fallback: <|role|>\\ncontent\\n per message, then <|assistant|>\\n"
MAX_TEMPLATE_BYTES = 1 << 20  # a chat template is a few KB; a larger file is not one
MAX_RENDER_CHARS = 50_000_000  # far beyond any context a target has (the prompt is then checked against it)
RENDER_SECONDS = 10.0  # rendering a real template takes milliseconds


class _Budget:
    """A trace function that stops a template's rendering once it runs past its time budget (Jinja compiles
    templates to Python, so a nested loop is Python frames this sees)."""

    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds

    def __call__(self, frame, event, arg):
        if time.monotonic() > self.deadline:
            raise TimeoutError("rendering took longer than its time budget")
        return self


def _sandbox():
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Bounded(ImmutableSandboxedEnvironment):
        """No operator may build a string or list beyond MAX_RENDER_CHARS ('a' * 10**12 would exhaust memory)."""

        intercepted_binops = frozenset(["*", "**", "+"])

        def call_binop(self, context, operator, left, right):
            if operator == "*" and any(isinstance(x, (str, list, tuple)) for x in (left, right)):
                seq, n = (left, right) if isinstance(left, (str, list, tuple)) else (right, left)
                if isinstance(n, int) and len(seq) * max(n, 0) > MAX_RENDER_CHARS:
                    raise OverflowError("a repeated string or list beyond the render size limit")
            if operator == "**" and isinstance(right, (int, float)) and abs(right) > 64:
                raise OverflowError("an exponent beyond the sandbox's limit")
            return super().call_binop(context, operator, left, right)

    return Bounded(trim_blocks=True, lstrip_blocks=True)


@dataclass
class ChatTemplate:
    source: str  # the file it came from
    text: str
    special: dict[str, str]  # bos_token, eos_token, ... as the template expects them

    @property
    def label(self) -> str:
        return f"tokenizer chat template ({self.source}, sha256 {hashlib.sha256(self.text.encode()).hexdigest()[:12]})"

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        """The template applied to `messages` in a bounded sandbox: no file access ({% include %} has no
        loader), RENDER_SECONDS of time, MAX_RENDER_CHARS of output; any failure is one DriftError line."""
        from jinja2 import TemplateError

        def raise_exception(msg):
            raise TemplateError(msg)

        env = _sandbox()
        env.globals["raise_exception"] = raise_exception
        env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
        old = sys.gettrace()
        try:
            tpl = env.from_string(self.text)
            sys.settrace(_Budget(RENDER_SECONDS))
            try:
                out = tpl.render(messages=messages, add_generation_prompt=add_generation_prompt, **self.special)
            finally:
                sys.settrace(old)
        except TemplateError as e:
            raise DriftError(f"{self.source}: chat template failed: {e}") from None
        except (TimeoutError, OverflowError, MemoryError) as e:
            raise DriftError(f"{self.source}: chat template refused: {e} (limits: {RENDER_SECONDS:.0f} s, "
                             f"{MAX_RENDER_CHARS:,} characters)") from None
        except RecursionError:
            raise DriftError(f"{self.source}: chat template failed: recursion too deep (a recursive macro?)") from None
        except Exception as e:  # noqa: BLE001 - e.g. {{ 1/0 }}: the template's own error, as one line
            raise DriftError(f"{self.source}: chat template failed: {type(e).__name__}: {e}") from None
        if len(out) > MAX_RENDER_CHARS:
            raise DriftError(f"{self.source}: chat template rendered {len(out):,} characters; limit "
                             f"{MAX_RENDER_CHARS:,}")
        if not out.strip():
            raise DriftError(f"{self.source}: chat template rendered nothing for these messages")
        dropped = [i for i, m in enumerate(messages) if m.get("content", "").strip()
                   and m["content"].strip() not in out]
        if dropped:  # an error, not a warning: the capture would measure a prompt without them, with exit 0
            raise DriftError(f"{self.source}: the chat template's output lacks the content of message(s) {dropped}: "
                             "the drafter would be measured on a prompt without them; fix the template or give the "
                             "probe as text")
        return out


def _inside(p: Path, name: str) -> Path | None:
    """p / name when it is a regular file inside p (a link may point elsewhere inside, never out), else None."""
    f = p / name
    if not f.is_file():
        return None
    if not f.resolve().is_relative_to(p.resolve()):
        raise DriftError(f"{f}: links outside the model folder {p}; a target's files are read only from inside it")
    if f.stat().st_size > MAX_TEMPLATE_BYTES:
        raise DriftError(f"{f}: {f.stat().st_size:,} bytes; a chat template or tokenizer config over "
                         f"{MAX_TEMPLATE_BYTES:,} bytes is refused")
    return f


def _read(f: Path) -> str:
    try:
        return f.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DriftError(f"{f}: not UTF-8 text (expected a Jinja chat template)") from None


def _named(value: Any, where: Path) -> str | None:
    """HF's chat_template: a string, or a list of {name, template} (transformers uses the one named 'default')."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        if isinstance(named.get("default"), str):
            return named["default"]
        raise DriftError(f"{where}: field 'chat_template' is a list of named templates without one named "
                         f"'default' (names: {sorted(str(k) for k in named)})")
    return None


def load_template(folder: str | Path) -> ChatTemplate | None:
    """The chat template of an HF model folder, or None when it has none. Files are read only from inside the
    folder (a symlink out of it is refused) and only up to MAX_TEMPLATE_BYTES."""
    p = Path(folder)
    special: dict[str, str] = {}
    cfg_text = None
    cfg = _inside(p, "tokenizer_config.json")
    if cfg is not None:
        try:
            obj = json.loads(_read(cfg))
        except ValueError:
            obj = {}
        if isinstance(obj, dict):
            for k in ("bos_token", "eos_token", "pad_token", "unk_token"):
                v = obj.get(k)
                v = v.get("content") if isinstance(v, dict) else v
                if isinstance(v, str):
                    special[k] = v
            cfg_text = _named(obj.get("chat_template"), cfg)
    jinja = _inside(p, "chat_template.jinja")
    if jinja is not None:
        return ChatTemplate(jinja.name, _read(jinja), special)
    if cfg_text:
        return ChatTemplate("tokenizer_config.json", cfg_text, special)
    return None


def fallback_render(messages: list[dict[str, Any]]) -> str:
    return "".join(f"<|{m.get('role', 'user')}|>\n{m['content']}\n" for m in messages) + "<|assistant|>\n"


def check_messages(msgs: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(msgs, list) or not msgs or not all(
        isinstance(m, dict) and isinstance(m.get("content"), str) and isinstance(m.get("role", "user"), str)
        for m in msgs
    ):
        raise DriftError(f"{where}: field 'messages' must be a non-empty list of {{role, content}} objects "
                         "with string values")
    return msgs


def template_token_ids(tokenizer, template: ChatTemplate | None) -> list[int]:
    """Ids of the tokenizer's added tokens that the chat template's text writes (e.g. <|im_start|>, <|im_end|>): the
    delimiters every rendered chat prompt holds, measured as the template mass. Empty without either."""
    if tokenizer is None or template is None:
        return []
    backend = getattr(tokenizer, "backend", tokenizer)
    getter = getattr(backend, "get_added_tokens_decoder", None)
    if getter is None:
        return []
    return sorted(int(i) for i, tok in getter().items() if str(getattr(tok, "content", tok)) in template.text)
