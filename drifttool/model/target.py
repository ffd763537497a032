"""Any local HF causal LM as a speculative-decoding target: aux features + KV-cached verification."""

from __future__ import annotations

import copy
import inspect
import itertools
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import DriftError
from ..jsonfile import read_json_object
from .cfgcheck import check_target_config
from .config import FINAL_HIDDEN
from .target_files import TextTokenizer, check_weight_files


def default_aux_layer_ids(num_layers: int) -> list[int]:
    """vLLM's default: inputs of layers 2, L//2 and L-3 (HF hidden_states indices)."""
    return [2, num_layers // 2, num_layers - 3]


def _first_attr(model: nn.Module, paths: tuple[str, ...]) -> nn.Module | None:
    """The first dotted attribute path the model has (families name their submodules differently)."""
    for path in paths:
        obj = model
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        return obj
    return None


def _decoder_layers(model: nn.Module) -> nn.ModuleList:
    found = _first_attr(model, ("model.layers", "model.decoder.layers", "transformer.h", "gpt_neox.layers"))
    if found is None:
        raise DriftError(f"target {type(model).__name__}: cannot find its decoder layers (expected model.layers)")
    return found


def _final_norm(model: nn.Module) -> nn.Module:
    """The norm after the last decoder layer (its output is the hidden state the lm_head reads)."""
    found = _first_attr(model, ("model.norm", "model.decoder.final_layer_norm", "transformer.ln_f",
                                "gpt_neox.final_layer_norm"))
    if found is None:
        raise DriftError(f"target {type(model).__name__}: cannot find its final norm (expected model.norm), which a "
                         "drafter without aux features reads")
    return found


def check_aux_ids(ids: list[int], num_layers: int) -> None:
    """Aux ids in the input convention must name layer inputs 0..L (L = the last layer's output) or FINAL_HIDDEN."""
    n = num_layers
    for i in ids:
        if i != FINAL_HIDDEN and not 0 <= i <= n:
            raise DriftError(
                f"eagle_aux_hidden_state_layer_ids: layer id {i} (as a layer input) is outside the target's "
                f"{n} layers (0..{n}; {n} = the last layer's output)"
            )


@dataclass(frozen=True)
class TargetShape:
    """What a drafter checkpoint is checked against, and where a head without its own embeddings or lm_head
    borrows them (called only then: a vLLM-held target reads them from disk)."""

    num_layers: int
    hidden_size: int
    vocab_size: int
    input_embeddings: Callable[[], torch.Tensor] | None = None
    output_embeddings: Callable[[], torch.Tensor | None] | None = None


@dataclass
class TargetOut:
    logits: torch.Tensor  # [T, V] fp32
    features: torch.Tensor  # [T, A*Ht] aux hidden states, low -> high layer


class TargetBase:
    """A target without running it: sizes from the config, the tokenizer and chat template, the aux layer ids
    it is read at, its `shape()` for checking a drafter. `Target` runs an HF model on top of this; the vllm
    engine's `TargetInfo` is only this (vLLM holds the weights and runs the target)."""

    model: nn.Module | None = None  # None: the weights live elsewhere (vLLM)
    config: object
    tokenizer: object = None
    chat_template: object = None  # chat.ChatTemplate, set from the model folder
    name: str = ""
    aux_layer_ids: list[int]

    @property
    def num_layers(self) -> int:
        return int(self.config.num_hidden_layers)

    @property
    def hidden_size(self) -> int:
        return int(self.config.hidden_size)

    @property
    def vocab_size(self) -> int:
        return int(self.config.vocab_size)

    @property
    def max_positions(self) -> int:
        return int(getattr(self.config, "max_position_embeddings", 1 << 30))

    @property
    def max_token_chars(self) -> int:
        """Characters of the longest token in the vocabulary (a bound for a text's length check)."""
        if getattr(self, "_max_token_chars", None) is None:
            vocab = self.tokenizer.get_vocab() if hasattr(self.tokenizer, "get_vocab") else {}
            self._max_token_chars = max((len(t) for t in vocab), default=0) or 1 << 20
        return self._max_token_chars

    def input_embeddings(self) -> torch.Tensor:
        raise NotImplementedError

    def output_embeddings(self) -> torch.Tensor:
        """The target's lm_head weight [V, H] (its embeddings when tied)."""
        raise NotImplementedError

    def shape(self) -> TargetShape:
        return TargetShape(self.num_layers, self.hidden_size, self.vocab_size, self.input_embeddings,
                           self.output_embeddings)

    def set_aux_layer_ids(self, ids: list[int]) -> None:
        """ids in the input convention: i < L = the input of layer i, i = L = the last layer's output (before the
        final norm), as vLLM reads them."""
        for i in ids:
            if i == FINAL_HIDDEN:
                if self.model is not None:  # None: vLLM holds the weights
                    _final_norm(self.model)  # fails now, with one line, if the target has none to hook
            else:
                check_aux_ids([i], self.num_layers)
        self.aux_layer_ids = list(ids)

    def encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise DriftError(f"target {self.name}: has no tokenizer; give prompts as token_ids")
        ids = self.tokenizer.encode(text)
        return list(ids.ids) if hasattr(ids, "ids") else list(ids)

    def render_chat(self, messages: list[dict]) -> str:
        """Chat messages as text through the target's own chat template (fallback: a plain role format)."""
        from .chat import fallback_render

        return self.chat_template.render(messages) if self.chat_template is not None else fallback_render(messages)

    @property
    def template_ids(self) -> list[int]:
        """The chat template's special tokens (their ids): the added tokens of the tokenizer that the template text
        writes, e.g. SmolLM2's <|im_start|> and <|im_end|>. Empty without a template or tokenizer."""
        from .chat import template_token_ids

        return template_token_ids(self.tokenizer, self.chat_template)

    @property
    def chat_format(self) -> str:
        from .chat import FALLBACK

        return self.chat_template.label if self.chat_template is not None else FALLBACK

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True) if self.tokenizer is not None else " ".join(map(str, ids))


