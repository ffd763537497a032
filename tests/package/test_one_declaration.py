"""A new drafter flag is one row of model/flags.py: added here at run time (no other file touched), it is read,
overridden, saved and reloaded in every layout that can express it, varied by conform and reported by conformance.
Before the table, a flag the SpecForge / SafeAILab writers did not name was dropped on save with exit 0."""

from __future__ import annotations

import json

import pytest

import drifttool
from drifttool.model import flags as flag_table
from drifttool.model.conformance import static_findings
from drifttool.model.layouts import savable
from drifttool.model.tiny import tiny_drafter, tiny_target
from drifttool.run.conform import _describe
from drifttool.run.follow import varied

DUMMY = flag_table.Flag("dummy_gate", "a flag no engine has (test only)", applied="dummy gate applied",
                        ignored="dummy gate ignored")


@pytest.fixture
def dummy_flag(monkeypatch):
    monkeypatch.setattr(flag_table, "FLAGS", (*flag_table.FLAGS, DUMMY))
    return DUMMY.name


@pytest.fixture(scope="module")
def target():
    return tiny_target(vocab=64, hidden=32, layers=6, seed=3)


@pytest.mark.parametrize("layout", savable())
@pytest.mark.parametrize("value", [True, False])
def test_a_flag_declared_once_round_trips_in_every_layout(layout, value, dummy_flag, target, tmp_path):
    d = tiny_drafter(target)
    d.config.extra_flags[dummy_flag] = value
    out = drifttool.save_drafter(d, tmp_path / layout, layout=layout)
    conf = json.loads((out / "config.json").read_text())
    assert conf[dummy_flag] is value, f"{layout} did not write {dummy_flag}"
    again = drifttool.load_drafter(out, target=target)
    assert again.config.flag(dummy_flag) is value
    assert again.config.flags()[dummy_flag] is value
    info, _ = static_findings(out)
    assert info["flags"][dummy_flag] is value


def test_a_declared_flag_is_overridable_varied_and_named(dummy_flag, target, tmp_path):
    out = drifttool.save_drafter(tiny_drafter(target), tmp_path / "d")
    d = drifttool.load_drafter(out, target=target, overrides={dummy_flag: "true"})
    assert d.config.flag(dummy_flag) is True
    assert d.config.overrides[dummy_flag] == {"checkpoint": False, "override": True}
    assert dummy_flag in varied()
    assert _describe({dummy_flag: False}, {dummy_flag: True}) == "dummy gate applied"


def test_exclusive_flags_are_one_rule(dummy_flag, monkeypatch, target, tmp_path):
    excl = flag_table.Flag("dummy_gate", "x", excludes=("norm_output",))
    monkeypatch.setattr(flag_table, "FLAGS", (*flag_table.FLAGS[:-1], excl))
    assert flag_table.conflicts({"dummy_gate": True, "norm_output": True}) == [("dummy_gate", "norm_output")]
    out = drifttool.save_drafter(tiny_drafter(target, norm_output=True), tmp_path / "d")
    with pytest.raises(drifttool.DriftError, match="dummy_gate and norm_output are mutually exclusive"):
        drifttool.load_drafter(out, target=target, overrides={dummy_flag: "true"})


def test_safeailab_refuses_every_eagle31_flag_it_cannot_write(target, tmp_path):
    for name in [f.name for f in flag_table.FLAGS if f.eagle31]:
        with pytest.raises(drifttool.DriftError, match=f"cannot express {name}"):
            drifttool.save_drafter(tiny_drafter(target, **{name: True}), tmp_path / name, layout="safeailab")


def test_the_four_eagle_flags_keep_their_hash(target):
    """extra_flags is left out of the config hash when empty: drafters hash as before the table."""
    d = tiny_drafter(target)
    assert "extra_flags" not in d.config.weights_hash_fields()
