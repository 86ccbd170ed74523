"""Typed experiment configs, loadable from YAML (docs/architecture.md, "Configs").

Every field has a default and a description; unknown fields are errors that name the field, so a typo
in a YAML file fails before any model loads or actor starts. Plugin options (``env.options``,
``llm.options``, a planner's ``options`` and ``affordance_options``) are validated at load against the
typed options class each plugin registers (``Registry.register_lazy(..., config=...)``): the plugin name
is the tag that picks the class, as in a discriminated union, and nothing is built to check them.
"""
from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence, TypeVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from groundplan.core.errors import InvalidInputError
from groundplan.core.truth import OracleDeclaration
from groundplan.core.validation import describe_errors


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _typed_options(registry: Any, name: str, options: dict[str, Any], where: str) -> dict[str, Any]:
    """Validate ``options`` against the options class ``name`` registered in ``registry``; an unknown name
    lists the valid ones, a bad option is named with its field path."""
    cls = registry.config_class(name)
    if cls is None:
        return options
    try:
        cls.model_validate(options)
    except ValidationError as e:
        raise ValueError(f"{where}: {describe_errors(e)}. Valid options: {', '.join(cls.model_fields)}") from None
    return options


def check_llm_needs(llm: "LLMSpec", planners: Sequence["PlannerSpec"]) -> None:
    """Refuse planners that need what the LLM backend declares it cannot do (``PlannerOptions.llm_needs``
    against the backend options' ``capabilities``), e.g. SayCan's option scoring on a chat-completions
    server; raises ValueError naming the planner, the need and the backend. A backend that declares
    nothing is not checked."""
    from groundplan.llm import backend_capabilities

    caps = backend_capabilities(llm.backend, llm.options)
    if caps is None:
        return
    for p in planners:
        for variant in p.variants():
            missing = caps.missing(variant.planner_options.llm_needs)
            if missing:
                mode = f" in mode '{llm.options['mode']}'" if "mode" in llm.options else ""
                raise ValueError(f"planner '{variant.display}' needs LLM capability {', '.join(missing)}, which llm "
                                 f"backend '{llm.backend}'{mode} does not have; use a backend that has it ('hf' has "
                                 "all; 'openai' in mode 'completions' scores and generates, in mode 'chat' only "
                                 "generates)")


def say_model_card(llm: "LLMSpec") -> dict[str, Any] | None:
    """The ``say.json`` of a fine-tuned Say model named by ``llm.model`` (an MLflow model URI, or a folder
    holding one), or None for any other model. Resolving a ``models:/`` URI reads the MLflow store named by
    ``llm.options.tracking_uri`` (downloading the model once into the cache)."""
    from groundplan.llm.loading import SAY_MODEL_FILE, is_model_uri

    if llm.backend != "hf":
        return None
    folder: Path | None = None
    if is_model_uri(llm.model):
        from groundplan.core.model_uri import resolve_model_folder

        folder = resolve_model_folder(llm.model, llm.options.get("tracking_uri"), SAY_MODEL_FILE, "Say model", "say")
    elif (Path(llm.model) / SAY_MODEL_FILE).is_file():
        folder = Path(llm.model)
    if folder is None:
        return None
    card = json.loads((folder / SAY_MODEL_FILE).read_text())
    card["folder"] = str(folder)
    return card


def check_say_model(llm: "LLMSpec", planners: Sequence["PlannerSpec"]) -> None:
    """Refuse a planner that would read a fine-tuned Say model through another prompt format than the one it
    was trained on (:func:`~groundplan.planners.base.prompt_fingerprint`); raises InvalidInputError naming
    both. A model name that is not a Say model is not checked (a model URI that does not exist fails here,
    before anything is built)."""
    card = say_model_card(llm)
    if card is None:
        return
    from groundplan.planners.base import prompt_fingerprint

    for p in planners:
        for variant in p.variants():
            fmt = variant.planner_options.prompt_format
            mine = prompt_fingerprint(variant.name, fmt)
            if mine != card.get("prompt_fingerprint"):
                raise InvalidInputError(
                    f"planner '{variant.display}' reads {llm.model} through prompt format {mine} "
                    f"({variant.name}: {json.dumps(fmt, sort_keys=True, default=str)}), but the model was trained on "
                    f"format {card.get('prompt_fingerprint')} ({card.get('planner')}: "
                    f"{json.dumps(card.get('prompt_format'), sort_keys=True, default=str)}); a model scored on "
                    "another format than it was trained on measures nothing: use the training config's planner "
                    "and prompt options")


