"""Simulator truth behind one gate (groundplan.core.truth): every registered grounding source, every planner
option that turns truth on and every expert declares what it reads; a planner or source reaches the task's
goal, reference plan or metadata, or the simulator state in an observation, only through
``truth.read``, which refuses an undeclared read; traces record the declarations and the tables print their
marks from them, never from a label."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pytest

from groundplan.core.errors import GroundplanError, OracleAccessError
from groundplan.core.truth import (
    ORACLE_MARK,
    PERCEPTS,
    STAND_IN_MARK,
    OracleDeclaration,
    Truth,
    percept,
    read,
)
from groundplan.core.types import Observation, Task
from groundplan.grounding import AFFORDANCES
from groundplan.grounding.base import Affordance
from groundplan.planners import PLANNERS
from groundplan.planners.base import Planner
from groundplan.rollout.traces import EpisodeTrace, StepTrace
from tests.fakes import FakeLM, ToyEnv

TASK = Task("t/0", "bring me a coke can", "fam", goal={"coke": "user"}, reference_plan=("find a coke can", "done"),
            metadata={"subgoals": ["Red block is on the blue bowl."]}, start_state={"coke": "table"})
OBS = Observation(skills=["find a coke can", "done"], state={"robot": "start", "coke": "table"})
PLAN_READER = OracleDeclaration("reference plan", frozenset({Truth.REFERENCE_PLAN}), "reads the reference plan")


# ------------------------------------------------------------------------------------ the gate
class Sneaky(Affordance):
    """A source that reads truth through the gate with whatever its class declares."""

    def __init__(self, what: Truth) -> None:
        self.what = what

    def reset(self, task: Task, seed: int) -> None:
        if self.what is not Truth.STATE:
            self.seen = read(task, self.what, self)

    def __call__(self, observation: Observation, skills: Sequence[str], history: Sequence[str]) -> np.ndarray:
        if self.what is Truth.STATE:
            self.seen = read(observation, Truth.STATE, self)
        return np.ones(len(skills))


class DeclaredSneaky(Sneaky):
    declaration = OracleDeclaration("everything", frozenset(Truth), "reads every truth")


@pytest.mark.parametrize("what", [Truth.GOAL, Truth.REFERENCE_PLAN, Truth.METADATA, Truth.START_STATE, Truth.STATE])
def test_an_undeclared_source_cannot_read_truth_and_a_declared_one_can(what):
    source = Sneaky(what)
    with pytest.raises(OracleAccessError, match=what.where.replace(".", r"\.")) as caught:
        source.reset(TASK, 0)
        source(OBS, OBS.skills, [])
    assert isinstance(caught.value, GroundplanError)
    declared = DeclaredSneaky(what)
    declared.reset(TASK, 0)
    declared(OBS, OBS.skills, [])
    assert declared.seen is (OBS.state if what is Truth.STATE else getattr(TASK, what.value))


def test_a_declaration_covers_only_what_it_names():
    class PlanOnly(Sneaky):
        declaration = PLAN_READER

    PlanOnly(Truth.REFERENCE_PLAN).reset(TASK, 0)
    with pytest.raises(OracleAccessError, match=r"task\.goal"):
        PlanOnly(Truth.GOAL).reset(TASK, 0)
    with pytest.raises(OracleAccessError, match=r"observation\.state"):
        PlanOnly(Truth.STATE)(OBS, OBS.skills, [])


def test_a_reader_that_declares_nothing_at_all_is_refused():
    with pytest.raises(OracleAccessError, match="declares nothing"):
        read(TASK, Truth.GOAL, object())


def test_percepts_are_free_and_the_rest_of_the_state_is_not():
    @dataclass
    class State:
        detected: list = field(default_factory=lambda: ["red block"])
        positions: dict = field(default_factory=dict)

    obs = Observation(skills=[], state=State())
    assert percept(obs, "detected") == ["red block"] and percept(Observation(skills=[]), "detected", []) == []
    assert percept(Observation(skills=[], state={"pose": [1, 2, 0]}), "pose") == [1, 2, 0]
    with pytest.raises(OracleAccessError, match="'positions' is simulator state"):
        percept(obs, "positions")
    assert "positions" not in PERCEPTS


def test_declarations_check_themselves():
    with pytest.raises(ValueError, match="reads nothing"):
        OracleDeclaration("x", frozenset(), "nothing")
    d = OracleDeclaration("x", frozenset({"goal"}), "the goal", stands_in=True)  # type: ignore[arg-type]
    assert d.reads == {Truth.GOAL} and not d.is_oracle and d.mark == STAND_IN_MARK
    assert OracleDeclaration.from_dict(json.loads(json.dumps(d.to_dict()))) == d


# ------------------------------------------------------------------------------------ grounding sources
#: what each registered source reads (None: nothing) and whether it stands in for a model of its paper
EXPECTED_SOURCES: dict[str, tuple[frozenset[Truth], bool] | None] = {
    "kitchen_value": (frozenset({Truth.STATE}), True),
    "kitchen_language_sim": (frozenset({Truth.REFERENCE_PLAN}), False),
    "tabletop_detected": None,
    "virtualhome_preconditions": (frozenset({Truth.STATE}), False),
    "saycanpay_learned": None,
    "saycanpay_oracle": (frozenset({Truth.SIMULATOR, Truth.GOAL}), False),
}


def test_every_registered_source_declares_what_it_reads():
    own = {n for n in AFFORDANCES.names() if AFFORDANCES.origin(n) is None}  # an installed plugin's are its own
    assert own == set(EXPECTED_SOURCES), "declare the new source's reads here and in its class"
    for name, expected in EXPECTED_SOURCES.items():
        declared = AFFORDANCES.get(name).declaration  # class level: known before anything is built
        if expected is None:
            assert declared is None, name
        else:
            assert isinstance(declared, OracleDeclaration) and (declared.reads, declared.stands_in) == expected, name
            assert declared.wording and declared.name


def _undeclared(cls: type) -> type:
    """``cls`` with its declaration taken away: the same code, now reading undeclared."""
    return type(f"Undeclared{cls.__name__}", (cls,), {"declaration": None})


class Snapshot:
    """A VirtualHome-like state snapshot: ``check`` is the simulator's precondition check."""

    def check(self, skill: str) -> tuple[bool, str]:
        return skill.startswith("walk"), ""


