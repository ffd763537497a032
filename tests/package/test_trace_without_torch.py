"""Reading a trace needs no torch (issue #54, item 2): `import drifttool; dt.load(...)` and its depth table, the
comparison and the summary run in a fresh interpreter without torch or transformers ever imported — the trace
stage knows nothing of the capture (the key rules' torch side lives in trace/key_sets.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = """
import sys
import drifttool as dt
t = dt.load(sys.argv[1])
assert len(t.depths) and len(t.summary())
heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'vllm'))
print('HEAVY', heavy[:5])
"""


def test_loading_and_comparing_a_trace_imports_no_torch():
    trace = ROOT / "sample_traces" / "smollm2-long_code.drift"
    r = subprocess.run([sys.executable, "-c", CODE, str(trace)], capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "HEAVY []" in r.stdout, r.stdout