@dataclass(frozen=True)
class TargetSnapshot:
    """A point in the target's running sequence (`Target.snapshot`): its length and, for caches a crop cannot
    restore, a copy of the cache."""

    length: int
    cache: object | None
    epoch: int = 0  # the target's reset count when taken: a crop can only restore the same running sequence
    owner: int = 0  # the Target object it was taken of (its serial): another target's cache is not this one


_SERIALS = itertools.count(1)


class Target(TargetBase):
    """Wraps an HF causal LM with one running KV cache (batch 1).

    Aux features are the inputs of layers `aux_layer_ids` (HF `hidden_states[idx]`; id L = the last layer's
    output before the final norm, as vLLM reads it), captured by hooks so no other layer's hidden state is kept.
    A model spread over devices (`device_map`) takes its ids on the embeddings' device and returns logits and
    features on `last_device` (its lm_head's), where the drafter runs."""

    def __init__(self, model: nn.Module, aux_layer_ids: list[int] | None = None, tokenizer=None, name: str = ""):
        self.model = model.eval()
        self.config = model.config
        self.tokenizer = tokenizer
        self.chat_template = None
        self.name = name or getattr(model.config, "_name_or_path", "") or type(model).__name__
        self.layers = _decoder_layers(model)
        n = len(self.layers)
        self.aux_layer_ids = list(aux_layer_ids) if aux_layer_ids is not None else default_aux_layer_ids(n)
        self.set_aux_layer_ids(self.aux_layer_ids)
        self._cache = None
        self._epoch = 0
        self._serial = next(_SERIALS)  # snapshots name their target (an id() can be reused after a free)
        self.length = 0
        # transformers renamed past_key_values -> cache in 5.x; pass whichever this version takes.
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def device(self) -> torch.device:
        """Where input ids go: the input embeddings' device (the first device of a spread model)."""
        return self.model.get_input_embeddings().weight.device

    @property
    def last_device(self) -> torch.device:
        """Where logits and features come out: the lm_head's device; the drafter runs here."""
        return self.model.get_output_embeddings().weight.device

    @property
    def devices(self) -> list[str]:
        """Every device holding a parameter, in order of first use (one entry unless spread by device_map)."""
        return list(dict.fromkeys(str(p.device) for p in self.model.parameters()))

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def input_embeddings(self) -> torch.Tensor:
        return self.model.get_input_embeddings().weight

    def output_embeddings(self) -> torch.Tensor:
        """The target's lm_head weight [V, H] (its embeddings when tied)."""
        return self.model.get_output_embeddings().weight

    # -- running ------------------------------------------------------------------------------
    def reset(self) -> None:
        self._epoch = getattr(self, "_epoch", 0) + 1
        self._cache = None
        self.length = 0

    @torch.no_grad()
    def forward(self, ids: torch.Tensor, positions: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> TargetOut:
        """Append ids [T] (or [1,T]) to the running sequence; return their logits and aux features. A draft tree
        passes its nodes' `positions` [T] and `mask` (bool [T, length + T], True = may attend)."""
        ids = ids.reshape(1, -1).to(self.device)
        if self.length + ids.shape[1] > self.max_positions:
            raise DriftError(
                f"prompt/continuation needs {self.length + ids.shape[1]} positions but the target's "
                f"max_position_embeddings is {self.max_positions}"
            )
        grabbed: dict[int, torch.Tensor] = {}
        handles = []
        n = self.num_layers
        for i in set(self.aux_layer_ids):

            def grab(mod, args, kwargs, i=i):
                grabbed[i] = args[0] if args else kwargs["hidden_states"]

            def grab_out(mod, args, out, i=i):  # id L: the last layer's output, before the final norm
                grabbed[i] = out[0] if isinstance(out, (tuple, list)) else out

            if i == FINAL_HIDDEN:
                handles.append(_final_norm(self.model).register_forward_hook(grab_out))
            elif i < n:
                handles.append(self.layers[i].register_forward_pre_hook(grab, with_kwargs=True))
            else:
                handles.append(self.layers[n - 1].register_forward_hook(grab_out))
        try:
            pos = torch.arange(self.length, self.length + ids.shape[1], device=self.device)[None]
            extra = {}
            if positions is not None:
                pos = positions.reshape(1, -1).to(self.device)
            if mask is not None:  # additive form: eager attention adds it, SDPA takes a float mask as is
                add = torch.zeros(mask.shape, dtype=self.dtype, device=self.device)
                extra["attention_mask"] = add.masked_fill_(~mask.to(self.device), torch.finfo(self.dtype).min)[None, None]
            out = self.model(input_ids=ids, use_cache=True, position_ids=pos, **{self._cache_kw: self._cache}, **extra)
        finally:
            for h in handles:
                h.remove()
        self._cache = out.get("cache", None) or out.get("past_key_values", None)
        if hasattr(self._cache, "activate_past_recording"):
            # Sliding-window layers (gpt-oss, Mistral...) otherwise drop states beyond the window at once and
            # cannot roll back rejected drafts; recording keeps them until crop() trims them.
            self._cache.activate_past_recording()
        self.length += ids.shape[1]
        last = self.last_device  # layers of a spread model sit on several devices: features meet on the last
        feats = torch.cat([grabbed[i][0].to(last) for i in self.aux_layer_ids], dim=-1)
        return TargetOut(out.logits[0].float().to(last), feats)

    def snapshot(self) -> TargetSnapshot:
        """The running cache as it is now, to `restore` before another drafter replays the same prompt (the
        prompt's forward then runs once per prompt, not once per drafter). Full-attention dynamic caches are
        restored by cropping (no copy: positions < length are never written again); other caches (sliding window,
        recurrent, quantised) are copied, since a crop cannot bring back what they dropped."""
        layers = getattr(self._cache, "layers", None)
        croppable = layers is not None and all(type(x).__name__ == "DynamicLayer" for x in layers)
        return TargetSnapshot(self.length, None if croppable else copy.deepcopy(self._cache), self._epoch,
                              self._serial)

    def restore(self, snap: TargetSnapshot) -> None:
        """Back to `snap`: exactly the cache the snapshot saw (bit-identical keys and values)."""
        if snap.owner != self._serial:  # equal lengths and reset counts on two targets passed the checks below
            raise DriftError("target: restore() of a snapshot (or Prefill) taken of another target object; run "
                             "prefill_prompt on this target")
        if snap.cache is None:
            if self._cache is None or self.length < snap.length or self._epoch != snap.epoch:
                raise DriftError("target: restore() after reset() or another prompt: the snapshot's cache is gone")
            self.crop(snap.length)
        else:
            self._cache = copy.deepcopy(snap.cache)
            self.length = snap.length

    def crop(self, length: int) -> None:
        """Drop cached positions >= length (rejected draft tokens); sliding-window layers trim to their window."""
        if self._cache is None or length > self.length:
            return
        new_api = "tokens_to_remove" in inspect.signature(self._cache.crop).parameters
        if length == self.length and not new_api:
            return
        try:
            if new_api:
                self._cache.crop(length - self.length)  # transformers >= 5.x: negative = tokens to drop (0: trim)
            else:
                self._cache.crop(length)  # older: absolute length to keep
        except (RuntimeError, ValueError) as e:
            raise DriftError(f"target {self.name}: its KV cache ({type(self._cache).__name__}) cannot drop rejected "
                             f"draft tokens ({str(e).splitlines()[0][:120]}); use --mode teacher-forced or a "
                             "transformers version whose cache can be cropped") from None
        self.length = length


@contextmanager
def _no_loading_bars():
    """transformers' "Loading weights" bar off while drifttool loads a target (it leaks into CLI output, notebooks
    and logs that are drifttool's), then back as the caller had it."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def load_target(
    path,
    aux_layer_ids: list[int] | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | str = torch.float32,
    trust_remote_code: bool = False,
    device_map: str | dict | None = None,
) -> Target:
    """Load a local HF causal LM folder (config.json + safetensors); `path` may also be a loaded model.
    `device_map` ("auto", "balanced", "sequential" or {module: device}) spreads a big target over devices the
    way transformers/accelerate place it (instead of `device`); `Target.last_device` is then where the
    drafter belongs."""
    from ..dtypes import parse_dtype

    dtype = parse_dtype(dtype)
    if isinstance(path, TargetBase):
        return path
    if isinstance(path, nn.Module):
        return Target(path.to(device=device, dtype=dtype), aux_layer_ids)
    from .hub import resolve

    p = resolve(path, "target")  # a local folder, or a hub id found in the Hugging Face cache
    if not p.is_dir():
        raise DriftError(f"{p}: target folder does not exist (expected an HF model folder with config.json)")
    check_target_config(read_json_object(p / "config.json", "expected an HF model config"), str(p / "config.json"))
    if not list(p.glob("*.safetensors")):
        if list(p.glob("*.bin")) or list(p.glob("*.pt")):
            raise DriftError(
                f"{p}: only pickle weights (*.bin/*.pt) found; drifttool loads safetensors only because "
                "unpickling can run arbitrary code. Convert with safetensors first."
            )
        raise DriftError(f"{p}: no *.safetensors weights found")
    check_weight_files(p)
    from transformers import AutoModelForCausalLM

    placement = {} if device_map is None else {"device_map": check_device_map(device_map)}
    try:
        with _no_loading_bars():
            model = AutoModelForCausalLM.from_pretrained(
                p, dtype=dtype, trust_remote_code=trust_remote_code, use_safetensors=True, **placement
            )
    except DriftError:
        raise
    except Exception as e:  # noqa: BLE001 - transformers' config validation and loaders raise many kinds
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DriftError(f"{p}: cannot load as an HF causal LM ({type(e).__name__}: {msg})") from None
    if device_map is None:
        model.to(device)
    tok = None
    if (p / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        tok = TextTokenizer(Tokenizer.from_file(str(p / "tokenizer.json")))
    from .chat import load_template

    t = Target(model, aux_layer_ids, tok, name=str(p))
    t.chat_template = load_template(p)
    return t


DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


def check_device_map(device_map: str | dict) -> str | dict:
    """A device_map transformers accepts (one of DEVICE_MAPS, or {module name: device}), with accelerate
    installed (transformers needs it to place a model by map)."""
    if isinstance(device_map, str) and device_map not in DEVICE_MAPS:
        raise DriftError(f"--device-map {device_map!r}: expected one of {', '.join(DEVICE_MAPS)}")
    if not isinstance(device_map, (str, dict)):
        raise DriftError(f"device_map: expected a name ({', '.join(DEVICE_MAPS)}) or a dict, got "
                         f"{type(device_map).__name__}")
    import importlib.util

    if importlib.util.find_spec("accelerate") is None:
        raise DriftError("--device-map: needs the accelerate package (pip install accelerate)")
    return device_map