def _kitchen():
    from groundplan.envs.kitchen import KitchenEnv, task_by_id

    task = task_by_id("kitchen/nl_single_primitive/01")
    return task, KitchenEnv(mode="language").reset(task, 0)


SOURCE_RUNS = {
    # name -> (options, run(source)): the run reads what the source declares
    "kitchen_value": ({}, lambda s: s(_kitchen()[1], ["pick up the apple", "done"], [])),
    "kitchen_language_sim": ({}, lambda s: s.reset(_kitchen()[0], 0)),
    "virtualhome_preconditions": ({}, lambda s: s(Observation(skills=[], state=Snapshot()), ["walk to kitchen", "done"], [])),
    "saycanpay_oracle": ({"env": "kitchen", "env_options": {"mode": "language"}}, lambda s: s.reset(_kitchen()[0], 0)),
}


@pytest.mark.parametrize("name", sorted(SOURCE_RUNS))
def test_each_truth_reading_source_reads_through_the_gate(name):
    """Each registered source that declares truth works as declared, and the same code without its
    declaration is refused: it reads through the gate, not around it."""
    options, run = SOURCE_RUNS[name]
    cls = AFFORDANCES.get(name)
    run(cls(**options))
    with pytest.raises(OracleAccessError):
        run(_undeclared(cls)(**options))


