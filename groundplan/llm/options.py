"""Typed options of the LLM backends (``llm.options`` in a config), validated when a config is loaded so
that a misspelled or invalid option fails before any model loads.

Each class also declares what its backend can do (``capabilities``, an
:class:`~groundplan.llm.base.LLMCapabilities`), so a planner that needs a capability the configured
backend lacks is refused at load time rather than failing mid-sweep."""
from __future__ import annotations

import importlib
import re
from typing import Any, ClassVar, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from groundplan.llm.base import LLMCapabilities
from groundplan.llm.loading import DEFAULT_EMBEDDER


class BackendOptions(BaseModel):
    """Base of an LLM backend's typed options: what the backend declares it can do with these options
    (:attr:`capabilities`), checked when a config loads, and what only its server can tell
    (:meth:`probe`), asked once before a config runs."""

    #: ``"module:function"`` that asks the server behind these options what :attr:`capabilities` cannot
    #: know, called as ``function(model, options, needs)``; imported on first use, like the backends (the
    #: backend module imports its options); None: an in-process backend, nothing to ask
    prober: ClassVar[str | None] = None

    @property
    def capabilities(self) -> LLMCapabilities:
        raise NotImplementedError

    def probe(self, model: str, needs: Mapping[str, Sequence[str]]) -> None:
        """Ask the server behind these options, once, whether it does what ``needs`` (capability -> the
        labels of the planners that need it) asks, through :attr:`prober`; it raises InvalidInputError
        saying what the server answered."""
        if self.prober is None:
            return
        module, function = self.prober.split(":")
        getattr(importlib.import_module(module), function)(model, self, needs)


class HFOptions(BackendOptions):
    """Options of the Hugging Face engine (:class:`groundplan.llm.hf.HFLanguageModel`); the model itself is
    ``llm.model``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dtype: str = Field("auto", description="torch dtype: 'auto' (bf16 on GPU, fp32 on CPU), 'float32', 'bfloat16', "
                       "'float16'. On a CPU with AVX512-BF16/AMX, 'bfloat16' runs the kitchen sweep faster but moves "
                       "decisions whose float32 top-two gap is above 0.1 nats, so it is opt-in there (docs/models.md, "
                       "'Precision')")
    tracking_uri: str | None = Field(None, description="MLflow tracking/registry URI that resolves an llm.model of "
                                     "the form models:/<name>/<version> (a fine-tuned Say model); None: "
                                     "MLFLOW_TRACKING_URI or MLflow's default")
    device_map: str | None = Field("auto", description="accelerate device map ('auto', 'cpu', 'cuda:0'); null: no map")
    embedder: str = Field(DEFAULT_EMBEDDER, description="sentence encoder for embed(): the embedded name, a HF id or a path")
    prefix_cache_mb: int = Field(1024, ge=0, description="bytes of prompt key/values kept for reuse (LRU), in MiB")
    max_pack_tokens: int = Field(512, ge=1, description="most option tokens packed into one forward pass")
    beam_memo_size: int = Field(20000, ge=0, description="diverse beam searches remembered by (prompt, "
                                "parameters), LRU; 0 disables. A hit returns the search as first run; a rerun "
                                "could differ only where a near-tie meets the ~1e-5 path dependence of the "
                                "scores. Planners of one sweep (Greedy-Action rows, Beam-Action's beams) ask "
                                "for the same prompts")
    sample_memo_size: int = Field(20000, ge=0, description="seeded samplings (Zero-Shot's steps and plans, "
                                  "sampled SayCanPay candidates) remembered by (prompt, parameters), LRU; 0 "
                                  "disables. A seeded sampling draws the same numbers, so a hit returns what it "
                                  "drew first; Zero-Shot's planners read only the instruction, so every program "
                                  "of one task name repeats its samples")

    @property
    def capabilities(self) -> LLMCapabilities:
        """The engine scores, samples, beam-searches and returns prompt log-probs (it has the weights)."""
        return LLMCapabilities(score=True, generate=True, beam_search=True, prompt_logprobs=True, chat_template=True)


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class OpenAIOptions(BackendOptions):
    """Options of the OpenAI-compatible HTTP backend (:class:`groundplan.llm.openai_backend.OpenAILanguageModel`):
    any server that speaks the OpenAI API (vLLM, llama.cpp, TGI, a hosted API, ``groundplan serve``).
    The model is ``llm.model``, sent as each request's ``model``; the API key is never in a config, only
    the *name* of the environment variable that holds it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    prober: ClassVar[str | None] = "groundplan.llm.openai_backend:probe_scoring"

    base_url: str = Field("http://127.0.0.1:8000/v1", description="the API's root, ending in /v1 (requests go to "
                          "<base_url>/completions, /chat/completions, /embeddings)")
    api_key_env: str | None = Field("OPENAI_API_KEY", description="NAME of the environment variable holding the API "
                                    "key, read at each request and sent as a bearer token (unset or null: none)")
    mode: Literal["completions", "chat"] = Field("completions", description="'completions': /v1/completions, which "
                                                 "scores options (echo + logprobs) and samples; 'chat': "
                                                 "/v1/chat/completions only, which samples but cannot score")
    max_concurrency: int = Field(8, ge=1, le=256, description="requests in flight at once (the options of one "
                                 "score call go out concurrently)")
    timeout_s: float = Field(60.0, gt=0, description="longest wait for one HTTP request (connect and read)")
    max_retries: int = Field(3, ge=0, le=20, description="retries of a request answered 429 or 5xx, timed out, or "
                             "whose connection failed, with exponential backoff (Retry-After when the server sends one)")
    backoff_s: float = Field(0.5, ge=0, description="first retry's wait; each later retry waits twice as long")
    embeddings: Literal["local", "server"] = Field("local", description="embed() with the local sentence encoder "
                                                   "(`embedder`) or the server's /v1/embeddings (`embedding_model`)")
    embedder: str = Field(DEFAULT_EMBEDDER, description="local sentence encoder for embed() (embeddings: local)")
    embedding_model: str | None = Field(None, description="model named in /v1/embeddings requests (embeddings: "
                                        "server); default: llm.model")

    @model_validator(mode="before")
    @classmethod
    def _model_is_llm_model(cls, data: Any) -> Any:
        if isinstance(data, dict) and "model" in data:
            raise ValueError("the model is `llm.model` (sent as each request's `model`), not an option of the "
                             "openai backend: set llm.model")
        return data

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        # never echo the value: someone may have pasted the key itself here
        if value is not None and not _ENV_NAME.match(value):
            raise ValueError("api_key_env is the NAME of an environment variable (letters, digits, '_'), "
                             "e.g. OPENAI_API_KEY, never the key itself")
        return value

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("base_url must be an http:// or https:// URL such as http://127.0.0.1:8000/v1")
        return value.rstrip("/")

    @property
    def capabilities(self) -> LLMCapabilities:
        """What each mode can do with a server that implements the API: completions mode scores (echo +
        logprobs) and samples; chat mode only samples. Neither can run the token-level beam search (it
        needs the model's distribution at every step). Whether the server at ``base_url`` echoes log-probs
        is not known from the config: :meth:`probe` asks it (:func:`groundplan.llm.openai_backend.probe_scoring`)."""
        return LLMCapabilities(score=self.mode == "completions", generate=True, beam_search=False,
                               prompt_logprobs=False)

