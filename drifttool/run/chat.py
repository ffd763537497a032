"""Chat prompts rendered the way the model's own tokenizer renders them.

A `messages` probe goes through the target's chat template (`chat_template.jinja`, or `chat_template` in
`tokenizer_config.json`) in a sandboxed Jinja environment, as transformers' `apply_chat_template` does, so
the drafter sees the exact special tokens a served model sees. Only a target without a template falls back
to drifttool's plain role format, and the trace says which was used.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DriftError

FALLBACK = "drifttool-fallback: <|role|>\\ncontent\\n per message, then <|assistant|>\\n"


@dataclass
class ChatTemplate:
    source: str  # the file it came from
    text: str
    special: dict[str, str]  # bos_token, eos_token, ... as the template expects them

    @property
    def label(self) -> str:
        return f"tokenizer chat template ({self.source}, sha256 {hashlib.sha256(self.text.encode()).hexdigest()[:12]})"

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(msg):
            raise TemplateError(msg)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
        try:
            return env.from_string(self.text).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                                     **self.special)
        except TemplateError as e:
            raise DriftError(f"{self.source}: chat template failed: {e}") from None


def load_template(folder: str | Path) -> ChatTemplate | None:
    """The chat template of an HF model folder, or None when it has none."""
    p = Path(folder)
    special: dict[str, str] = {}
    cfg_text = None
    cfg = p / "tokenizer_config.json"
    if cfg.is_file():
        try:
            obj = json.loads(cfg.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            obj = {}
        if isinstance(obj, dict):
            for k in ("bos_token", "eos_token", "pad_token", "unk_token"):
                v = obj.get(k)
                v = v.get("content") if isinstance(v, dict) else v
                if isinstance(v, str):
                    special[k] = v
            if isinstance(obj.get("chat_template"), str):
                cfg_text = obj["chat_template"]
    jinja = p / "chat_template.jinja"
    if jinja.is_file():
        return ChatTemplate(jinja.name, jinja.read_text(encoding="utf-8"), special)
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
