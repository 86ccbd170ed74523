"""Chaos for the Ray runtime: ``kill -9`` episode runners and the LLM scorer while a kitchen sweep runs,
and check that the faults changed nothing (docs/fault-tolerance.md).

The Ray executor promises that a runner that dies mid-episode is restarted (or replaced) and its episode
rerun from reset, that a scorer that dies is restarted and its pending requests resent, and that the
driver writes each finished episode once, so a rerun of a killed driver resumes. Unit tests kill actors
with ``ray.kill`` at chosen moments; this tool does what an operating system or an operator does:
SIGKILL of the actor's process at an arbitrary moment, found through Ray's state (actor table: class
name, state, pid, node).

What it runs: ``configs/saycan_kitchen.yaml`` (SayCan and No-VF, the real embedded model) through
``run_sweep`` with the ``ray`` executor, twice: once clean, once with a :class:`FaultInjector` that kills a
random ``EpisodeWorker`` every ``--interval`` seconds and the ``LLMScorer`` at least ``--scorer-kills`` times
(the scorer kills alternate with runner kills from the start). Optionally (``--kill-driver-after N``) it
then runs the same sweep as a ``groundplan eval`` subprocess, SIGKILLs that driver once N episodes are
recorded and runs the same command again, which must resume. The faulty and resumed runs must record
every episode exactly once, with no error, and with the clean run's chosen skills, outcomes and scores
(within 1e-4: both runs are on one machine, where the Ray path's batching and prefix-cache order move
scores by less than that).

    python benchmarks/chaos.py --kill-driver-after 10           # the full form: 30 episodes, a kill every 4 s
    python benchmarks/chaos.py --families nl_single_primitive,nl_nouns --seeds 0,1,2 --max-steps 2 --scorer-threads 1 \\
        --interval 1.5 --max-faults 4 --episodes-between 0 --max-episode-retries 3   # the CI form (tests/test_chaos.py)

It prints every fault (time, target, actor, pid, whether it landed), the episodes rerun, and a last line
``result: episodes=<n> faults=<landed> scorer_faults=<n> reruns=<n> exactly_once=<yes|no> equal=<yes|no>
...``; the exit status is 0 only when the faulty run equals the clean one. Kills reach only processes on
this machine (a local Ray or a ``ray.cluster_utils`` cluster): the pid must belong to a Ray worker here.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "saycan_kitchen.yaml"
RUNNER_CLASS = "EpisodeWorker"
SCORER_CLASS = "LLMScorer"
#: what tests/test_golden_traces.py allows the Ray path (the scorer batches and caches in another order)
TOLERANCE = 1e-4
#: the full form's families: 5 of the kitchen's 7 x 3 seeds x 2 planners = 30 episodes
FULL_FAMILIES = ["nl_single_primitive", "nl_nouns", "nl_verbs", "structured", "embodiment"]
#: the planners of the chaos sweep: both score every skill with the LLM (no sampling), one grounds them
PLANNERS = [{"name": "saycan", "label": "SayCan", "affordance": "kitchen_value"},
            {"name": "saycan_novf", "label": "No-VF"}]

log = logging.getLogger("chaos")


# ------------------------------------------------------------------------------------------ actors


@dataclass(frozen=True)
class ActorRecord:
    """One row of Ray's actor table."""

    actor_id: str
    class_name: str
    state: str
    pid: int
    node_id: str
    job_id: str


def list_actor_records(class_name: str | None = None) -> list[ActorRecord]:
    """The connected cluster's actors (of ``class_name``), from Ray's state.

    Through ``ray.util.state.list_actors`` when the cluster runs its dashboard, which serves that API;
    otherwise from the GCS actor table the state API itself reads (a local Ray started by ``groundplan
    eval`` has no dashboard, and one costs a 2-core machine seconds to start). The state API is always
    given this cluster's address: without one it looks for any Ray on the machine and, where several
    jobs run their own, refuses or picks another's."""
    import ray

    rows: list[ActorRecord]
    if _has_dashboard():
        from ray.util.state import list_actors

        rows = [ActorRecord(a.actor_id, a.class_name, a.state, int(a.pid or 0), a.node_id or "", a.job_id or "")
                for a in list_actors(address=ray.get_runtime_context().gcs_address, detail=True, limit=10_000,
                                     raise_on_missing_output=False)]
    else:
        from ray._private import state

        rows = [ActorRecord(aid, info.get("ActorClassName", ""), info.get("State", ""), int(info.get("Pid") or 0),
                            info.get("Address", {}).get("NodeID", ""), info.get("JobID", ""))
                for aid, info in state.actors().items()]
    if class_name is None:
        return rows
    return [r for r in rows if r.class_name == class_name or r.class_name.endswith("." + class_name)]


