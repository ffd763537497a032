"""The `hf` engine with draft trees (`capture --tree`): every drafter on one prompt through the tree loop with a
TreeCapture; the shard's tables (run/tree_records)."""

from __future__ import annotations

import time

import pandas as pd

from ...model.config import trained_window
from ...model.drafter import Eagle3Drafter
from ...model.target import Target
from ..loop import check_prompt, prefill_prompt
from ..records import prompt_row
from ..runner import PromptJob
from ..tree import TreeSpec
from ..tree_capture import TreeCapture
from ..tree_loop import speculate_tree
from ..tree_records import tree_prompt_tables
from .shard import each_drafter


def capture_tree_prompt(target: Target, drafters: dict[str, Eagle3Drafter], job: PromptJob,
                        tree: TreeSpec) -> dict[str, pd.DataFrame]:
    """All drafters on one prompt with draft trees; the shard's tables (no sampled rows). The target's prompt
    forward runs once and is shared by the drafters (as in the chain engine)."""
    st, ids, max_new_tokens = job.settings, job.ids, job.max_new_tokens
    prefill, prefill_s = None, 0.0
    if len(drafters) > 1:
        check_prompt(ids, target, len(ids) + max_new_tokens + tree.max_nodes + 1)
        t0 = time.perf_counter()
        prefill = prefill_prompt(target, ids)
        prefill_s = time.perf_counter() - t0  # in no drafter's wall_s (trace/schema.py)

    def run(name: str, d: Eagle3Drafter):
        with TreeCapture(d, sink=st.sink, recent=st.recent, template_ids=tuple(job.template_ids)) as cap:
            t0 = time.perf_counter()
            res = speculate_tree(target, d, ids, tree, max_new_tokens=max_new_tokens, temperature=st.temperature,
                                 seed=job.seed, observers=[cap], prefill=prefill)
            wall = time.perf_counter() - t0
        tabs = tree_prompt_tables(name, job.probe.id, res.rounds, cap.rounds, d.config.input_aux_layer_ids,
                                  trained_window(d.config.to_dict())["window"], tree.max_depth)
        tabs["prompts"] = prompt_row(name, job.probe, len(ids), len(res.output_ids), res.rounds, wall,
                                     max_new_tokens=max_new_tokens, prefill_s=prefill_s)
        return tabs, None

    return each_drafter(drafters, run)[0]