def test_sources_that_declare_nothing_read_only_percepts_and_text():
    class OnlyPercepts:
        detected = ["red block", "blue bowl"]

        def __getattr__(self, item: str) -> Any:  # the true poses, the blocks, ...: never to be read
            raise AssertionError(f"read state.{item}")

    obs = Observation(skills=[], state=OnlyPercepts())
    out = AFFORDANCES.get("tabletop_detected")()(obs, ["pick the red block and place it on the blue bowl", "done"], [])
    assert out.tolist() == [1.0, 0.2]


def test_the_virtualhome_source_is_an_oracle_and_its_rows_say_so():
    from groundplan.config import load_config

    declared = AFFORDANCES.get("virtualhome_preconditions").declaration
    assert declared.is_oracle and declared.reads == {Truth.STATE}
    saycan = [p for p in load_config("configs/zeroshot_virtualhome.yaml").planners if p.affordance][0]
    assert saycan.declarations == (declared,)
    assert saycan.display == "SayCan (oracle simulator preconditions)"


# ------------------------------------------------------------------------------------ planner options
def _im(**options: Any):
    from groundplan.planners.inner_monologue import make_inner_monologue

    return make_inner_monologue(FakeLM(generations=['Goal state is ["Red block is on the blue bowl."].', "Done."]),
                                **options)


@dataclass
class TabletopState:
    blocks: list = field(default_factory=lambda: ["red block"])
    bowls: list = field(default_factory=lambda: ["blue bowl"])
    positions: dict = field(default_factory=lambda: {"red block": (0.4, 0.1, 0.02), "blue bowl": (0.5, -0.1, 0.0)})
    locations: dict = field(default_factory=dict)
    detected: list = field(default_factory=lambda: ["red block", "blue bowl"])


def test_every_planner_option_that_turns_truth_on_declares_it():
    from groundplan.planners.inner_monologue import InnerMonologueConfig
    from groundplan.planners.nav_baselines import OracleConfig
    from groundplan.planners.saycanpay import SayCanPayConfig

    im = InnerMonologueConfig
    assert im(feedback=[]).declarations == () and im(feedback=["object"]).declarations == ()
    assert im(feedback=["scene"]).declarations == (im.SCENE,) and im.SCENE.stands_in
    # Success feedback is the env's verdict from its true state (the tabletop's: the same detector on the
    # true poses), a stand-in for IM's success detector like the scene's
    assert im(feedback=["object", "success"]).declarations == (im.SUCCESS,) and im.SUCCESS.stands_in
    assert im.SUCCESS.reads == {Truth.STATE} and im(feedback=["object", "success"]).oracles == ()
    assert im(feedback=["scene"], subgoal_fallback=True).declarations == (im.SCENE, im.SUBGOALS)
    assert im(feedback=["human"]).declarations == (im.SCRIPTED_HUMAN,)
    assert im(feedback=["scene"], subgoal_fallback=True).oracles == ("sub-goals",)  # a stand-in keeps the label
    assert SayCanPayConfig(perfect_say=True, oracle=True).declarations == (SayCanPayConfig.PERFECT_SAY,)
    assert SayCanPayConfig().declarations == ()
    assert OracleConfig().declarations == (OracleConfig.TARGET_POSITIONS,)
    assert im().declarations == (im.SCENE,)  # IM's default, Object + Scene, describes the scene from true poses
    for name in PLANNERS.names():  # every other planner's defaults read nothing
        if name not in ("house_oracle", "inner_monologue"):
            assert PLANNERS.config_class(name)().declarations == (), name


def _without_declarations(planner: Any) -> Any:
    planner.__class__ = type(f"Undeclared{type(planner).__name__}", (type(planner),),
                             {"declarations": property(lambda self: ())})
    return planner


@pytest.mark.parametrize("options", [{"feedback": ["scene"]}, {"feedback": ["scene"], "subgoal_fallback": True},
                                     {"feedback": ["human"], "human_answers": {}}])
