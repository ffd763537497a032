"""Engines are declared once (run/engines): the CLI, the API and the runner read the declaration. An option an
engine does not declare is one line naming the engines that take it, before any model is loaded; a new engine is
one entry that the CLI and `drifttool.capture_run` accept by name."""

from __future__ import annotations

import pytest

import drifttool
from drifttool.cli import main
from drifttool.errors import DriftError
from drifttool.run import engines
from drifttool.run.engines import ENGINES, OPTION_FLAGS, Engine
from tests.support.capture import build_models, prompt, write_probes


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("engines")
    paths = build_models(root)
    suite = write_probes(root / "p.jsonl", [{"id": "a", "token_ids": prompt(1, 12), "max_new_tokens": 6}])
    return root, paths, suite


def test_every_declared_option_has_a_flag_and_every_flag_an_engine():
    for e in ENGINES.values():
        assert e.options <= set(OPTION_FLAGS), e.name
        assert {o for o, _ in e.refusals} <= set(OPTION_FLAGS) - e.options, e.name
    assert set(OPTION_FLAGS) == set().union(*(e.options for e in ENGINES.values()))


@pytest.mark.parametrize("option,value,line", [
    ("tree", "dynamic:top_k=2,depth=2,total=4", "--tree: only with --engine hf (vLLM's tree mode is not replayed)"),
    ("device_map", "auto", "--device-map: only with --engine hf (vLLM places the target itself; see --vllm-arg)"),
    ("compact", False, "--no-compact: only with --engine hf"),
])
def test_an_option_the_engine_does_not_take_is_refused_before_loading(tiny, option, value, line):
    root, paths, suite = tiny
    with pytest.raises(DriftError) as e:  # vLLM is not imported: the declaration answers
        drifttool.capture_run(paths["target"], [paths["eagle3"]], suite, root / "x.drift", engine="vllm",
                              **{option: value})
    assert str(e.value) == line
    assert not (root / "x.drift").exists()
    with pytest.raises(DriftError, match=r"^--vllm-arg: only with --engine vllm$"):
        ENGINES["hf"].check({"engine_args": ["max_model_len=64"]})
    with pytest.raises(DriftError, match=r"^--engine 'sglang': expected hf or vllm$"):
        engines.engine("sglang")


def test_capture_run_is_the_cli_capture(tiny):
    root, paths, suite = tiny
    t = drifttool.capture_run(paths["target"], [f"e3={paths['eagle3']}"], suite, root / "api.drift", depth=3,
                              compact=False)
    assert t.drafters == ["e3"] and t.manifest["status"] == "complete" and len(t.manifest["shards"]) == 1
    assert main(["capture", "--target", str(paths["target"]), "--drafter", f"e3={paths['eagle3']}", "--probes",
                 str(suite), "--out", str(root / "cli.drift"), "--depth", "3", "--no-compact", "--quiet"]) == 0
    a, b = drifttool.load(root / "cli.drift").depths, t.depths
    assert a.drop(columns=[c for c in a if c.endswith("_s")]).equals(b.drop(columns=[c for c in b if c.endswith("_s")]))


def test_a_new_engine_is_one_declaration(tiny, monkeypatch, capsys):
    """An engine that reuses the hf run under another name: the CLI accepts it and passes only its options."""
    root, paths, suite = tiny
    seen = {}

    def run(target, drafters, probes, out, **kw):
        seen.update(kw)
        return ENGINES["hf"].load()(target, drafters, probes, out, **kw)

    import sys
    import types

    mod = types.ModuleType("drifttool_test_engine")
    mod.run = run
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setitem(ENGINES, "echo", Engine("echo", "the hf loop again", mod.__name__, "run",
                                                frozenset({"compact"})))
    assert main(["capture", "--engine", "echo", "--target", str(paths["target"]), "--drafter", str(paths["eagle3"]),
                 "--probes", str(suite), "--out", str(root / "echo.drift"), "--depth", "2", "--quiet"]) == 0
    assert "device_map" not in seen and "tree" not in seen and seen["depth"] == 2
    assert main(["capture", "--engine", "echo", "--target", str(paths["target"]), "--drafter", str(paths["eagle3"]),
                 "--probes", str(suite), "--out", str(root / "echo2.drift"), "--tree", "[(0,)]", "--quiet"]) == 2
    assert "--tree: only with --engine hf" in capsys.readouterr().err


def test_capture_run_sink_default_is_auto_and_zero_means_none(tiny):
    """`sink=0` asks for no sink positions; only an absent sink means the default (auto), as on the CLI."""
    root, paths, suite = tiny
    none = drifttool.capture_run(paths["target"], [f"e3={paths['eagle3']}"], suite, root / "s0.drift", depth=2, sink=0)
    assert none.manifest["capture"]["sink"] == {"first_n": 0, "positions": [], "token_ids": []}
    assert (none.depths["sink_mass"] == 0).all() and (none.depths["n_sink"] == 0).all()
    auto = drifttool.capture_run(paths["target"], [f"e3={paths['eagle3']}"], suite, root / "sa.drift", depth=2)
    assert auto.manifest["capture"]["sink_rule"].startswith("auto: ")


def test_every_engine_run_has_the_protocol_signature():
    """Each engine's run takes the EngineRun parameters (target, drafters, probes, out, settings, the keyword-only
    extra_manifest, and the output's and settings' keywords in **kw), checked without importing vLLM."""
    import ast
    import importlib.util
    import inspect

    from drifttool.run.engines import EngineRun

    want = [p for p in inspect.signature(EngineRun.__call__).parameters if p not in ("self", "kw")]
    for e in ENGINES.values():
        src = importlib.util.find_spec(e.module).origin
        fn = next(n for n in ast.walk(ast.parse(open(src).read())) if isinstance(n, ast.FunctionDef) and n.name == e.entry)
        names = [a.arg for a in fn.args.args] + [a.arg for a in fn.args.kwonlyargs]
        assert all(w in names for w in want), (e.name, set(want) - set(names))
        assert fn.args.kwarg is not None, e.name  # resume / overwrite / progress and the settings' fields
        assert [a.arg for a in fn.args.args][:4] == ["target", "drafters", "probes", "out"], e.name


def test_shard_keys_are_read_from_the_generic_field_and_the_legacy_one():
    from drifttool.trace.layout import shard_prompts

    m = {"capture": {"shard_key": "DRAFTER:PROMPT"}, "drafters": [{"name": "e3"}]}
    assert shard_prompts(m, {"prompts": ["e3:p0"]}) == ["p0"]
    old = {"capture": {"vllm": {"shard_key": "DRAFTER:PROMPT"}}, "drafters": [{"name": "e3"}]}
    assert shard_prompts(old, {"prompts": ["e3:p0"]}) == ["p0"]
    assert shard_prompts({"capture": {}, "drafters": []}, {"prompts": ["p0"]}) == ["p0"]