_STATE_API: dict[str, tuple[bool, float]] = {}  # session name -> (its dashboard answers, when checked)


def _has_dashboard() -> bool:
    """Whether the connected cluster's own dashboard (the state API's server) answers.

    Checked by its session name: a cluster started without a dashboard still records the default
    address (127.0.0.1:8265), where on a machine shared with other jobs another cluster's dashboard may
    answer, with that cluster's actors and pids. A "no" is checked again after 5 s (a dashboard can
    come up after its cluster)."""
    import urllib.request

    import ray
    from ray._private import ray_constants
    from ray.experimental.internal_kv import _internal_kv_get

    session = ray._private.worker.global_worker.node.session_name
    known = _STATE_API.get(session)
    if known is None or (not known[0] and time.monotonic() - known[1] > 5.0):
        url = _internal_kv_get(ray_constants.DASHBOARD_ADDRESS, namespace=ray_constants.KV_NAMESPACE_DASHBOARD)
        ok = False
        if url:
            try:
                with urllib.request.urlopen(f"http://{url.decode()}/api/version", timeout=5) as r:
                    ok = json.loads(r.read()).get("session_name") == session
            except Exception:  # nothing listens there, or not a dashboard
                ok = False
        known = _STATE_API[session] = (ok, time.monotonic())
    return known[0]


