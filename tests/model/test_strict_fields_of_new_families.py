"""The fields of the newer draft families (aux conventions, MLA, sliding windows) and of chat probes: the strict
config reading covers them, the resume identity covers the new capture settings, chat probes are length-checked,
and the newly allowed values stay allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from drifttool.errors import DriftError
from drifttool.model.ckpt_config import normalise_config
from drifttool.run.probes import Probe, check_text_length, parse_line
from drifttool.trace.identity import flat_identity

BASE = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 32, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 64, "vocab_size": 100, "draft_vocab_size": 50,
        "eagle_aux_hidden_state_layer_ids": [1, 2, 3]}
MLA = {"model_type": "deepseek_v3", "q_lora_rank": None, "kv_lora_rank": 12, "qk_nope_head_dim": 8,
       "qk_rope_head_dim": 4, "v_head_dim": 6}


def cfg(**kw):
    return normalise_config({**BASE, **kw}, Path("/d"), None)


def refused(*fragments, **kw) -> None:
    with pytest.raises(DriftError) as e:
        cfg(**kw)
    msg = str(e.value)
    assert "\n" not in msg
    for f in fragments:
        assert f in msg, (f, msg)


@pytest.mark.parametrize("kw,field", [
    ({"use_aux_hidden_state": "false"}, "use_aux_hidden_state"),
    ({"eagle_config": {"use_aux_hidden_state": 0}}, "use_aux_hidden_state"),
    ({"attention_bias": "false"}, "attention_bias"),
    ({"use_aux_norm": "yes"}, "use_aux_norm"),
    ({"norm_before_residual": 1}, "norm_before_residual"),
    ({**MLA, "kv_lora_rank": "12"}, "kv_lora_rank"),
    ({**MLA, "qk_rope_head_dim": 0}, "qk_rope_head_dim"),
    ({**MLA, "v_head_dim": 6.5}, "v_head_dim"),
    ({"layer_types": ["sliding_attention"], "sliding_window": "8"}, "sliding_window"),
    ({"rope_theta": "10000"}, "rope_theta"),
])
def test_new_fields_are_read_strictly(kw, field):
    refused(field, **kw)


def test_new_fields_still_accepted():
    c = cfg(**MLA)
    assert c.mla["q_lora_rank"] is None and c.head_dim == 12 and c.num_key_value_heads == 4
    assert cfg(layer_types=["sliding_attention"], sliding_window=8).sliding_window == 8
    assert cfg(attention_bias=False, use_aux_norm=True).fc_norm is True
    no_aux = normalise_config({**BASE, "eagle_config": {"use_aux_hidden_state": False}, "target_hidden_size": 32},
                              Path("/d"), None)
    assert no_aux.aux_layer_ids == [] and not no_aux.use_aux_hidden_state


def test_identity_covers_new_capture_settings():
    m = {"drifttool_version": "x", "drafters": [], "target": {"config_hash": "h", "weights": "w", "provenance": {"f": 1}},
         "capture": {"depth": 3, "draft_sampling": "greedy", "chat_format": "template:abc"}}
    ident = flat_identity(m, [])
    assert ident["capture.draft_sampling"] == "greedy" and ident["capture.chat_format"] == "template:abc"
    assert "target.provenance" in ident


class _Tgt:
    max_token_chars, max_positions = 4, 10

    def render_chat(self, messages):
        return "".join(m["content"] for m in messages)


def test_messages_probe_parsed_and_length_checked():
    [p] = parse_line({"id": "c", "messages": [{"role": "user", "content": "x" * 200}]}, "p.jsonl:1")
    assert p.messages and p.text is None
    with pytest.raises(DriftError, match="200 characters"):
        check_text_length(p, _Tgt(), 2)
    check_text_length(Probe("s", messages=[{"role": "user", "content": "hi"}]), _Tgt(), 2)