def test_inner_monologue_reads_truth_only_as_declared(options):
    obs = Observation(skills=["pick the red block and place it on the blue bowl", "done"], state=TabletopState())
    planner = _im(**options)
    planner.reset(TASK, obs)
    planner.next_step(obs, None)
    if options["feedback"] == ["human"]:
        from groundplan.planners.inner_monologue import ScriptedHuman

        assert planner._human.answer("Is the red block on the blue bowl?", obs) == "No."
        with pytest.raises(OracleAccessError, match=r"observation\.state"):
            _undeclared(ScriptedHuman)(TASK).answer("Is the red block on the blue bowl?", obs)
        with pytest.raises(OracleAccessError, match=r"task\.metadata"):
            _undeclared(ScriptedHuman)(TASK)._reference()
        return
    undeclared = _without_declarations(_im(**options))
    undeclared.reset(TASK, obs)
    with pytest.raises(OracleAccessError, match=r"observation\.state"):
        undeclared.next_step(obs, None)


def test_perfect_say_and_the_house_oracle_read_through_the_gate():
    from groundplan.rollout.episode import run_episode

    env = ToyEnv()
    task = env.tasks()[0]
    perfect = PLANNERS.get("saycanpay")(lm=FakeLM(), affordance=None, score="say", perfect_say=True, oracle=True,
                                        num_candidates=3, num_groups=3)
    assert run_episode(perfect, env, task, 0, max_steps=3).error is None
    trace = run_episode(_without_declarations(PLANNERS.get("saycanpay")(
        lm=FakeLM(), affordance=None, score="say", perfect_say=True, oracle=True, num_candidates=3, num_groups=3)),
        env, task, 0, max_steps=3)
    assert trace.error is not None and "OracleAccessError" in trace.error and "task.reference_plan" in trace.error
    house_task = Task("h/0", "Find a Laptop.", "fam", goal={"target_ids": [0]}, metadata={"house_seed": 0})
    with pytest.raises(OracleAccessError, match=r"task\.metadata"):
        _without_declarations(PLANNERS.get("house_oracle")()).reset(house_task, OBS)


# ------------------------------------------------------------------------------------ env helpers
def test_every_expert_declares_what_it_reads_and_its_planner_reports_it():
    from groundplan.envs.experts import EXPERT_DECLARATIONS, EXPERTS, expert_declaration
    from groundplan.rollout.trajectory import ExpertPlanner

    assert set(EXPERTS.names()) == set(EXPERT_DECLARATIONS), "declare what the new expert reads"
    for name in EXPERTS.names():
        d = expert_declaration(name)
        assert d.is_oracle and d.reads and d.name == "expert"
    from groundplan.envs.experts import ReferencePlanExpert

    planner = ExpertPlanner(ReferencePlanExpert(ToyEnv()), "done", expert_declaration("kitchen"))
    assert planner.declarations == (EXPERT_DECLARATIONS["kitchen"],) and planner.oracles == ("expert",)


def test_the_scene_description_helper_declares_the_true_poses():
    from groundplan.perception.scene_description import SCENE_FROM_TRUE_POSES

    assert SCENE_FROM_TRUE_POSES.reads == {Truth.STATE} and SCENE_FROM_TRUE_POSES.stands_in


@pytest.mark.parametrize("name,env_name,options", [
    ("kitchen", "kitchen", {"mode": "language"}),
    ("virtualhome_eai", "virtualhome_eai", {"ids": ["27_2"], "task_set": "full"})])
def test_experts_play_under_their_declarations_alone(name, env_name, options):
    """Collection plays an expert through the episode loop, which hands it only what its entry in
    EXPERT_DECLARATIONS names: the gold-program expert finds its program through the task's start state."""
    if env_name == "virtualhome_eai":
        pytest.importorskip("virtualhome_eval")
    from groundplan.envs import ENVS
    from groundplan.envs.experts import EXPERTS, expert_declaration
    from groundplan.rollout.trajectory import ExpertPlanner, run_trajectory

    env = ENVS.get(env_name)(**options)
    planner = ExpertPlanner(EXPERTS.get(name)(env), env.done_skill, expert_declaration(name))
    row = run_trajectory(env, env.tasks()[0], 0, planner, source=name, split="train", traj_id="t", max_steps=40)
    assert row["success"] and row["actions"][-1] == env.done_skill


