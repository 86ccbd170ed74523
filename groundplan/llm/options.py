"""Typed options of the LLM backends (``llm.options`` in a config), validated when a config is loaded so
that a misspelled or invalid option fails before any model loads."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from groundplan.llm.loading import DEFAULT_EMBEDDER


class HFOptions(BaseModel):
    """Options of the Hugging Face engine (:class:`groundplan.llm.hf.HFLanguageModel`); the model itself is
    ``llm.model``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dtype: str = Field("auto", description="torch dtype: 'auto' (bf16 on GPU, fp32 on CPU), 'float32', 'bfloat16', 'float16'")
    device_map: str | None = Field("auto", description="accelerate device map ('auto', 'cpu', 'cuda:0'); null: no map")
    embedder: str = Field(DEFAULT_EMBEDDER, description="sentence encoder for embed(): the embedded name, a HF id or a path")
    prefix_cache_mb: int = Field(1024, ge=0, description="bytes of prompt key/values kept for reuse (LRU), in MiB")
    max_pack_tokens: int = Field(512, ge=1, description="most option tokens packed into one forward pass")
    beam_memo_size: int = Field(20000, ge=0, description="diverse beam searches remembered by (prompt, "
                                "parameters), LRU; 0 disables. A hit returns the search as first run; a rerun "
                                "could differ only where a near-tie meets the ~1e-5 path dependence of the "
                                "scores. Planners of one sweep (Greedy-Action rows, Beam-Action's beams) ask "
                                "for the same prompts")
