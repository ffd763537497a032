"""Chat templates are confined to the model folder and bounded: a template symlinked out of the folder is refused
(its text would become the prompt and leak into the trace's tokens), rendering has a time and size budget, every
template failure is one DriftError line, HF's named-template list form is read, and an empty render is refused."""

from __future__ import annotations

import json
import os
import time

import pytest

from drifttool.errors import DriftError
from drifttool.model import chat
from drifttool.model.chat import ChatTemplate, load_template

MSG = [{"role": "user", "content": "hello there"}]


@pytest.mark.parametrize("text,why", [
    ("{{ 1/0 }}", "ZeroDivisionError"),
    ("{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}", "recursion"),
    ('{% include "other.jinja" %}', "loader"),
    ("{{ 'a' * 10**12 }}", "size limit"),
    ("{{ 2 ** 100000 }}", "exponent"),
    ("", "rendered nothing"),
    ("{{ raise_exception('no system role') }}", "no system role"),
])
def test_template_failures_are_one_error_line(text, why):
    with pytest.raises(DriftError, match=why) as e:
        ChatTemplate("t.jinja", text, {}).render(MSG)
    assert "\n" not in str(e.value)


def test_rendering_has_a_time_budget(monkeypatch):
    monkeypatch.setattr(chat, "RENDER_SECONDS", 0.5)
    slow = "{% for i in range(100000) %}{% for j in range(100000) %}{{ i }}{% endfor %}{% endfor %}"
    t0 = time.monotonic()
    with pytest.raises(DriftError, match="time budget"):
        ChatTemplate("t.jinja", slow, {}).render(MSG)
    assert time.monotonic() - t0 < 5


def test_a_template_that_drops_the_messages_is_one_clear_error():
    """It was a Python UserWarning with a source path, and the capture went on without the messages."""
    with pytest.raises(DriftError) as e:
        ChatTemplate("t.jinja", "<|im_start|>assistant\n", {}).render(MSG)
    assert str(e.value).startswith("t.jinja: the chat template's output lacks the content") and "\n" not in str(e.value)


def test_template_symlinked_out_of_the_folder_is_refused(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("API_KEY=hunter2")
    model = tmp_path / "model"
    model.mkdir()
    os.symlink(secret, model / "chat_template.jinja")
    with pytest.raises(DriftError, match="outside the model folder"):
        load_template(model)
    (model / "chat_template.jinja").unlink()
    os.symlink(secret, model / "tokenizer_config.json")
    with pytest.raises(DriftError, match="outside the model folder"):
        load_template(model)


def test_non_utf8_and_oversized_templates_are_refused(tmp_path, monkeypatch):
    (tmp_path / "chat_template.jinja").write_bytes(b"\xff\xfe{{ messages }}")
    with pytest.raises(DriftError, match="not UTF-8"):
        load_template(tmp_path)
    monkeypatch.setattr(chat, "MAX_TEMPLATE_BYTES", 8)
    (tmp_path / "chat_template.jinja").write_text("{{ messages }} and more")
    with pytest.raises(DriftError, match="refused"):
        load_template(tmp_path)


def test_named_template_list_uses_default(tmp_path):
    cfg = {"chat_template": [{"name": "tool_use", "template": "TOOLS"},
                             {"name": "default", "template": "{% for m in messages %}[{{ m.content }}]{% endfor %}"}]}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    t = load_template(tmp_path)
    assert t is not None and t.render(MSG) == "[hello there]"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": [{"name": "x", "template": "y"}]}))
    with pytest.raises(DriftError, match="default"):
        load_template(tmp_path)
