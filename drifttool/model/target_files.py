"""What a target folder holds besides the model: its tokenizer.json with the Hugging Face calling convention, and
its weight files checked before transformers reads them."""

from __future__ import annotations

from pathlib import Path

from ..errors import DriftError


class TextTokenizer:
    """A target folder's tokenizer.json with the Hugging Face calling convention:
    `tok("text")["input_ids"]`, `tok.encode(text) -> list[int]`, `tok.decode(ids) -> str`. The underlying
    `tokenizers.Tokenizer` is `.backend`; its other methods (token_to_id, get_vocab, ...) pass through."""

    def __init__(self, backend):
        self.backend = backend

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def __call__(self, text: str | list[str], add_special_tokens: bool = True) -> dict:
        if isinstance(text, str):
            ids = self.encode(text, add_special_tokens)
            return {"input_ids": ids, "attention_mask": [1] * len(ids)}
        ids = [self.encode(t, add_special_tokens) for t in text]
        return {"input_ids": ids, "attention_mask": [[1] * len(i) for i in ids]}

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, ids) -> list[str | None]:
        return [self.backend.id_to_token(int(i)) for i in ids]

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size()

    def __len__(self) -> int:
        return self.backend.get_vocab_size()

    def __getattr__(self, name):
        if name == "backend":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.backend, name)

    def __repr__(self) -> str:
        return f"TextTokenizer(vocab_size={self.vocab_size})"


def check_weight_files(p: Path) -> None:
    """Every *.safetensors header readable (garbage and truncated files caught here, by name) and no tensor in
    two files (one of the copies would silently win)."""
    from safetensors import safe_open

    seen: dict[str, str] = {}
    for f in sorted(p.glob("*.safetensors")):
        try:
            with safe_open(str(f), "pt") as st:
                keys = list(st.keys())
        except Exception as e:  # noqa: BLE001 - SafetensorError, OSError, ...: a corrupt file either way
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise DriftError(f"{f}: corrupt or truncated safetensors file ({msg})") from None
        for k in keys:
            if k in seen:
                raise DriftError(f"{f}: tensor {k!r} is also in {seen[k]}; a tensor may be given once")
            seen[k] = f.name