# ------------------------------------------------------------------------------------ traces and tables
def test_traces_record_the_planners_declarations_and_old_traces_still_load():
    from groundplan.grounding.saycan import LanguageSimAffordance
    from groundplan.rollout.episode import run_episode

    env = ToyEnv()
    planner = PLANNERS.get("saycan")(lm=FakeLM.following(list(ToyEnv.REFERENCE) + ["done"]),
                                     affordance=LanguageSimAffordance())
    trace = run_episode(planner, env, env.tasks()[0], 0, max_steps=6)
    assert trace.error is None and trace.oracles == [LanguageSimAffordance.declaration.to_dict()]
    again = EpisodeTrace.from_dict(json.loads(trace.to_json()))
    assert again.oracles == trace.oracles
    old = trace.to_dict()
    del old["oracles"]
    assert EpisodeTrace.from_dict(old).oracles is None  # written before traces recorded declarations
    clean = run_episode(PLANNERS.get("saycan_novf")(lm=FakeLM.following(["done"])), env, env.tasks()[0], 0)
    assert clean.oracles == []


def _zeroshot_traces(record: bool) -> list[EpisodeTrace]:
    """One trace per method of configs/zeroshot_virtualhome.yaml (its first grid variant), as a sweep
    writes them (``record``) or as traces were written before they recorded declarations."""
    from groundplan.config import load_config

    firsts: dict[str, Any] = {}
    for p in load_config("configs/zeroshot_virtualhome.yaml").planners:
        firsts.setdefault(p.group or p.display, p)
    out = []
    for p in firsts.values():
        label = p.display if record else (p.label or p.name)
        out.append(EpisodeTrace(f"{label}|t", label, "virtualhome", "t", "fam", "x", 0, "fake",
                                steps=[StepTrace(0, "done", True)], execution_success=True,
                                metrics={"executability": 1.0, "lcs": 0.5},
                                oracles=[d.to_dict() for d in p.declarations] if record else None))
    return out


def test_the_zeroshot_table_marks_saycan_from_its_declaration():
    from groundplan.evaluation.summary import render_metric_table, render_text, summarize

    out = render_text(render_metric_table(summarize(_zeroshot_traces(record=True)), ["executability", "lcs"], "zs"))
    saycan = next(line for line in out.splitlines() if line.startswith("│ SayCan"))
    assert f"SayCan (oracle simulator preconditions) {ORACLE_MARK}" in saycan
    assert f"{ORACLE_MARK} SayCan (oracle simulator preconditions): simulator preconditions" in " ".join(out.split())
    assert all(ORACLE_MARK not in line and STAND_IN_MARK not in line for line in out.splitlines()
               if line.startswith(("│ Vanilla", "│ Translated", "│ No-", "│ Fixed")))


def test_the_mark_comes_from_the_declaration_not_the_label(tmp_path):
    """A row whose label says nothing is marked when it declared an oracle, and a label that says "oracle"
    is not marked (nor sorted last) when it declared none."""
    from groundplan.evaluation.saycanpay import render, table_rows, with_cost_effectiveness

    def t(planner: str, declared: list[OracleDeclaration]) -> EpisodeTrace:
        return EpisodeTrace(planner, planner, "kitchen", "k/0", "fam", "x", 0, "fake", steps=[StepTrace(0, "done", True)],
                            oracles=[d.to_dict() for d in declared])

    traces = with_cost_effectiveness([t("GA-SC", [PLAN_READER]), t("GA-SCP oracle-free", []), t("GA-Say", [])], {})
    rows = table_rows(traces)
    assert [r.planner for r in rows] == ["GA-Say", "GA-SCP oracle-free", "GA-SC"]  # the declared oracle last
    text = render(rows, "t")
    assert f"| GA-SC {ORACLE_MARK} |" in text and "| GA-SCP oracle-free |" in text
    assert f"{ORACLE_MARK} GA-SC: reference plan: reads the reference plan (reads task.reference_plan)" in text