def _is_local_ray_worker(pid: int) -> bool:
    """True when ``pid`` is a Ray worker process on this machine (its title starts with ``ray::``), so a
    stale or remote pid never kills an unrelated process."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::")
    except OSError:
        return False


# ------------------------------------------------------------------------------------------ faults


@dataclass
class Fault:
    """One SIGKILL: when (seconds since the injector started), what, and whether it landed."""

    t_s: float
    target: str  # "runner" or "scorer"
    actor_id: str
    pid: int
    node_id: str
    landed: bool  # the actor was alive with this pid, SIGKILL was delivered, and the actor lost that process
    note: str = ""

    def line(self) -> str:
        status = "landed" if self.landed else f"missed ({self.note})"
        return f"  t={self.t_s:7.1f}s  {self.target:<6} actor {self.actor_id[:12]}  pid {self.pid:<7} {status}"


def recorded_episodes(traces: Path) -> int:
    """Complete lines in a ``traces.jsonl`` (the driver writes one per finished episode)."""
    try:
        data = Path(traces).read_bytes()
    except OSError:
        return 0
    return sum(1 for line in data.split(b"\n")[:-1] if line.strip())


class FaultInjector:
    """SIGKILLs sweep actors from a background thread while a sweep runs in this process.

    Targets come in a fixed order: runner and scorer alternate until ``scorer_kills`` scorer kills have
    landed, then runners only, up to ``max_faults`` kills (None: until :meth:`stop`). Each kill waits
    until ``interval_s`` has passed since the previous one landed and, when ``progress`` is given (e.g.
    the recorded episodes), until it reached ``start_after`` (so the sweep is under way and its actors are
    up) and grew by ``episodes_between`` since the previous kill. The latter keeps a long run making
    progress however slow its episodes are: kills every few seconds on a machine where an episode takes a
    minute would otherwise kill every attempt of an episode until its retries run out. A kill lands only
    on a live actor of this job: a target that is restarting is waited for, so every planned kill lands
    while the sweep runs. Which runner dies is drawn from ``seed``.
    """

    def __init__(self, *, interval_s: float = 4.0, scorer_kills: int = 2, max_faults: int | None = None,
                 progress: Callable[[], int] | None = None, start_after: int = 1, episodes_between: int = 0,
                 seed: int = 0, confirm_timeout_s: float = 120.0, echo: Callable[[str], None] | None = None) -> None:
        self.interval_s = interval_s
        self.scorer_kills = scorer_kills
        self.max_faults = max_faults
        self.progress = progress
        self.start_after = start_after
        self.episodes_between = episodes_between
        self.rng = random.Random(seed)
        self.confirm_timeout_s = confirm_timeout_s
        self.echo = echo
        self.faults: list[Fault] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._job_id = ""

    # -- lifecycle

    def start(self) -> "FaultInjector":
        import ray

        self._job_id = ray.get_runtime_context().get_job_id()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="fault-injector", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> "FaultInjector":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- results

    @property
    def landed(self) -> list[Fault]:
        return [f for f in self.faults if f.landed]

    def landed_on(self, target: str) -> int:
        return sum(f.target == target for f in self.landed)

    # -- the loop

    def _targets(self) -> Iterator[str]:
        scorer = 0
        while True:
            if scorer < self.scorer_kills:
                yield "runner"
                yield "scorer"
                scorer += 1
            else:
                yield "runner"

    def _run(self) -> None:
        last, recorded = self._t0, None
        targets = self._targets()
        target = next(targets)
        while not self._stop.is_set() and (self.max_faults is None or len(self.landed) < self.max_faults):
            due = time.monotonic() - last >= self.interval_s
            done = self.progress() if self.progress is not None else None
            started = done is None or (done >= self.start_after
                                       and (recorded is None or done - recorded >= self.episodes_between))
            victims = self._alive(target) if due and started else []
            if not victims:
                self._stop.wait(0.1)
                continue
            fault = self._kill(target, self.rng.choice(victims))
            self.faults.append(fault)
            log.info("fault: %s", fault.line().strip())
            if self.echo is not None:
                self.echo(fault.line())
            if fault.landed:
                last, recorded = time.monotonic(), done
                target = next(targets)
            else:  # e.g. the process was exiting already: try again on a fresh look at the table
                self._stop.wait(1.0)

    def _alive(self, target: str) -> list[ActorRecord]:
        name = SCORER_CLASS if target == "scorer" else RUNNER_CLASS
        try:
            rows = list_actor_records(name)
        except Exception as exc:  # the cluster is going away at the end of the sweep
            log.debug("actor table unavailable: %s", exc)
            return []
        return sorted((r for r in rows if r.state == "ALIVE" and r.pid and r.job_id == self._job_id),
                      key=lambda r: r.actor_id)

    def _kill(self, target: str, actor: ActorRecord) -> Fault:
        t = time.monotonic() - self._t0

        def fault(landed: bool, note: str = "") -> Fault:
            return Fault(round(t, 2), target, actor.actor_id, actor.pid, actor.node_id, landed, note)

        if not _is_local_ray_worker(actor.pid):
            return fault(False, "pid is not a Ray worker on this machine")
        try:
            os.kill(actor.pid, signal.SIGKILL)
        except ProcessLookupError:
            return fault(False, "process already gone")
        deadline = time.monotonic() + self.confirm_timeout_s
        while time.monotonic() < deadline:  # Ray must see the process die (RESTARTING, DEAD, or a new pid)
            try:
                now = {r.actor_id: r for r in list_actor_records(actor.class_name)}
            except Exception:
                now = {}
            row = now.get(actor.actor_id)
            if row is not None and not (row.state == "ALIVE" and row.pid == actor.pid):
                return fault(True)
            time.sleep(0.05)
        return fault(False, "Ray did not report the death")


# ------------------------------------------------------------------------------------------ checks


def exactly_once(traces: Path, wanted: Sequence[str]) -> list[str]:
    """Problems with ``traces``: an episode missing, recorded twice, or not of this sweep. Empty when
    every wanted episode id is in the file exactly once."""
    from groundplan.rollout.traces import read_traces

    ids = Counter(t.episode_id for t in read_traces(traces))
    problems = [f"missing: {i}" for i in wanted if i not in ids]
    problems += [f"recorded {n} times: {i}" for i, n in ids.items() if n > 1]
    problems += [f"not in the sweep: {i}" for i in ids if i not in set(wanted)]
    return problems


def _close(a: Any, b: Any, tol: float) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        if math.isinf(a) or math.isinf(b):
            return a == b
        return math.isclose(a, b, rel_tol=0, abs_tol=tol)
    return a == b


def compare_traces(clean: Sequence[Any], other: Sequence[Any], tol: float = TOLERANCE) -> list[str]:
    """What differs, episode by episode, between two runs of the same sweep: the episodes, each step's
    chosen skill, done flag and success, every candidate's skill and score components (within ``tol``),
    the outcome (execution and plan success, error) and the env's measures. Empty when equal."""
    a = {t.episode_id: t for t in clean}
    b = {t.episode_id: t for t in other}
    out = [f"only in the clean run: {i}" for i in a if i not in b] + [f"only in the other run: {i}" for i in b if i not in a]
    for eid in (i for i in a if i in b):
        x, y = a[eid], b[eid]
        if [s.chosen for s in x.steps] != [s.chosen for s in y.steps]:
            out.append(f"{eid}: chosen {[s.chosen for s in x.steps]} != {[s.chosen for s in y.steps]}")
            continue
        if [(s.done, s.success) for s in x.steps] != [(s.done, s.success) for s in y.steps]:
            out.append(f"{eid}: step outcomes differ")
        for i, (sx, sy) in enumerate(zip(x.steps, y.steps)):
            cx = [(c.skill, c.llm, c.affordance, c.combined) for c in sx.candidates]
            cy = [(c.skill, c.llm, c.affordance, c.combined) for c in sy.candidates]
            if [c[0] for c in cx] != [c[0] for c in cy]:
                out.append(f"{eid} step {i}: candidate skills differ")
            else:
                pairs = [(p, q) for u, v in zip(cx, cy) for p, q in zip(u[1:], v[1:]) if not _close(p, q, tol)]
                if any(p is None or q is None or math.isinf(p) or math.isinf(q) for p, q in pairs):
                    out.append(f"{eid} step {i}: options scored in one run are unscored (pruned) in the other")
                elif pairs:
                    worst = max(abs(p - q) for p, q in pairs)
                    out.append(f"{eid} step {i}: scores differ by up to {worst:.2e} (> {tol:g})")
        if (x.execution_success, x.plan_success, x.error) != (y.execution_success, y.plan_success, y.error):
            out.append(f"{eid}: outcome {(x.execution_success, x.plan_success, x.error)} != "
                       f"{(y.execution_success, y.plan_success, y.error)}")
        if x.metrics.keys() != y.metrics.keys() or not all(_close(x.metrics[k], y.metrics[k], tol) for k in x.metrics):
            out.append(f"{eid}: measures differ")
    return out


