"""The serve config (``configs/serve_<env>.yaml``): what to load, where to listen, how to scale.

Kept apart from :mod:`groundplan.config` (the eval schema) but built from the same specs
(:class:`~groundplan.config.EnvSpec`, :class:`~groundplan.config.LLMSpec`,
:class:`~groundplan.config.PlannerSpec`), so a planner is configured the same way for eval and serve.
The bearer token is never part of this file: only the *name* of the environment variable holding it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from groundplan.config import EnvSpec, LLMSpec, PlannerSpec, check_llm_needs


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Autoscaling(_Strict):
    """Ray Serve autoscaling of one deployment (passed as its ``autoscaling_config``)."""

    min_replicas: int = Field(1, ge=0, description="replicas kept when idle")
    max_replicas: int = Field(1, ge=1, description="upper bound on replicas")
    target_ongoing_requests: float = Field(2.0, gt=0, description="ongoing requests per replica the autoscaler aims at")

    @model_validator(mode="after")
    def _order(self) -> "Autoscaling":
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) > max_replicas ({self.max_replicas})")
        return self

    def to_serve(self) -> dict[str, Any]:
        return {"min_replicas": self.min_replicas, "max_replicas": self.max_replicas,
                "initial_replicas": max(1, self.min_replicas),
                "target_ongoing_requests": self.target_ongoing_requests}


class Placement(_Strict):
    """Per-replica resources, named as in ``cluster/ray-cluster.yaml`` (``scorer``, ``sim``); empty custom
    resources on a single machine."""

    num_cpus: float = Field(0.5, ge=0, description="CPUs per replica")
    num_gpus: float = Field(0.0, ge=0, description="GPUs per replica (the scorer on a GPU node)")
    resources: dict[str, float] = Field(default_factory=dict, description="custom resources, e.g. {scorer: 1}")

    def to_serve(self) -> dict[str, Any]:
        out: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}
        if self.resources:
            out["resources"] = dict(self.resources)
        return out


class DeploymentSpec(_Strict):
    autoscaling: Autoscaling = Field(default_factory=Autoscaling)
    placement: Placement = Field(default_factory=Placement)
    max_ongoing_requests: int = Field(16, ge=1, description="requests one replica accepts at once")


class ScorerSpec(DeploymentSpec):
    """The LLM scorer deployment: eval's scorer host (LLMScorer) groups concurrent score requests into
    one ``score_batch`` call (and concurrent ``/v1/completions`` echo requests into one ``prompt_logprobs``
    call), closing a batch when ``max_batch_size`` requests are in, ``batch_wait_timeout_s`` has passed
    since its first, or (``adaptive_batching``) as many are in as callers had requests outstanding."""

    max_batch_size: int = Field(8, ge=1, le=256, description="score requests per batch")
    batch_wait_timeout_s: float = Field(0.01, ge=0, le=1, description="how long a batch waits to fill")
    adaptive_batching: bool = Field(True, description="close a batch once it holds as many requests as were "
                                    "outstanding (sent, not answered) at once since the last batch, so a lone "
                                    "caller is not held for the window; off: wait for max_batch_size or the window")
    memo_size: int = Field(200_000, ge=0, description="(prompt, option) scores each replica keeps for reuse, "
                           "as eval's scorer does (groundplan.llm.memo; a hit equals a fresh computation within "
                           "~1e-5; 0 disables the memo)")

    @model_validator(mode="after")
    def _enough_ongoing(self) -> "ScorerSpec":
        if self.max_ongoing_requests < self.max_batch_size:
            raise ValueError(f"max_ongoing_requests ({self.max_ongoing_requests}) must be at least max_batch_size "
                             f"({self.max_batch_size}), or batches can never fill")
        return self


class Limits(_Strict):
    """Bounds on what one caller can ask for; beyond them a request gets a 4xx with a message."""

    max_body_bytes: int = Field(65536, ge=1024, description="largest request body accepted (413 beyond)")
    max_drain_bytes: int = Field(16 * 2**20, ge=0, description="a body over max_body_bytes is still read and thrown "
                                 "away up to this many bytes before the 413, so a client that sends its whole body "
                                 "before reading the answer gets the 413, not a connection reset; a longer body gets "
                                 "the 413 at once and the connection is closed")
    max_options: int = Field(64, ge=1, description="options per /v1/score request, prompts per /v1/completions request")
    max_option_chars: int = Field(300, ge=1, description="characters per option")
    max_prompt_chars: int = Field(8000, ge=1, description="characters per /v1/score prompt (a /v1/completions prompt, "
                                  "a prompt and an option, may have max_prompt_chars + max_option_chars)")
    max_instruction_chars: int = Field(1000, ge=1, description="characters per instruction")
    max_skills: int = Field(256, ge=1, description="skills a session step may offer")
    max_sessions: int = Field(64, ge=1, description="open sessions at once (429 beyond)")
    session_idle_s: float = Field(600.0, gt=0, description="a session unused this long expires (410 after)")
    max_session_steps: int = Field(50, ge=1, description="decisions per session")
    max_steps: int = Field(20, ge=1, le=100, description="step cap of /v1/plan episodes, and the most a request's "
                           "max_steps may ask for (400 above it)")
    max_new_tokens: int = Field(512, ge=1, description="most tokens a /v1/completions request may sample per prompt "
                                "(max_tokens; 400 above it)")
    max_samples: int = Field(64, ge=1, description="most samples (n x prompts) one /v1/completions request may ask for")


class ServeConfig(_Strict):
    """One served application: an LLM, the envs /v1/plan can simulate, the planners, and limits."""

    name: str = Field("groundplan", description="Serve application name")
    host: str = Field("127.0.0.1", description="bind address; loopback unless a config names another")
    port: int = Field(8000, ge=1, le=65535)
    route_prefix: str = Field("/", description="where the ingress is mounted")
    token_env: str = Field("GROUNDPLAN_SERVE_TOKEN",
                           description="name of the environment variable holding the bearer token (unset: no auth)")
    llm: LLMSpec = Field(default_factory=LLMSpec)
    envs: list[EnvSpec] = Field(default_factory=lambda: [EnvSpec()], description="envs /v1/plan and sessions may use")
    planners: list[PlannerSpec] = Field(default_factory=lambda: [PlannerSpec(affordance="kitchen_value")])
    default_affordance: float = Field(1.0, ge=0, le=1,
                                      description="session affordance of a skill the client gave no value for")
    limits: Limits = Field(default_factory=Limits)
    scorer: ScorerSpec = Field(default_factory=ScorerSpec)
    planner: DeploymentSpec = Field(default_factory=DeploymentSpec, description="each planner deployment")
    ingress: DeploymentSpec = Field(default_factory=lambda: DeploymentSpec(max_ongoing_requests=64))
    viewer_dir: str | None = Field("outputs", description="folder of sweeps the page at / shows (null: none)")

    @field_validator("planners", "envs")
    @classmethod
    def _not_empty(cls, v: list[Any]) -> list[Any]:
        if not v:
            raise ValueError("at least one is needed")
        return v

    @model_validator(mode="after")
    def _unique(self) -> "ServeConfig":
        labels = [p.display for p in self.planners]
        if len(set(labels)) != len(labels):
            raise ValueError(f"planner labels must be unique, got {labels}")
        if any(p.grid for p in self.planners):
            raise ValueError("planner grids are for sweeps; serve one variant per planner")
        names = [e.name for e in self.envs]
        if len(set(names)) != len(names):
            raise ValueError(f"env names must be unique, got {names}")
        check_llm_needs(self.llm, self.planners)
        return self

    def planner_spec(self, label: str) -> PlannerSpec:
        for p in self.planners:
            if p.display == label:
                return p
        from groundplan.core.errors import UnknownNameError

        raise UnknownNameError(f"unknown planner '{label}'; this server has: {', '.join(p.display for p in self.planners)}")

    def env_spec(self, name: str) -> EnvSpec:
        for e in self.envs:
            if e.name == name:
                return e
        from groundplan.core.errors import UnknownNameError

        raise UnknownNameError(f"unknown env '{name}'; this server has: {', '.join(e.name for e in self.envs)}")


def load_serve_config(path: str | Path, overrides: list[str] | None = None) -> ServeConfig:
    """Read and validate a serve YAML; errors name the file and the bad field."""
    from groundplan.config import load_yaml_model

    return load_yaml_model(ServeConfig, path, overrides, "serve config")