def test_old_traces_take_their_planners_declarations_from_the_config(tmp_path):
    """``groundplan tables`` on a zeroshot run written before traces recorded declarations, its SayCan
    row labelled plain "SayCan": the config's declaration marks it."""
    pytest.importorskip("virtualhome_eval")
    import yaml

    from groundplan.evaluation.tables import run_tables

    run = tmp_path / "zeroshot_virtualhome"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(yaml.safe_load(open("configs/zeroshot_virtualhome.yaml"))))
    (run / "traces.jsonl").write_text("".join(json.dumps({k: v for k, v in tr.to_dict().items() if k != "oracles"}) + "\n"
                                              for tr in _zeroshot_traces(record=False)))
    out = run_tables([run])
    assert f"SayCan {ORACLE_MARK}" in out and "simulator preconditions" in " ".join(out.split())


# ------------------------------------------------------------------------------------ the gate at run time
class PerceivingToyEnv(ToyEnv):
    """The toy kitchen with a percept beside its hidden state, a scene text and an env record of each step
    (as the tabletop's true final pose), on a task that holds every kind of truth."""

    TASK = Task("toy-coke", "bring me a coke can", "nl_nouns", goal={"coke": "user"}, reference_plan=ToyEnv.REFERENCE,
                metadata={"subgoals": ["The coke is with the user."]}, start_state={"robot": "start"})

    def _observe(self) -> Observation:
        return Observation(skills=list(self.SKILLS), state={**self.state, "detected": ["coke can"]}, text="a kitchen")

    def execute(self, skill: str):
        result = super().execute(skill)
        result.info["coke_at"] = self.state["coke"]
        return result


class Plugin(Planner):
    """A third-party planner that declares nothing and reads what it is handed directly, never through
    ``truth.read``: ``peek`` names what it reaches for (None: only the instruction, skills, text and
    percepts it may read)."""

    name = "plugin"
    max_steps = 3

    def __init__(self, peek: str | None = None) -> None:
        self.peek = peek
        self.seen: dict[str, Any] = {}

    def reset(self, task: Task, observation: Observation, seed: int = 0) -> None:
        self.seen = {"instruction": task.instruction, "skills": list(observation.skills), "text": observation.text,
                     "detected": percept(observation, "detected")}
        peeks = {"goal": lambda: task.goal["coke"], "reference_plan": lambda: list(task.reference_plan),
                 "metadata": lambda: task.metadata.get("subgoals"), "start_state": lambda: task.start_state or {},
                 "goal is set": lambda: bool(task.goal)}
        if self.peek in peeks:
            self.seen[self.peek] = peeks[self.peek]()

    def next_step(self, observation: Observation, last: Any):
        from groundplan.core.types import Decision

        peeks = {"state item": lambda: observation.state["coke"], "state attribute": lambda: observation.state.coke,
                 "state get": lambda: observation.state.get("robot"), "state contains": lambda: "coke" in observation.state}
        if self.peek in peeks:
            self.seen[self.peek] = peeks[self.peek]()
        if last is not None:
            self.seen["info"] = dict(last.info)
            self.seen["success"] = last.success
        return Decision(skill="done", done=True) if last is not None else Decision(skill="find a coke can", done=False)


