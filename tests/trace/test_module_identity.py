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