# ------------------------------------------------------------------------------------------ sweeps


def sweep_overrides(*, families: Sequence[str] | None = None, per_family: int = 1, seeds: Sequence[int] = (0, 1, 2),
                    max_steps: int = 6, workers: int = 3, max_episode_retries: int | None = None,
                    scorer_threads: int | None = None) -> list[str]:
    """``--set`` overrides of ``configs/saycan_kitchen.yaml`` for a chaos sweep (the same list serves
    :func:`load_config` here and ``groundplan eval --set`` in a subprocess, so both run the same episodes).
    MLflow is off: the sweep's result is its traces."""
    out = [f"planners={json.dumps(PLANNERS)}", f"tasks.per_family={per_family}", f"seeds={json.dumps(list(seeds))}",
           f"max_steps={max_steps}", "runtime.executor=ray", f"runtime.workers={workers}", "runtime.mlflow=false"]
    if families:
        out.append(f"tasks.families={json.dumps(list(families))}")
    if max_episode_retries is not None:
        out.append(f"runtime.max_episode_retries={max_episode_retries}")
    if scorer_threads is not None:
        out.append(f"runtime.scorer_threads={scorer_threads}")
    return out


def sweep_config(overrides: Sequence[str], output_dir: str | Path) -> Any:
    """The kitchen config with ``overrides``, writing under ``output_dir``."""
    from groundplan.config import load_config

    return load_config(str(CONFIG), [*overrides, f"output_dir={output_dir}"])


def eval_command(overrides: Sequence[str], output_dir: str | Path, address: str) -> list[str]:
    """The ``groundplan eval`` command line of the same sweep, joining the cluster at ``address``."""
    cmd = [sys.executable, "-m", "groundplan.cli", "eval", str(CONFIG), "--output", str(output_dir),
           "--address", address, "--no-progress"]
    for item in overrides:
        cmd += ["--set", item]
    return cmd


@dataclass
class DriverKill:
    """A sweep driver SIGKILLed mid-sweep, then the same command run again."""

    killed: bool  # False when the first run ended before enough episodes were recorded to kill it
    recorded_at_kill: int
    rc: int | None  # the second run's exit status
    output: str = field(default="", repr=False)  # the second run's output


def kill_driver_and_resume(cmd: Sequence[str], traces: Path, after: int, log_path: Path | None = None,
                           env: dict[str, str] | None = None) -> DriverKill:
    """Run ``cmd`` (a sweep) as a subprocess, SIGKILL it once ``after`` episodes are in ``traces``, then
    run ``cmd`` again to its end. Only the driver process is killed: its actors die with its job."""
    out = open(log_path, "w") if log_path else subprocess.DEVNULL
    try:
        first = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, env=env)
        while first.poll() is None and recorded_episodes(traces) < after:
            time.sleep(0.05)
        if first.poll() is not None:
            return DriverKill(False, recorded_episodes(traces), None)
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    finally:
        if log_path:
            out.close()  # type: ignore[union-attr]
    at_kill = recorded_episodes(traces)
    second = subprocess.run(list(cmd), capture_output=True, text=True, env=env)
    return DriverKill(True, at_kill, second.returncode, second.stdout + second.stderr)


