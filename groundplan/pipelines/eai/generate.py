"""``groundplan eai generate``: the open-loop row of EAI's action sequencing (Li et al. 2024, Sec. 3.3):
a language model is given EAI's own stored prompt for each task and writes the whole program at once.

Every planner of that row gets exactly :func:`~groundplan.envs.virtualhome.eai.prompts.stored_prompts`'s
text for the task, the text the 15 stored LLMs answered, and nothing else (no extra examples, no feedback
from the simulator), so its row compares with theirs on equal inputs; the goal is in that prompt
because EAI gives it to every model. The answers are written in EAI's own format,
``<output>/<label>_outputs.json``, a JSON list of ``{"identifier": task_id, "llm_output": text}``
(the format of the package's ``llm_response/action_sequence``), so ``groundplan eai score --responses
<output>`` scores them beside (or instead of) the stored models with the same judge.

- The file is rewritten atomically after each task, and a rerun skips the tasks already in it: a killed
  run resumes where it stopped. A task whose generation raised is recorded with ``"llm_output": ""`` and
  an ``"error"`` (scored as a parse failure, which is what the model's answer was), the run goes on, and
  a rerun tries it again (``retry_errors``).
- ``limit`` takes a fixed sample: ``random.Random(seed).sample`` of the set's sorted ids, so every row
  compared on the sample answers the same tasks.
- ``executor: ray`` sends the tasks over Ray through :class:`~groundplan.actors.pool.ActorPool` (one
  language model per worker actor, a dead actor replaced and its task rerun), joining a cluster or
  starting a local Ray for the run (:func:`~groundplan.actors.cluster.ray_session`).
- ``<label>_run.json`` records the config, the model, how many tasks this run generated, the wall time
  and tasks per second.
"""
from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from groundplan.config import LLMSpec
from groundplan.core.errors import InvalidInputError
from groundplan.core.paths import atomic_write_text
from groundplan.core.validation import some
from groundplan.llm.base import GenerationParams, LanguageModel

log = logging.getLogger(__name__)

#: ``() -> LanguageModel``: builds the model in the process that uses it (a Ray worker, or the driver)
LMFactory = Callable[[], LanguageModel]


class EAIGenerateConfig(BaseModel):
    """What ``groundplan eai generate`` asks which model, how it decodes, where it runs and writes."""

    model_config = ConfigDict(extra="forbid")

    llm: LLMSpec = Field(default_factory=LLMSpec, description="the language model (backend hf or openai, model)")
    task_set: Literal["official", "full"] = Field(
        "official", description="EAI's task set: 'official' (the 305 its evaluator scores) or 'full' (338)")
    ids: list[str] | None = Field(None, description="only these task ids (each must be in the task set)")
    limit: int | None = Field(None, ge=1, description="a fixed sample of this many tasks: random.Random(seed)"
                                                      ".sample of the set's sorted ids (the same for every row)")
    seed: int = Field(0, description="seed of the sample that limit takes")
    max_new_tokens: int = Field(384, ge=1, description="most tokens generated per task (a whole program)")
    temperature: float = Field(0.0, ge=0.0, description="sampling temperature; 0 is greedy")
    stop: list[str] = Field(default_factory=list, description="strings that end an answer (none by default)")
    executor: Literal["local", "ray"] = Field("local", description="'local': one model in this process; 'ray': "
                                                                   "an actor pool, one model per worker")
    workers: int = Field(1, ge=1, description="Ray worker actors (executor: ray)")
    worker_cpus: float = Field(1.0, gt=0, description="CPUs each Ray worker reserves (executor: ray)")
    ray_address: str | None = Field(None, description="Ray cluster to join (default: RAY_ADDRESS or a local Ray)")
    max_retries: int = Field(1, ge=0, description="reruns of a task whose Ray worker died (executor: ray)")
    retry_errors: bool = Field(True, description="on a rerun, try again the tasks recorded with an error")
    output: Path = Field(description="folder for <label>_outputs.json and <label>_run.json")
    label: str | None = Field(None, description="the row's name (file prefix); default: the model's name")

    def row_label(self) -> str:
        """The row's name: ``label``, else the model's last path part, with characters a file name (or EAI's
        ``<model>_outputs.json`` pattern) would not keep replaced by ``-``."""
        raw = self.label or Path(self.llm.model.rstrip("/")).name or self.llm.model
        return re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip("-") or "model"

    def params(self) -> GenerationParams:
        return GenerationParams(n=1, temperature=self.temperature, max_new_tokens=self.max_new_tokens,
                                stop=tuple(self.stop))