def probe_llm_needs(llm: "LLMSpec", planners: Sequence["PlannerSpec"]) -> None:
    """Ask the LLM backend's server, once, whether it does what the planners need where its declared
    capabilities cannot know (:func:`groundplan.llm.probe_backend`): an ``openai`` backend in completions
    mode declares option scoring, but only a request shows whether the server echoes prompt log-probs.
    Called where a config is about to run (``eval``, ``plan``, ``serve``, ``collect`` with a planner),
    after :func:`check_llm_needs` and before any episode; not inside config validation, which must not
    reach the network (a config is validated again in every Ray actor). Raises InvalidInputError with what
    the server answered."""
    from groundplan.llm import probe_backend

    needs: dict[str, list[str]] = {}
    for p in planners:
        for variant in p.variants():
            for need in variant.planner_options.llm_needs:
                needs.setdefault(need, []).append(variant.display)
    probe_backend(llm.backend, llm.model, llm.options, needs)


class EnvSpec(_Strict):
    name: str = Field("kitchen", description="registered env name (see `groundplan list`)")
    options: dict[str, Any] = Field(default_factory=dict, description="env options: the env's registered options class")

    @model_validator(mode="after")
    def _check(self) -> "EnvSpec":
        from groundplan.envs import ENVS

        _typed_options(ENVS, self.name, self.options, f"env '{self.name}' options")
        return self


class LLMSpec(_Strict):
    backend: str = Field("hf", description="registered LLM backend")
    model: str = Field("smollm2-135m-instruct", description="embedded model name, Hugging Face id or local path")
    options: dict[str, Any] = Field(default_factory=dict, description="backend options (dtype, prefix_cache_mb, ...)")

    @model_validator(mode="after")
    def _check(self) -> "LLMSpec":
        from groundplan.llm import LLM_BACKENDS

        _typed_options(LLM_BACKENDS, self.backend, self.options, f"llm backend '{self.backend}' options")
        return self


#: a planner grid key that searches an affordance option rather than a planner option
AFFORDANCE_GRID_PREFIX = "affordance."