@dataclass
class ChaosReport:
    """What one chaos run did and found (printed by :func:`main`)."""

    episodes: int
    faults: list[Fault]
    reruns: int
    rerun_episodes: list[str]
    failed_after_retries: int
    problems: list[str]  # exactly-once problems of the faulty run
    errors: list[str]  # episodes of the faulty run that recorded an error
    differences: list[str]  # faulty run vs clean run
    wall_clean_s: float
    wall_chaos_s: float
    driver: DriverKill | None = None
    driver_problems: list[str] = field(default_factory=list)
    driver_differences: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not (self.problems or self.errors or self.differences or self.driver_problems or self.driver_differences)


def run_chaos(overrides: Sequence[str], output: Path, *, interval_s: float, scorer_kills: int, max_faults: int | None,
              seed: int, episodes_between: int = 0, kill_driver_after: int | None = None, progress: bool = True,
              echo: Callable[[str], None] = print) -> ChaosReport:
    """The clean sweep, the same sweep under a :class:`FaultInjector`, and optionally the driver kill;
    Ray must be initialised (the injector reads its actor table)."""
    import ray

    from groundplan.factory import make_env
    from groundplan.pipelines.evaluate.sweep import expand, run_sweep
    from groundplan.rollout.traces import read_traces

    clean_cfg = sweep_config(overrides, output / "clean")
    wanted = [s.episode_id for s in expand(clean_cfg, make_env(clean_cfg.env))]
    echo(f"clean run: {len(wanted)} episodes")
    t = time.perf_counter()
    clean = run_sweep(clean_cfg, progress=progress, resume=False)
    wall_clean = time.perf_counter() - t

    chaos_cfg = sweep_config(overrides, output / "chaos")
    traces = chaos_cfg.run_dir / "traces.jsonl"
    echo(f"chaos run: {len(wanted)} episodes; faults:")
    injector = FaultInjector(interval_s=interval_s, scorer_kills=scorer_kills, max_faults=max_faults, seed=seed,
                             episodes_between=episodes_between, progress=lambda: recorded_episodes(traces), echo=echo)
    t = time.perf_counter()
    with injector:
        faulty = run_sweep(chaos_cfg, progress=progress, resume=False)
    wall_chaos = time.perf_counter() - t
    report = ChaosReport(
        episodes=len(wanted), faults=injector.faults, reruns=faulty.stats.get("episode_reruns", 0),
        rerun_episodes=list(faulty.stats.get("rerun_episodes", [])),
        failed_after_retries=faulty.stats.get("failed_after_retries", 0),
        problems=exactly_once(traces, wanted), errors=[f"{t.episode_id}: {t.error}" for t in faulty.traces if t.error],
        differences=compare_traces(clean.traces, faulty.traces), wall_clean_s=wall_clean, wall_chaos_s=wall_chaos)
    if kill_driver_after is not None:
        driver_cfg = sweep_config(overrides, output / "driver")
        driver_traces = driver_cfg.run_dir / "traces.jsonl"
        if driver_traces.exists():
            driver_traces.unlink()  # the resume under test is the one after the kill
        cmd = eval_command(overrides, output / "driver", ray.get_runtime_context().gcs_address)
        echo(f"driver kill: {shlex.join(cmd)}")
        report.driver = kill_driver_and_resume(cmd, driver_traces, kill_driver_after, log_path=output / "driver.log")
        report.driver_problems = exactly_once(driver_traces, wanted)
        report.driver_differences = compare_traces(clean.traces, list(read_traces(driver_traces)))
        if not report.driver.killed:
            report.driver_problems.append("the driver finished before it could be killed")
        elif report.driver.rc != 0:
            report.driver_problems.append(f"the resumed run exited {report.driver.rc}: {report.driver.output[-2000:]}")
    return report


