"""The sampled weight digest of in-memory models: exact integer positions at every size (a float32 linspace
sampled index n of an n-element tensor once n > 2^24: `cap.to_trace()` on the real target failed with
IndexError at 28,311,552 elements)."""

from __future__ import annotations

import pytest
import torch

from drifttool.trace.identity import module_weights, sample_positions


@pytest.mark.parametrize("n", [4097, 2**24 - 1, 2**24 + 1, 2**24 + 3, 28_311_552, 2**31 + 7])
def test_sample_positions_are_exact_and_in_range(n):
    p = sample_positions(n, 4096)
    assert p.dtype == torch.int64 and p[0] == 0 and p[-1] == n - 1 and (p[1:] >= p[:-1]).all()
    want = [i * (n - 1) // 4095 for i in (0, 1, 2, 1000, 2047, 4094, 4095)]
    assert p[[0, 1, 2, 1000, 2047, 4094, 4095]].tolist() == want


def test_module_digest_of_a_large_embedding():
    m = torch.nn.Embedding(49152, 576)  # the real target's 28,311,552-element embedding
    a = module_weights(m)
    with torch.no_grad():
        m.weight[-1, -1] += 1.0  # the last element is sampled
    assert module_weights(m) != a


def test_a_target_converted_again_elsewhere_resumes_but_other_weights_do_not():
    """The real target's provenance records when and how long its conversion ran; a second conversion (a fresh
    machine) gives the same verified files, so --resume must accept it; another GGUF must not. Traces written
    before the conversion-run entries left the identity still carry them and compare the same way."""
    import json

    from drifttool.trace.identity import flat_identity, identity_diff

    def manifest(prov: dict) -> dict:
        m = {"drifttool_version": "x", "capture": {"depth": 8}, "drafters": [],
             "target": {"config_hash": "c", "weights": "w", "provenance": prov}}
        m["identity"] = flat_identity(m, [])
        return m

    prov = {"gguf_sha256": "b179", "files": {"model.safetensors": {"sha256": "aa"}}, "converted_at": "02:33",
            "convert_seconds": "17.7"}
    again = dict(prov, converted_at="16:51", convert_seconds="18.3")
    assert identity_diff(manifest(prov), manifest(again)) is None
    old = manifest(prov)
    old["identity"]["target.provenance"] = json.dumps(prov, sort_keys=True)  # as older traces stored it
    assert identity_diff(old, manifest(again)) is None
    other = dict(again, gguf_sha256="ffff")
    assert "target.provenance" in identity_diff(manifest(prov), manifest(other))
