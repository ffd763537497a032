"""Template perturbation statistics (analysis.perturbation) on synthetic traces with planted acceptance: per variant
and drafter, paired per question against the template + BoS rendering and between drafters; and the four renderings
of a chat probe (run/probes.template_variants) on the bundled tiny target's tokenizer-free stand-in."""

from __future__ import annotations

import pytest

from drifttool.analysis import perturbation as pt
from drifttool.analysis.compare import Comparison
from drifttool.trace.reader import read_trace
from drifttool.trace.synthetic import write_trace

K = 4
PLANT = {"eagle3": {"template+bos": 3, "template-bos": 2, "plain+bos": 1, "plain-bos": 0},
         "eagle3.1": {"template+bos": 3, "template-bos": 3, "plain+bos": 3, "plain-bos": 2}}


@pytest.fixture(scope="module")
def cmp(tmp_path_factory):
    root = tmp_path_factory.mktemp("tpl")
    drafters, groups = {}, {}
    for name, acc in PLANT.items():
        a, prompts = [], []
        for q in range(8):
            for v in pt.VARIANTS:
                pid = f"q{q}@{v}"
                groups[pid] = f"q{q}"
                for _ in range(3):
                    prompts.append(pid)
                    a.append(acc[v])
        drafters[name] = {"accepted": a, "prompt": prompts}
    return Comparison.of([read_trace(write_trace(root / "t.drift", drafters, K, groups=groups))])


def test_per_variant_and_against_template_bos(cmp):
    t = pt.table(cmp).set_index(["series", "variant"])
    for name, acc in PLANT.items():
        for v, a in acc.items():
            r = t.loc[(name, v)]
            assert r.acceptance_length == pytest.approx(1 + a) and r.groups == 8
            if v != "template+bos":
                assert r.vs_template_bos == pytest.approx(a - acc["template+bos"])
    assert t.loc[("eagle3", "plain-bos"), "published"] == 1.34 and t.loc[("eagle3.1", "plain-bos"), "published"] == 2.59
    assert t.loc[("eagle3", "plain-bos"), "p"] == pytest.approx(2 / 2 ** 8)  # all 8 questions agree


def test_between_drafters_per_variant(cmp):
    b = pt.between(cmp, "eagle3", "eagle3.1").set_index("variant")
    assert b.loc["plain-bos", "difference"] == pytest.approx(2.0) and b.loc["template+bos", "difference"] == 0.0
    assert (b["groups"] == 8).all()