def select_task_ids(config: EAIGenerateConfig) -> list[str]:
    """The task ids this config asks for (:func:`~groundplan.envs.virtualhome.eai.tasks.sample_ids`)."""
    from groundplan.envs.virtualhome.eai.tasks import sample_ids

    try:
        return sample_ids(config.task_set, config.limit, config.seed, ids=config.ids)
    except KeyError as exc:
        raise InvalidInputError(str(exc.args[0])) from None


def outputs_path(config: EAIGenerateConfig) -> Path:
    return config.output / f"{config.row_label()}_outputs.json"


def read_records(path: Path) -> dict[str, dict[str, Any]]:
    """Task id -> its record in an EAI-format outputs file (empty when there is no file yet)."""
    if not path.exists():
        return {}
    with open(path, encoding="utf-8") as f:
        return {row["identifier"]: row for row in json.load(f)}


def generate_record(lm: LanguageModel, task_id: str, prompt: str, params: GenerationParams) -> dict[str, Any]:
    """One task's record in EAI's format: the model's first answer to ``prompt``, or ``""`` with the error
    when the model raised (recorded, not lost, so one failing task never stops a run)."""
    try:
        text = lm.generate(prompt, params)[0].text
    except Exception as exc:  # any backend failure is this task's outcome, not the run's
        log.warning("task %s: %s: %s", task_id, type(exc).__name__, exc)
        return {"identifier": task_id, "llm_output": "", "error": f"{type(exc).__name__}: {exc}"}
    return {"identifier": task_id, "llm_output": text}


class GenerateWorker:
    """A Ray worker with one language model: the model is built once, in the worker's process."""

    def __init__(self, llm: LLMSpec, lm_factory: LMFactory | None = None) -> None:
        from groundplan.factory import make_llm

        self.lm = lm_factory() if lm_factory is not None else make_llm(llm)

    def generate(self, task_id: str, prompt: str, params: GenerationParams) -> dict[str, Any]:
        return generate_record(self.lm, task_id, prompt, params)

    def model_name(self) -> str:
        return str(getattr(self.lm, "name", ""))

    def ping(self) -> bool:
        return True


