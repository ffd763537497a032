"""Values that used to pass silently or end in a traceback (#66): each is one DriftError line naming the option.
A string seed or one beyond 64 bits (a raw torch error at speculate), stop_ids as a string ('12' read as tokens 1
and 2), the strings 'no' / 'false' for the output switches (truthy: compact='no' compacted, resume='false'
resumed), non-ASCII digits in a sink rule or aux ids (int() reads '٣' as 3), a 20-digit first:N (a traceback when
the mask was built), a plan effect no feasible study detects (a traceback on int(inf)), NaN or negative control
strengths and out-of-vocabulary sink tokens (silent NaN weights)."""

from __future__ import annotations

import pytest

from drifttool.errors import DriftError
from drifttool.model.ckpt_config import parse_override
from drifttool.model.controls import plant
from drifttool.model.tiny import tiny_drafter, tiny_target
from drifttool.run.loop import Decoding
from drifttool.run.runner import Output
from drifttool.trace.sinks import SinkSpec


@pytest.mark.parametrize("kw,msg", [({"seed": 2**70}, "seed: "), ({"seed": "abc"}, "seed: 'abc'"),
                                    ({"stop_ids": "12"}, "stop_ids: '12'"), ({"stop_ids": (1, -2)}, "stop_ids")])
def test_decoding_refuses(kw, msg):
    with pytest.raises(DriftError, match=msg):
        Decoding(**kw)
    assert Decoding(stop_ids=[2, 3]).stop_ids == (2, 3) and Decoding(seed=2**64 - 1).seed == 2**64 - 1


@pytest.mark.parametrize("name,value", [("compact", "no"), ("resume", "false"), ("overwrite", 1), ("progress", None)])
def test_output_switches_are_bools(name, value):
    with pytest.raises(DriftError, match=f"{name}: "):
        Output("x.drift", **{name: value})


@pytest.mark.parametrize("rule", ["first:99999999999999999999", "pos:\u0663", "tok:1,\u0662", "first:-1"])
def test_sink_rules_take_ascii_integers(rule):
    with pytest.raises(DriftError, match="--sink"):
        SinkSpec.parse(rule)
    assert SinkSpec.parse("first:4;pos:7").positions == [7]


def test_aux_ids_take_ascii_digits():
    with pytest.raises(DriftError, match="aux_ids"):
        parse_override("aux_ids", "\u0661,2,3")
    assert parse_override("aux_ids", "1, 2,3") == [1, 2, 3]


def test_plan_effect_too_small_for_any_study():
    from drifttool.analysis.stats import groups_needed

    assert groups_needed(0.12, 1e-300) is None and groups_needed(0.12, float("inf")) is None
    assert groups_needed(0.12, 0.1) >= 6


@pytest.mark.parametrize("kw,msg", [({"recency": float("nan")}, "recency nan"), ({"sink": -1.0, "sink_token": 2},
                                                                                  "sink -1.0"),
                                    ({"drift": float("inf")}, "drift inf"),
                                    ({"sink": 4.0, "sink_token": 999}, "sink_token 999"),
                                    ({"sink_fade": 2.0}, "sink_fade fades a planted sink")])
def test_controls_refuse_bad_strengths(kw, msg):
    t = tiny_target(vocab=64, hidden=64, layers=4, heads=4, kv_heads=2)
    with pytest.raises(ValueError, match=msg):
        plant(tiny_drafter(t, seed=1), **kw)
