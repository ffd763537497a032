"""DRIFTTOOL_MONITOR's refusals say what was given and what is expected (issue #51, item 8): a sample just above 1
is shown as typed (not rounded to "sample=1 is outside (0, 1]"), a count that is a number but not an integer is
refused as "expected an integer" (not "not a number")."""

from __future__ import annotations

import pytest

from drifttool.errors import DriftError
from drifttool.monitor.settings import MonitorSettings


@pytest.mark.parametrize("setting,fragments", [
    ("sample=1.0000001", ["sample=1.0000001", "outside (0, 1]"]),
    ("sample=-0.5", ["sample=-0.5", "outside (0, 1]"]),
    ("sample=lots", ["sample=lots", "a number"]),
    ("queue=1e3", ["queue=1e3", "an integer"]),
    ("queue=1.5", ["queue=1.5", "an integer"]),
    ("spool=lots", ["spool=lots", "an integer"]),
    ("threads=0", ["threads=0", "at least 1"]),
])
def test_refusals_show_the_value_as_given_and_what_is_expected(tmp_path, setting, fragments):
    base = {"sample": "0.1", "dir": str(tmp_path / "m")}
    key, _, value = setting.partition("=")
    text = ",".join(f"{k}={v}" for k, v in {**base, key: value}.items())
    with pytest.raises(DriftError) as e:
        MonitorSettings.parse(text)
    msg = str(e.value)
    assert all(f in msg for f in fragments) and "\n" not in msg, msg
    if key != "sample":
        assert "not a number" not in msg, msg


def test_integer_settings_still_read(tmp_path):
    s = MonitorSettings.parse(f"sample=0.5,dir={tmp_path / 'm'},queue=12,max_bytes=1073741824")
    assert s.queue == 12 and s.max_bytes == 1 << 30 and MonitorSettings.parse(s.to_env()) == s


def test_servers_the_monitor_cannot_record_are_refused_in_one_line(monkeypatch):
    """preflight, as the API server runs it before any engine starts: each server shape it cannot record gets one
    line naming the flag to change (MTP heads, graph-captured drafters, prefix caching, pipeline stages, Ray
    without the settings)."""
    from types import SimpleNamespace as N

    from drifttool.monitor.attach import preflight

    def cfg(method="eagle3", eager=True, prefix=False, pp=1, backend="mp", rejection="standard"):
        return N(speculative_config=N(method=method, enforce_eager=eager, rejection_sample_method=rejection),
                 cache_config=N(enable_prefix_caching=prefix),
                 parallel_config=N(pipeline_parallel_size=pp, distributed_executor_backend=backend),
                 use_v2_model_runner=False)

    monkeypatch.delenv("VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY", raising=False)
    assert preflight(cfg()) is None
    for bad, words in [(cfg(method="mtp"), "EAGLE-3"), (cfg(eager=False), "enforce_eager"),
                       (cfg(prefix=True), "--no-enable-prefix-caching"), (cfg(pp=2), "--pipeline-parallel-size 1"),
                       (cfg(backend="ray"), "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY=DRIFTTOOL_"),
                       (cfg(rejection="synthetic"), "synthetic rate")]:
        why = preflight(bad)
        assert why and words in why and "\n" not in why, (words, why)
    monkeypatch.setenv("VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY", "DRIFTTOOL_")
    assert preflight(cfg(backend="ray")) is None