def generate(config: EAIGenerateConfig, *, lm: LanguageModel | None = None, lm_factory: LMFactory | None = None,
             progress: bool = True) -> dict[str, Any]:
    """Generate the open-loop answers (see the module); returns what ``<label>_run.json`` holds.

    ``lm`` (local executor) or ``lm_factory`` (either executor; pickled to each Ray worker) replace the
    model ``config.llm`` names, e.g. with a test double."""
    from groundplan.envs.virtualhome.eai.prompts import stored_prompts

    label = config.row_label()
    path = outputs_path(config)
    config.output.mkdir(parents=True, exist_ok=True)
    prompts = stored_prompts()
    ids = select_task_ids(config)
    records = read_records(path)
    foreign = sorted(set(records) - set(ids))
    if foreign:  # scored with this row, they would change its n and its tasks without a word
        raise InvalidInputError(
            f"{path} holds answers for {len(foreign)} tasks outside this run's selection ({some(foreign)}): it was "
            f"made with another task set, sample or seed. Use another output folder or label, or delete it.")
    done = {i for i, r in records.items() if not (config.retry_errors and r.get("error"))}
    todo = [i for i in ids if i not in done]
    log.info("EAI open loop, %s: %d tasks (%s set%s), %d already in %s, %d to generate", label, len(ids),
             config.task_set, f", sample of {config.limit} with seed {config.seed}" if config.limit else "",
             len(ids) - len(todo), path, len(todo))
    order = {i: k for k, i in enumerate(ids)}

    def save(record: dict[str, Any]) -> None:
        records[record["identifier"]] = record
        rows = sorted(records.values(), key=lambda r: (order.get(r["identifier"], len(order)), r["identifier"]))
        atomic_write_text(path, json.dumps(rows, indent=2))

    t0 = time.perf_counter()
    model = ""
    if todo:
        if config.executor == "local":
            model = _run_local(config, todo, prompts, save, lm, lm_factory, progress)
        else:
            model = _run_ray(config, todo, prompts, save, lm_factory, progress)
    wall_s = time.perf_counter() - t0
    errors = sorted(i for i in ids if records.get(i, {}).get("error"))
    run = {
        "label": label, "model": model or config.llm.model, "config": json.loads(config.model_dump_json()),
        "task_ids": ids, "n": len(ids), "generated": len(todo), "skipped": len(ids) - len(todo),
        "errors": errors, "wall_s": round(wall_s, 2),
        "tasks_per_s": round(len(todo) / wall_s, 4) if todo and wall_s > 0 else None,
        "outputs": str(path),
    }
    atomic_write_text(config.output / f"{label}_run.json", json.dumps(run, indent=2))
    log.info("EAI open loop, %s: %d generated in %.1f s (%s tasks/s), %d errors; %s", label, len(todo), wall_s,
             run["tasks_per_s"], len(errors), path)
    return run


def _run_local(config: EAIGenerateConfig, todo: list[str], prompts: dict[str, str],
               save: Callable[[dict[str, Any]], None], lm: LanguageModel | None, lm_factory: LMFactory | None,
               progress: bool) -> str:
    from tqdm.auto import tqdm

    from groundplan.factory import make_llm

    if lm is None:
        lm = lm_factory() if lm_factory is not None else make_llm(config.llm)
    params = config.params()
    for task_id in tqdm(todo, desc=f"EAI generate {config.row_label()}", unit="task", disable=not progress):
        save(generate_record(lm, task_id, prompts[task_id], params))
    return str(getattr(lm, "name", ""))


def _run_ray(config: EAIGenerateConfig, todo: list[str], prompts: dict[str, str],
             save: Callable[[dict[str, Any]], None], lm_factory: LMFactory | None, progress: bool) -> str:
    import ray
    from tqdm.auto import tqdm

    from groundplan.actors.cluster import ray_session, wait_for_actors
    from groundplan.actors.pool import ActorPool, error_text

    n_workers = min(config.workers, len(todo))
    with ray_session(config.ray_address, cpus_needed=n_workers * config.worker_cpus):
        remote = ray.remote(GenerateWorker).options(num_cpus=config.worker_cpus, max_restarts=0)
        params = config.params()

        def make_actor() -> Any:
            return remote.remote(config.llm, lm_factory)

        with ActorPool(make_actor, n_workers, max_retries=config.max_retries,
                       is_alive=lambda a: a.ping.remote()) as pool, \
                tqdm(total=len(todo), desc=f"EAI generate {config.row_label()}", unit="task",
                     disable=not progress) as bar:
            model = wait_for_actors([a.model_name.remote() for a in pool.actors], "EAI generate workers", 600.0)[0]
            for out in pool.run(todo, lambda actor, i: actor.generate.remote(i, prompts[i], params)):
                if out.ok:
                    save(out.value)
                else:
                    why = "; ".join(error_text(e) for e in out.errors)
                    log.warning("task %s failed on Ray: %s", out.item, why)
                    save({"identifier": out.item, "llm_output": "", "error": why})
                bar.update(1)
        return str(model)