class DeclaredPlugin(Plugin):
    """The same plugin under a declaration of every truth, reading them through the gate."""

    declarations = (OracleDeclaration("everything", frozenset(Truth), "reads every truth"),)

    def reset(self, task: Task, observation: Observation, seed: int = 0) -> None:
        super().reset(task, observation, seed)
        self.seen["goal"] = read(task, Truth.GOAL, self)
        self.seen["metadata"] = read(task, Truth.METADATA, self)

    def next_step(self, observation: Observation, last: Any):
        self.seen["state"] = read(observation, Truth.STATE, self)
        return super().next_step(observation, last)


def _run(planner: Any):
    from groundplan.rollout.episode import run_episode

    env = PerceivingToyEnv()
    return run_episode(planner, env, env.TASK, 0)


@pytest.mark.parametrize("peek,where", [
    ("goal", "task.goal"), ("reference_plan", "task.reference_plan"), ("metadata", "task.metadata"),
    ("start_state", "task.start_state"), ("goal is set", "task.goal"), ("state item", "field 'coke'"),
    ("state attribute", "field 'coke'"), ("state get", "field 'robot'"), ("state contains", "field 'coke'")])
def test_an_undeclared_plugin_is_not_handed_the_truth(peek, where):
    """A planner that declares nothing and reads the task's goal (or any of its truth) or the hidden state
    directly, around the gate, gets OracleAccessError in the episode's trace, not the truth."""
    plugin = Plugin(peek)
    trace = _run(plugin)
    assert trace.error is not None and trace.error.startswith("OracleAccessError") and where in trace.error
    assert "withheld" in trace.error and peek not in plugin.seen
    assert trace.execution_success is False  # the env and its judge had the real task


def test_an_undeclared_plugin_still_gets_what_it_may_read_and_a_declared_one_gets_the_truth():
    honest = Plugin()
    trace = _run(honest)
    assert trace.error is None and trace.steps[-1].done
    assert honest.seen == {"instruction": "bring me a coke can", "skills": ToyEnv.SKILLS, "text": "a kitchen",
                           "detected": ["coke can"], "info": {}, "success": True}  # the env's record withheld
    assert trace.steps[0].info["env"] == {"coke_at": "table"}  # ... which the trace keeps
    declared = DeclaredPlugin()
    trace = _run(declared)
    assert trace.error is None and declared.seen["goal"] == {"coke": "user"}
    assert declared.seen["metadata"] == PerceivingToyEnv.TASK.metadata and declared.seen["state"]["coke"] == "table"
    assert declared.seen["info"] == {"coke_at": "table"}


def test_what_a_withholding_hands_each_declaration():
    from groundplan.core.truth import PerceptView, Withheld, Withholding

    task = PerceivingToyEnv.TASK
    plan_only = Withholding.of(type("R", (Sneaky,), {"declaration": PLAN_READER})(Truth.REFERENCE_PLAN)).task(task)
    assert plan_only.reference_plan == task.reference_plan and isinstance(plan_only.goal, Withheld)
    assert (plan_only.task_id, plan_only.instruction, plan_only.family) == (task.task_id, task.instruction, task.family)
    assert repr(plan_only.goal) == "<withheld: task.goal>" and plan_only.goal is not None
    assert Withholding(frozenset({Truth.SIMULATOR})).task(task) is task  # a private simulator replays it whole
    everything = Withholding(frozenset(Truth))
    assert everything.task(task) is task and everything.observation(OBS) is OBS
    view = Withholding(frozenset()).observation(Observation(skills=["x"], state=TabletopState(), text="t"))
    assert isinstance(view.state, PerceptView) and dict(view.state) == {"detected": ["red block", "blue bowl"]}
    assert percept(view, "detected") == ["red block", "blue bowl"] and percept(view, "pose", 7) == 7
    assert getattr(view.state, "room", None) is None  # a percept the state lacks is absent, not refused
    with pytest.raises(OracleAccessError, match="'positions' is withheld"):
        getattr(view.state, "positions", {})
    import copy
    import pickle

    assert pickle.loads(pickle.dumps(view.state)) == view.state and copy.deepcopy(plan_only).goal.where == "task.goal"
