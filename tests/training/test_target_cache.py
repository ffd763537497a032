"""The converted-target cache is checked against what the conversion wrote: a truncated, zeroed or edited file, a
provenance.json that is not JSON, or a provenance copied beside other weights is never reported ready nor carried
into a trace."""

from __future__ import annotations

import hashlib
import json

import pytest

from drifttool.errors import DriftError
from drifttool.zoo import smollm2


def _fake_cache(folder):
    """A folder shaped like a conversion's output, with the provenance record the conversion writes."""
    folder.mkdir(parents=True)
    files = {"model.safetensors": b"\x01" * 64, "config.json": b'{"model_type": "llama"}',
             "tokenizer.json": b"{}", "chat_template.jinja": b"{{ messages }}"}
    for n, b in files.items():
        (folder / n).write_bytes(b)
    rec = {n: {"bytes": len(b), "sha256": hashlib.sha256(b).hexdigest()} for n, b in files.items()}
    (folder / "provenance.json").write_text(json.dumps({"model": "SmolLM2-135M-Instruct", "files": rec}))
    return folder


def test_an_intact_cache_is_ready_and_its_provenance_carried(tmp_path):
    f = _fake_cache(tmp_path / "c")
    assert smollm2.verify(f) is None and smollm2.is_ready(f)
    assert smollm2.provenance(f)["model"] == "SmolLM2-135M-Instruct"
    assert smollm2.verify(f) is None  # the second time from the stamp (size + mtime unchanged)


@pytest.mark.parametrize("damage,why", [
    (lambda f: (f / "model.safetensors").write_bytes(b"\x00" * 64), "sha256"),  # same size, zeroed
    (lambda f: (f / "model.safetensors").write_bytes(b""), "bytes"),
    (lambda f: (f / "provenance.json").write_text("{not json"), "provenance.json"),
    (lambda f: (f / "config.json").unlink(), "missing"),
    (lambda f: (f / "extra_template.jinja").write_text("x"), "not written by the conversion"),
])
def test_a_damaged_cache_is_not_ready(tmp_path, damage, why):
    f = _fake_cache(tmp_path / "c")
    assert smollm2.verify(f) is None  # stamped as verified first: the damage must still be seen
    damage(f)
    got = smollm2.verify(f)
    assert got is not None and why in got
    assert not smollm2.is_ready(f) and smollm2.provenance(f) is None


def test_a_provenance_without_file_hashes_is_not_trusted(tmp_path):
    f = tmp_path / "four_layer_model"
    f.mkdir()
    (f / "model.safetensors").write_bytes(b"\x02" * 16)
    (f / "provenance.json").write_text(json.dumps({"model": "SmolLM2-135M-Instruct", "gguf_sha256": "f" * 64}))
    assert smollm2.provenance(f) is None and not smollm2.is_ready(f)


def test_cache_root_that_is_a_file_is_one_error_line(tmp_path, monkeypatch):
    p = tmp_path / "not_a_folder"
    p.write_text("x")
    monkeypatch.setenv("DRIFTTOOL_CACHE", str(p))
    with pytest.raises(DriftError, match="is a file"):
        smollm2.fetch(install=False, log=lambda m: None)


def test_conversion_shows_no_carriage_return_bars_when_piped(monkeypatch):
    """Piped into a log (CI, `| tee`), transformers' tqdm bars were one line of carriage-return updates: the
    conversion switches them off there, and gives back the setting it found."""
    from transformers.utils import logging as hf_logging

    from drifttool.zoo.smollm2 import _progress_bars

    state = {"on": True}  # transformers' switch (its enable also poked huggingface_hub, which warns under CI's env)
    monkeypatch.setattr(hf_logging, "is_progress_bar_enabled", lambda: state["on"])
    monkeypatch.setattr(hf_logging, "enable_progress_bar", lambda: state.update(on=True))
    monkeypatch.setattr(hf_logging, "disable_progress_bar", lambda: state.update(on=False))
    restore = _progress_bars(False)
    assert not state["on"]
    restore()
    assert state["on"]
    restore = _progress_bars(True)
    assert state["on"]
    restore()
    assert state["on"]
    state["on"] = False  # found off: stays off either way
    _progress_bars(True)()
    assert not state["on"]


_RACER = r"""
import hashlib, json, shutil, sys, time
from pathlib import Path
from drifttool.zoo import smollm2

gguf, counter = Path(sys.argv[1]), Path(sys.argv[2])
smollm2._locate_gguf = lambda: (gguf, "0")

def convert(g, out, provenance, log):  # a slow conversion writing what the real one writes, atomically
    with counter.open("a") as f:
        f.write("converted\n")
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    time.sleep(1.5)
    files = {"model.safetensors": b"\x01" * 64, "config.json": b'{"model_type": "llama"}', "tokenizer.json": b"{}"}
    for n, b in files.items():
        (tmp / n).write_bytes(b)
    rec = {n: {"bytes": len(b), "sha256": hashlib.sha256(b).hexdigest()} for n, b in files.items()}
    (tmp / "provenance.json").write_text(json.dumps({**provenance, "files": rec}))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)

smollm2._convert = convert
print(smollm2.fetch(install=False, log=lambda m: None))
"""


def test_two_setups_at_once_convert_once_and_both_use_it(tmp_path):
    """Two setups at once raced on the conversion (both converting into the same .tmp folder): a file lock makes
    the second wait for the first and then reuse its result."""
    import os
    import subprocess
    import sys

    gguf, counter = tmp_path / "m.gguf", tmp_path / "conversions.txt"
    gguf.write_bytes(b"gguf")
    env = {**os.environ, "DRIFTTOOL_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, str(gguf), str(counter)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=1800) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    assert counter.read_text().count("converted") == 1
    assert {o[0].strip() for o in outs} == {str(tmp_path / "cache" / smollm2.FOLDER)}
    assert smollm2.verify(tmp_path / "cache" / smollm2.FOLDER) is None