def print_report(report: ChaosReport, echo: Callable[[str], None] = print) -> None:
    landed = [f for f in report.faults if f.landed]
    echo(f"faults landed: {len(landed)} ({sum(f.target == 'scorer' for f in landed)} on the scorer), "
         f"missed: {len(report.faults) - len(landed)}")
    echo(f"episodes rerun: {report.reruns}" + "".join(f"\n  {e}" for e in report.rerun_episodes))
    for title, items in (("not exactly once", report.problems), ("errors", report.errors),
                         ("differences from the clean run", report.differences)):
        if items:
            echo(f"{title}:" + "".join(f"\n  {x}" for x in items[:20]))
    if report.driver is not None:
        d = report.driver
        echo(f"driver killed at {d.recorded_at_kill} recorded episode(s): {d.killed}; resumed run exit status {d.rc}")
        for title, items in (("after the driver kill, not exactly once", report.driver_problems),
                             ("after the driver kill, differences from the clean run", report.driver_differences)):
            if items:
                echo(f"{title}:" + "".join(f"\n  {x}" for x in items[:20]))
    scorer = sum(f.target == "scorer" for f in landed)
    echo(f"result: episodes={report.episodes} faults={len(landed)} scorer_faults={scorer} reruns={report.reruns} "
         f"failed_after_retries={report.failed_after_retries} exactly_once={'no' if report.problems else 'yes'} "
         f"equal={'yes' if report.equal else 'no'} wall_clean_s={report.wall_clean_s:.0f} "
         f"wall_chaos_s={report.wall_chaos_s:.0f}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", default=",".join(FULL_FAMILIES), help="comma-separated task families")
    ap.add_argument("--per-family", type=int, default=1, help="tasks per family")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated episode seeds")
    ap.add_argument("--max-steps", type=int, default=5)
    ap.add_argument("--workers", type=int, default=3, help="episode-runner actors")
    ap.add_argument("--scorer-threads", type=int, default=None,
                    help="torch threads of the scorer (default: the config's, i.e. every core)")
    ap.add_argument("--interval", type=float, default=4.0, help="seconds between kills")
    ap.add_argument("--scorer-kills", type=int, default=2, help="kills of the LLM scorer (alternating with runners)")
    ap.add_argument("--max-faults", type=int, default=None, help="stop after this many kills (default: until the end)")
    ap.add_argument("--episodes-between", type=int, default=1,
                    help="episodes recorded between two kills (0: time alone decides)")
    ap.add_argument("--max-episode-retries", type=int, default=10,
                    help="runtime.max_episode_retries for both runs: the retry budget must exceed the kills one "
                    "episode can suffer, or an episode is (by design) recorded as an infrastructure failure; the "
                    "config's 3 suits real faults, not one every few seconds (default 10)")
    ap.add_argument("--seed", type=int, default=0, help="draws which runner dies")
    ap.add_argument("--kill-driver-after", type=int, default=None, metavar="N",
                    help="also run the sweep as `groundplan eval`, SIGKILL it after N episodes and rerun it")
    ap.add_argument("--dashboard", action="store_true",
                    help="start the local Ray with its dashboard, so actors are found through ray.util.state")
    ap.add_argument("--address", default=None, help="join this Ray cluster instead of starting a local one")
    ap.add_argument("--output", default=str(ROOT / "outputs" / "chaos"))
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from groundplan.actors.group import RunnerGroup

    overrides = sweep_overrides(families=args.families.split(",") if args.families else None,
                                per_family=args.per_family, seeds=[int(s) for s in args.seeds.split(",")],
                                max_steps=args.max_steps, workers=args.workers,
                                max_episode_retries=args.max_episode_retries, scorer_threads=args.scorer_threads)
    # the one owner of the Ray session, as groundplan eval's: a local Ray at normal worker priority, or the cluster
    group = RunnerGroup(address=args.address, cpus_needed=1 + 0.5 * args.workers, include_dashboard=args.dashboard)
    group.connect()
    t0 = time.perf_counter()
    try:
        report = run_chaos(overrides, Path(args.output), interval_s=args.interval, scorer_kills=args.scorer_kills,
                           max_faults=args.max_faults, seed=args.seed, episodes_between=args.episodes_between,
                           kill_driver_after=args.kill_driver_after,
                           progress=not args.no_progress)
    finally:
        group.close()
    print_report(report)
    print(f"wall_total_s={time.perf_counter() - t0:.0f}")
    (Path(args.output) / "chaos_report.json").write_text(json.dumps(
        {**asdict(report), "equal": report.equal, "argv": list(argv if argv is not None else sys.argv[1:])},
        indent=2, default=str))
    return 0 if report.equal else 1


if __name__ == "__main__":
    sys.exit(main())
