"""The recorder inside vLLM's worker processes: mixed into vLLM's worker class through `worker_extension_cls`
(vLLM's supported extension point) and driven by `LLM.collective_rpc`, so it runs wherever the model runner
lives — the in-process engine core, the multiprocess engine core, every tensor-parallel rank. One rank records:
tensor-parallel rank 0 of the stage that holds the drafter (its inputs are whole on every rank). This module
is imported by vLLM's workers only; it needs vLLM."""

from __future__ import annotations

import os
from pathlib import Path


class DrifttoolRecorder:
    """Worker methods named `drifttool_*` (vLLM refuses an extension whose names clash with the worker's)."""

    def drifttool_attach(self, store_dir: str) -> dict:
        from vllm.distributed import get_tensor_model_parallel_rank

        from .recorder import VllmRecorder

        runner = getattr(self, "model_runner", None)
        rank = int(get_tensor_model_parallel_rank())
        if runner is None or getattr(runner, "drafter", None) is None or rank != 0:
            self._drifttool_rec = None
            return {"tp_rank": rank, "recording": False, "pid": os.getpid()}
        self._drifttool_rec = VllmRecorder(runner).attach()
        self._drifttool_dir = Path(store_dir)
        self._drifttool_takes = 0
        from vllm.distributed import get_pp_group, get_tensor_model_parallel_world_size

        sizes = {"tp_size": int(get_tensor_model_parallel_world_size()), "pp_size": int(get_pp_group().world_size)}
        return {"tp_rank": rank, "recording": True, "pid": os.getpid(), **sizes, **self._drifttool_rec.describe()}

    def drifttool_take(self) -> str | None:
        """Write the events recorded since the last take; their path (None on ranks that do not record)."""
        from .events import write_events

        rec = getattr(self, "_drifttool_rec", None)
        if rec is None:
            return None
        self._drifttool_takes += 1
        return str(write_events(rec.take(), self._drifttool_dir / f"take-{self._drifttool_takes:05d}"))

    def drifttool_detach(self) -> None:
        rec = getattr(self, "_drifttool_rec", None)
        if rec is not None:
            rec.detach()
        self._drifttool_rec = None
