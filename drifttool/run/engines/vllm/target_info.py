"""The target as the vllm engine needs it: config, tokenizer, chat template and (lazily) embeddings read from
the HF folder. vLLM loads and runs the weights; nothing here can run the target."""

from __future__ import annotations

from pathlib import Path

import torch

from ....errors import DriftError
from ....model.target import TargetBase, default_aux_layer_ids


class TargetInfo(TargetBase):
    """An HF target folder read without loading its model: what read_drafter (its `shape()`), the probes and the manifest use."""

    def __init__(self, path: str | Path, trust_remote_code: bool = False):
        """`trust_remote_code`: read a config class shipped with the folder (`auto_map`, e.g. MiMo's), only when
        the user gave vLLM `trust_remote_code` too (it then runs that code itself)."""
        p = Path(path)
        if not p.is_dir():
            raise DriftError(
                f"{p}: target folder does not exist (expected an HF model folder with config.json)"
            )
        if not (p / "config.json").is_file():
            raise DriftError(f"{p / 'config.json'}: missing (expected an HF model config)")
        from transformers import AutoConfig

        try:
            self.config = AutoConfig.from_pretrained(p, trust_remote_code=trust_remote_code)
        except (OSError, ValueError, KeyError) as e:
            raise DriftError(
                f"{p / 'config.json'}: cannot read as an HF config: {str(e).splitlines()[0]}"
            ) from None
        self.path, self.name = p, str(p)
        if (p / "tokenizer.json").is_file():
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(str(p / "tokenizer.json"))
        from ....model.chat import load_template

        self.chat_template = load_template(p)
        self.aux_layer_ids = default_aux_layer_ids(self.num_layers)
        self._embed: torch.Tensor | None = None

    def _tensor(self, suffix: str) -> torch.Tensor | None:
        from safetensors import safe_open

        for f in sorted(self.path.glob("*.safetensors")):
            with safe_open(str(f), framework="pt") as st:
                key = next((k for k in st.keys() if k.endswith(suffix)), None)
                if key is not None:
                    return st.get_tensor(key)
        return None

    def input_embeddings(self) -> torch.Tensor:
        if self._embed is None:
            self._embed = self._tensor("embed_tokens.weight")
            if self._embed is None:
                raise DriftError(f"{self.path}: no '*embed_tokens.weight' tensor in the target's safetensors")
        return self._embed

    def output_embeddings(self) -> torch.Tensor:
        head = self._tensor("lm_head.weight")
        return head if head is not None else self.input_embeddings()  # tied