class PlannerSpec(_Strict):
    name: str = Field("saycan", description="registered planner name")
    label: str | None = Field(None, description="name shown in tables (defaults to `name`)")
    affordance: str | None = Field(None, description="registered affordance source, or none")
    affordance_options: dict[str, Any] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict, description="planner options, validated by the planner")
    grid: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="planner options to search, each with its values: the sweep runs one variant per "
        "combination, labelled '<label> [key=value ...]', and reports the best by the config's `select_by` "
        "(Zero-Shot Planners, Sec. 3.5 and A.1: every method gets its own hyperparameter search); a key "
        f"'{AFFORDANCE_GRID_PREFIX}<option>' searches an affordance option instead (e.g. 'affordance.done_can')",
    )
    group: str | None = Field(None, description="set on the variants a grid expands to: the label of that grid")

    @model_validator(mode="after")
    def _check(self) -> "PlannerSpec":
        from groundplan.grounding import AFFORDANCES
        from groundplan.planners import PLANNERS

        for variant in self.variants():
            where = f"planner '{variant.label or variant.name}'"
            _typed_options(PLANNERS, self.name, variant.options, f"{where} options")
            if self.affordance is not None:
                _typed_options(AFFORDANCES, self.affordance, variant.affordance_options,
                               f"{where} affordance '{self.affordance}' options")
            elif variant.affordance_options:
                raise ValueError(f"{where} has affordance options but no affordance")
        return self

    @property
    def planner_options(self) -> Any:
        """This spec's planner options as its registered typed class (``PlannerOptions``): what callers read
        its declarations, LLM needs and prompt from (a grid spec's own options; its variants have theirs)."""
        from groundplan.planners import PLANNERS

        return PLANNERS.config_class(self.name).model_validate(self.options)

    @property
    def grounding_options(self) -> Any:
        """This spec's affordance options as its grounding source's registered typed class; None without a
        source (or for a source that registers none)."""
        from groundplan.grounding import AFFORDANCES

        cls = AFFORDANCES.config_class(self.affordance) if self.affordance is not None else None
        return None if cls is None else cls.model_validate(self.affordance_options)

    @property
    def declarations(self) -> tuple[OracleDeclaration, ...]:
        """What this configuration reads of the simulator's truth, known before anything is built: its
        options' declarations and its grounding source's class-level ``declaration``
        (:class:`~groundplan.core.truth.OracleDeclaration` each), as the built planner reports them."""
        from groundplan.core.truth import unique
        from groundplan.grounding import AFFORDANCES

        source = AFFORDANCES.get(self.affordance).declaration if self.affordance else None
        return unique([*self.planner_options.declarations, source])

    @property
    def display(self) -> str:
        """The label tables and traces use: ``label`` (or the planner name), with the oracles this
        configuration reads appended, e.g. ``"+Scene (oracle sub-goals)"``, so a variant that saw ground
        truth never shows under the name of one that did not (a stand-in keeps the label; the tables mark
        it from :attr:`declarations`)."""
        from groundplan.core.truth import oracle_names
        from groundplan.planners.base import labelled

        return labelled(self.label or self.name, oracle_names(self.declarations))

    @field_validator("grid")
    @classmethod
    def _grid_values(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in v.items():
            if not values:
                raise ValueError(f"grid '{key}' lists no values")
        return v

    def variants(self) -> list["PlannerSpec"]:
        """This planner, or one planner per combination of its grid's values (grid keys override
        ``options``; keys ``affordance.<option>`` override ``affordance_options``), labelled
        ``<label> [key=value ...]``; :attr:`display` appends the oracles the variant reads after the brackets,
        once."""
        if not self.grid:
            return [self]
        keys = list(self.grid)
        out = []
        for values in itertools.product(*(self.grid[k] for k in keys)):
            chosen = dict(zip(keys, values))
            label = f"{self.label or self.name} [" + " ".join(f"{k}={v}" for k, v in chosen.items()) + "]"
            planner = {k: v for k, v in chosen.items() if not k.startswith(AFFORDANCE_GRID_PREFIX)}
            grounding = {k.removeprefix(AFFORDANCE_GRID_PREFIX): v for k, v in chosen.items()
                         if k.startswith(AFFORDANCE_GRID_PREFIX)}
            out.append(self.model_copy(update={"options": {**self.options, **planner},
                                               "affordance_options": {**self.affordance_options, **grounding},
                                               "label": label, "grid": {}, "group": self.display}))
        return out


class TaskSelection(_Strict):
    """Which of the env's tasks a sweep runs. Only null (or leaving a field out) means "all": an empty list
    is refused, so a selection that lost its entries never quietly becomes the whole task set."""

    file: str | None = Field(None, description="a YAML or JSONL file of your own tasks for this env (docs/tasks.md); "
                             "used instead of the env's task set, then filtered like it")
    families: list[str] | None = Field(None, min_length=1, description="task families to run; null = all; never "
                                       "empty")
    per_family: int | None = Field(None, ge=1, description="first N tasks of each family; null = the full set")
    ids: list[str] | None = Field(None, min_length=1, description="explicit task ids (overrides families/per_family); "
                                  "null = none; never empty")


class RuntimeSpec(_Strict):
    """Where and how a sweep runs. ``groundplan eval`` flags override these fields; none of them changes
    an episode's result, so they are not part of the config hash."""

    executor: Literal["ray", "local"] = Field("ray", description="'ray': episode-runner actors and a shared LLM "
                                              "scorer; 'local': one episode runner in this process")
    address: str | None = Field(None, description="Ray cluster to join ('auto', ray://host:10001); default: "
                                "RAY_ADDRESS, else a local Ray")
    workers: int = Field(4, ge=1, description="episode-runner actors (processes)")
    envs_per_worker: int = Field(1, ge=1, le=256, description="envs each episode-runner actor owns, each playing its "
                                 "own episode in a thread (RLlib's num_envs_per_env_runner): many cheap sims share a "
                                 "process, its Ray core worker and its memory")
    in_flight: int | None = Field(None, ge=1, description="episodes in flight (default: workers x envs_per_worker)")
    scorers: int = Field(1, ge=1, description="LLM scorer replicas")
    scorer_gpus: float = Field(0.0, ge=0, description="GPUs per scorer replica")
    scorer_cpus: float = Field(1.0, ge=0, description="CPUs reserved per scorer replica")
    scorer_threads: int | None = Field(None, ge=1, description="torch threads per scorer (default: all cores of its node)")
    scorer_resources: dict[str, float] = Field(default_factory=dict, description="custom Ray resources per scorer, "
                                               "e.g. {scorer: 1} to pin scorers to GPU nodes")
    worker_cpus: float = Field(0.5, ge=0, description="CPUs reserved per episode runner")
    worker_resources: dict[str, float] = Field(default_factory=dict, description="custom Ray resources per episode "
                                               "runner, e.g. {sim: 1} for CPU nodes")
    batch_window_ms: float = Field(5.0, ge=0, description="how long the scorer waits to fill a batch")
    max_batch: int = Field(32, ge=1, description="most score requests per scorer batch")
    adaptive_batching: bool = Field(True, description="close a scorer batch as soon as it holds as many requests as "
                                    "were outstanding at once since the last batch (at least the last one plus "
                                    "those queued), instead of always waiting the whole window")
    memo_size: int = Field(200_000, ge=0, description="(prompt, option) scores the scorer keeps for reuse across "
                           "episodes, seeds and planners (a hit returns the score as first computed, equal to a fresh "
                           "one within ~1e-5; 0 disables the memo)")
    remote_affordance: bool = Field(False, description="serve affordance sources from one affordance-server actor")
    max_episode_retries: int = Field(3, ge=0, description="reruns of an episode whose runner died (then it is "
                                     "recorded as failed with the error)")
    call_timeout_s: float | None = Field(600.0, gt=0, description="longest wait for one actor call; null: no limit")
    start_timeout_s: float = Field(600.0, gt=0, description="longest wait for actors to be placed and started")
    mlflow: bool = Field(True, description="log the sweep to MLflow (store and artifacts under <output_dir>/mlruns)")


class EvalConfig(_Strict):
    """One evaluation sweep: planners x env tasks x seeds with one LLM."""

    name: str = Field("eval", description="experiment name (MLflow run and output folder)")
    env: EnvSpec = Field(default_factory=EnvSpec)
    llm: LLMSpec = Field(default_factory=LLMSpec)
    planners: list[PlannerSpec] = Field(default_factory=lambda: [PlannerSpec()])
    tasks: TaskSelection = Field(default_factory=TaskSelection)
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec)
    seeds: list[int] = Field(default_factory=lambda: [0], description="episode seeds per task")
    max_steps: int = Field(20, ge=1, description="step cap per episode")
    output_dir: str = Field("outputs", description="traces and summaries go to <output_dir>/<name>/")
    select_by: list[str] = Field(
        default_factory=lambda: ["execution_success"],
        description="metrics summed to pick the best variant of each planner grid: 'execution_success', "
        "'plan_success' or the env's episode metrics (Zero-Shot Planners rank by executability + LCS, "
        "Sec. 3.5: `[executability, lcs]` on VirtualHome)",
    )
    select_tie_break: list[str] = Field(
        default_factory=list,
        description="metrics summed to break a tie in `select_by` between a grid's variants (ranked after it, not added "
        "to it), e.g. `[goals_gained]` where every variant may fail the validation tasks; a tie left after these goes "
        "to the first variant",
    )
    select_on: dict[str, Any] | None = Field(
        None,
        description="env options of the tasks each planner grid is chosen on (e.g. `{split: validation}`, merged "
        "into `env.options`): every variant runs there first (its own run folder, `<name>-selection`), then only "
        "each grid's best variant by `select_by` runs on the config's own tasks. None: the variants are chosen on "
        "the config's own tasks, as Zero-Shot Planners did on theirs (a table that calls its tasks held out needs "
        "this set)",
    )

    @field_validator("planners", "seeds", "select_by")
    @classmethod
    def _not_empty(cls, v: list[Any], info: ValidationInfo) -> list[Any]:
        if not v:
            what = {"planners": "planner", "seeds": "seed", "select_by": "select_by metric"}[info.field_name]
            raise ValueError(f"at least one {what} is needed")
        return v

    @model_validator(mode="after")
    def _expand_grids(self) -> "EvalConfig":
        """Planner grids become their variants here, so every later stage sees plain planners; ``select_by``
        must name measures this env reports."""
        self.planners = [v for p in self.planners for v in p.variants()]
        labels = [p.display for p in self.planners]
        if len(set(labels)) != len(labels):
            raise ValueError(f"planner labels must be unique, got {labels}")
        check_llm_needs(self.llm, self.planners)
        from groundplan.envs import ENVS

        if self.select_on is not None:
            if not self.grids:
                raise ValueError("select_on chooses among a planner grid's variants: give a planner a `grid`, or drop it")
            if {**self.env.options, **self.select_on} == self.env.options:
                raise ValueError(f"select_on {self.select_on} changes no env option: the variants would be chosen on "
                                 "the very tasks they are then measured on")
        available = ["execution_success", "plan_success", *ENVS.get(self.env.name).capabilities.measures]
        unknown = [m for m in [*self.select_by, *self.select_tie_break] if m not in available]
        if unknown:
            raise ValueError(f"select_by/select_tie_break name {unknown}, which env '{self.env.name}' does not report; available: "
                             f"{', '.join(available)}")
        return self

    @property
    def grids(self) -> dict[str, list[str]]:
        """Grid label -> the labels of its variants, for the planners that were expanded from a grid."""
        out: dict[str, list[str]] = {}
        for p in self.planners:
            if p.group is not None:
                out.setdefault(p.group, []).append(p.display)
        return out

    def hash(self) -> str:
        """Short stable hash of everything that changes results (not the output folder or the runtime; nor
        ``select_on`` and ``select_tie_break`` when unset, so the configs made before they existed keep their hashes
        and runs)."""
        unset = {k for k in ("select_on", "select_tie_break") if not getattr(self, k)}
        d = self.model_dump(exclude={"output_dir", "runtime", *unset})
        return stable_hash(d, 12)

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.name


