"""Byte-level BPE for the zoo targets, trained locally with `tokenizers` (no hub download).

Byte-level so any Python source round-trips; `<bos>` is id 0 and prepended by the post-processor, so
position 0 of every sequence is the same token (where an attention sink lives, docs/eagle3.md §8).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

BOS, EOS = "<bos>", "<eos>"
VOCAB_SIZE = 2048


def train_tokenizer(texts: Iterable[str], vocab_size: int = VOCAB_SIZE):
    """Train a byte-level BPE with `<bos>`=0, `<eos>`=1 and a BOS-prepending post-processor."""
    os.environ.setdefault("RAYON_NUM_THREADS", "1")  # shared 2-core machine
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    assert tok.token_to_id(BOS) == 0 and tok.token_to_id(EOS) == 1
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, 0)]
    )
    return tok


def save_tokenizer(tok, out_dir: str | Path) -> None:
    """tokenizer.json plus the minimal config files PreTrainedTokenizerFast / AutoTokenizer read."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    special = {"bos_token": BOS, "eos_token": EOS}
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 1024,
        "add_bos_token": True,
        "clean_up_tokenization_spaces": False,
        **special,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def load_tokenizer(path: str | Path):
    """Load `tokenizer.json` from a folder (or the file itself) with the `tokenizers` library."""
    from tokenizers import Tokenizer

    p = Path(path)
    return Tokenizer.from_file(str(p / "tokenizer.json" if p.is_dir() else p))


def encode_stream(tok, texts: Iterable[str], batch: int = 64) -> np.ndarray:
    """One uint16 token stream: each document's tokens (no BOS) followed by `<eos>`."""
    eos = tok.token_to_id(EOS)
    parts: list[np.ndarray] = []
    buf: list[str] = []

    def flush() -> None:
        for enc in tok.encode_batch(buf, add_special_tokens=False):
            parts.append(np.asarray(enc.ids + [eos], dtype=np.uint16))
        buf.clear()

    for t in texts:
        buf.append(t)
        if len(buf) >= batch:
            flush()
    if buf:
        flush()
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint16)


def encode_document(tok, text: str) -> np.ndarray:
    """A single document without BOS (callers prepend it per window)."""
    return np.asarray(tok.encode(text, add_special_tokens=False).ids, dtype=np.int64)
