"""A repeated key in a settings string is never kept silently as its last value (issue #51, item 2): sink
positions and token ids given twice merge (`pos:1;pos:7` is positions [1, 7]); a repeated first-N, override or
monitor setting, which cannot both hold, is refused in one line; an empty list (`pos:`) is refused, not read as
"no sink"."""

from __future__ import annotations

import pytest

from drifttool.errors import DriftError
from drifttool.monitor.settings import MonitorSettings
from drifttool.run.drafters import DrafterSpec, parse_overrides
from drifttool.trace.sinks import SinkSpec


def test_repeated_sink_positions_and_tokens_merge():
    assert SinkSpec.parse("pos:1;pos:7") == SinkSpec(first_n=0, positions=[1, 7])
    assert SinkSpec.parse("pos:7,1;pos:1") == SinkSpec(first_n=0, positions=[7, 1])  # the order given
    assert SinkSpec.parse("tok:3;first:2;tok:5,3") == SinkSpec(first_n=2, token_ids=[3, 5])


@pytest.mark.parametrize("text,why", [
    ("first:4;first:8", "'first' twice"), ("4;8", "'first' twice"), ("first:4;4", "'first' twice"),
    ("tok:", "'tok:' lists no"), ("pos:", "'pos:' lists no"), ("pos: , ", "'pos:' lists no"),
    ("first:", "first:N"), ("4;", "empty part"),
])
def test_conflicting_or_empty_sink_parts_are_refused(text, why):
    with pytest.raises(DriftError) as e:
        SinkSpec.parse(text)
    assert why in str(e.value) and repr(text) in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_repeated_override_is_refused():
    assert parse_overrides(["fc_norm=1", "norm_output=2"]) == {"fc_norm": "1", "norm_output": "2"}
    with pytest.raises(DriftError, match="'norm_output' twice"):
        parse_overrides(["norm_output=true", "norm_output=false"])
    with pytest.raises(DriftError, match="'fc_norm' twice"):
        parse_overrides(["fc_norm=1", " fc_norm =1"])
    with pytest.raises(DriftError, match="did you mean fc_norm"):  # a key refused as text, before any model
        parse_overrides(["fc_nrom=1"])
    with pytest.raises(DriftError, match="'fc_norm' twice"):
        DrafterSpec.parse("d?fc_norm=1&fc_norm=0")
    # a per-drafter override wins over the common --override of the same key (documented: the drafter's own)
    assert DrafterSpec.parse("d?fc_norm=1", {"fc_norm": "0"}).overrides == {"fc_norm": "1"}


def test_repeated_monitor_setting_is_refused(tmp_path):
    with pytest.raises(DriftError) as e:
        MonitorSettings.parse(f"sample=0.1,dir={tmp_path / 'a'},sample=1")
    assert "'sample' twice" in str(e.value) and "DRIFTTOOL_MONITOR" in str(e.value), str(e.value)
    with pytest.raises(DriftError, match="'dir' twice"):
        MonitorSettings.parse(f"sample=0.1,dir={tmp_path / 'a'},dir={tmp_path / 'b'}")


def test_repeated_vllm_arg_is_refused():
    from drifttool.run.engines.vllm.launch import parse_vllm_args

    assert parse_vllm_args(["max_model_len=512", "enforce_eager=true"]) == {"max_model_len": 512, "enforce_eager": True}
    with pytest.raises(DriftError, match="'max_model_len' twice"):
        parse_vllm_args(["max_model_len=512", "max_model_len=1024"])