def stable_hash(data: Any, length: int = 10) -> str:
    """SHA-256 of ``data``'s canonical JSON (sorted keys; non-JSON values by ``str``), shortened."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:length]


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (value parsed as YAML: numbers, null, lists...)."""
    for item in overrides:
        if "=" not in item:
            raise InvalidInputError(f"override {item!r} is not of the form key.path=value")
        key, raw = item.split("=", 1)
        node: Any = data
        parts = key.strip().split(".")
        for p in parts[:-1]:
            if isinstance(node, list) and p.isdigit() and int(p) < len(node):  # planners.0.options...
                node = node[int(p)]
            elif isinstance(node, dict):
                node = node.setdefault(p, {})
            else:
                raise InvalidInputError(f"override {item!r}: '{p}' is not a mapping or a list index")
        if isinstance(node, list) and parts[-1].isdigit() and int(parts[-1]) < len(node):
            node[int(parts[-1])] = yaml.safe_load(raw)
        elif isinstance(node, dict):
            node[parts[-1]] = yaml.safe_load(raw)
        else:
            raise InvalidInputError(f"override {item!r}: cannot set '{parts[-1]}' there")
    return data


M = TypeVar("M", bound=BaseModel)


def with_fields(model: M, update: Mapping[str, Any], what: str, path: str = "") -> M:
    """``model`` with the fields in ``update`` replaced, validated by the model's own rules as a YAML
    value would be: for values that arrive typed (command-line flags), which a round trip through
    ``key=value`` text would only re-parse. ``path`` is the model's place in its config (``runtime``);
    a bad value raises InvalidInputError naming ``what`` and the field by its config path. Meant for
    models whose validators take their own output back unchanged (``RuntimeSpec``, ``TaskSelection``,
    ``ServeConfig``), not ``EvalConfig``, whose validation expands planner grids."""
    try:
        return type(model).model_validate({**model.model_dump(exclude_unset=True), **update})
    except ValidationError as e:
        raise InvalidInputError(f"invalid {what}: {describe_errors(e, path)}") from None


def load_yaml_model(cls: type[M], path: str | Path, overrides: list[str] | None = None, what: str = "config") -> M:
    """Read a YAML file, apply ``key.path=value`` overrides and validate it as ``cls``; every error (missing
    file, bad YAML, not a mapping, a bad field) names the file and, for a field, its path. Eval, serve,
    collect and train configs all load this way."""
    path = Path(path)
    if not path.exists():
        raise InvalidInputError(f"{what} file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise InvalidInputError(f"{what} {path} is not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise InvalidInputError(f"{what} {path} must be a mapping at the top level")
    data = apply_overrides(data, overrides or [])
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise InvalidInputError(f"invalid {what} {path}: {describe_errors(e)}") from None


def load_config(path: str | Path, overrides: list[str] | None = None) -> EvalConfig:
    """Read and validate an eval config; errors name the file and the bad field."""
    return load_yaml_model(EvalConfig, path, overrides)
