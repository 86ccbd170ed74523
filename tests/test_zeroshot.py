"""Zero-Shot Planners (translated planner, ablations, vanilla) and SayCan's option pre-filter, with FakeLM."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pytest
from fakes import FakeLM

from groundplan.core.errors import InvalidInputError
from groundplan.core.types import Observation, Task
from groundplan.grounding.action_index import (
    action_embeddings,
    action_set_hash,
    clear_memory_cache,
)
from groundplan.llm.base import Generation
from groundplan.planners import PLANNERS
from groundplan.planners.saycan import SayCanPlanner
from groundplan.planners.zeroshot import (
    make_vanilla,
    make_zeroshot,
    opening_prompt,
    parse_plan,
)

SKILLS = ["walk to bedroom", "walk to kitchen", "switch on lamp", "switch on tv", "grab cup", "done"]
DEMOS = [("Watch TV", ("walk to living room", "switch on tv")), ("Turn on light", ("walk to bedroom", "switch on lamp"))]
TASK = Task("t1", "Turn on lamp", "Turn on light", goal={})


class SampleLM(FakeLM):
    """Each generate call returns the next scripted list of (text, mean log-prob) samples."""

    def __init__(self, rounds: Sequence[Sequence[tuple[str, float]]], **kw):
        super().__init__(**kw)
        self.rounds = [list(r) for r in rounds]

    def generate(self, prompt, params):
        super().generate(prompt, params)
        samples = self.rounds.pop(0) if self.rounds else [("", -1.0)] * params.n
        return [Generation(t, lp, len(t.split()), "stop") for t, lp in samples]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch, request):
    if "virtualhome" not in request.node.name:  # the env keeps its object list in the real cache
        monkeypatch.setenv("GROUNDPLAN_CACHE_DIR", str(tmp_path))
    clear_memory_cache()
    yield
    clear_memory_cache()


def _obs():
    return Observation(skills=SKILLS)


def _run(planner, steps=10):
    planner.reset(TASK, _obs(), seed=0)
    out = []
    for _ in range(steps):
        d = planner.next_step(_obs(), None)
        out.append(d)
        if d.done:
            break
    return out


def test_registered_and_config_validated():
    assert PLANNERS.get("zeroshot") is make_zeroshot and PLANNERS.get("zeroshot_vanilla") is make_vanilla
    with pytest.raises(InvalidInputError, match="num_sampels"):
        make_zeroshot(FakeLM(), demonstrations=DEMOS, num_sampels=3)
    with pytest.raises(InvalidInputError, match="top_p"):
        make_zeroshot(FakeLM(), demonstrations=DEMOS, top_p=0)
    with pytest.raises(InvalidInputError, match="repetition_penalty"):
        make_vanilla(FakeLM(), demonstrations=DEMOS, repetition_penalty=0)


def test_translation_appends_admissible_action_and_continues_numbering():
    lm = SampleLM([[(" Switch on the lamp.", -0.5), ("turn lamp on", -2.0)], [("", -1), ("", -1)]])
    planner = make_zeroshot(lm, demonstrations=DEMOS, num_samples=2, temperature=0.3, repetition_penalty=1.2)
    decisions = _run(planner)
    assert [d.skill for d in decisions] == ["switch on lamp", "done"]
    assert decisions[0].info["samples"] == ["Switch on the lamp", "turn lamp on"]
    assert decisions[1].done and decisions[1].info["stop"] == "empty_samples"
    call = lm.generate_calls[0]
    assert call["n"] == 2 and call["top_p"] == 0.9 and call["stop"] == ("\n",) and call["temperature"] == 0.3 and call["repetition_penalty"] == 1.2
    assert planner.prompt.endswith("Task: Turn on lamp\nStep 1: Switch on lamp\nStep 2:")
    assert lm.generate_calls[1]["prompt"] == planner.prompt
    cands = decisions[0].candidates
    assert cands[0].skill == "switch on lamp" and cands[0].combined == pytest.approx(cands[0].extra["cosine"] - 0.5 * 0.3)
    assert len(cands) <= 10 and "done" not in [c.skill for c in cands]


def test_score_is_cosine_plus_beta_logprob():
    # "grab cup" matches sample A exactly but A is very unlikely; B is a weaker match but likely
    lm = SampleLM([[("grab cup", -10.0), ("switch on lamp please", -0.1)]])
    d = _run(make_zeroshot(lm, demonstrations=DEMOS, num_samples=2, epsilon=None), steps=1)[0]
    assert d.skill == "switch on lamp"
    lm = SampleLM([[("grab cup", -10.0), ("switch on lamp please", -0.1)]])
    d = _run(make_zeroshot(lm, demonstrations=DEMOS, num_samples=2, beta=0.0, epsilon=None), steps=1)[0]
    assert d.skill == "grab cup"


def test_terminates_below_epsilon_and_at_max_steps():
    lm = SampleLM([[("xyzzy plugh", -0.1)]])
    d = _run(make_zeroshot(lm, demonstrations=DEMOS, num_samples=1, epsilon=0.4))
    assert d[-1].done and d[-1].info["stop"] == "below_epsilon" and len(d) == 1
    lm = SampleLM([[("walk to bedroom", -0.1)], [("grab cup", -0.1)], [("grab cup", -0.1)]])
    d = _run(make_zeroshot(lm, demonstrations=DEMOS, num_samples=1, max_steps=2))
    assert [x.skill for x in d] == ["walk to bedroom", "grab cup", "done"] and d[-1].info["stop"] == "max_steps"


def test_repeat_penalty_moves_off_the_previous_action():
    lm = SampleLM([[("switch on lamp", -0.1)], [("switch on lamp", -0.1)]])
    d = _run(make_zeroshot(lm, demonstrations=DEMOS, num_samples=1), steps=2)
    assert d[0].skill == "switch on lamp" and d[1].skill != "switch on lamp"
    lm = SampleLM([[("switch on lamp", -0.1)], [("switch on lamp", -0.1)]])
    d = _run(make_zeroshot(lm, demonstrations=DEMOS, num_samples=1, repeat_penalty=0.0), steps=2)
    assert d[1].skill == "switch on lamp"


def test_dynamic_and_fixed_example():
    planner = make_zeroshot(FakeLM(), demonstrations=DEMOS)
    planner.reset(TASK, _obs())
    assert planner.example == DEMOS[1] and planner.prompt == opening_prompt(DEMOS[1], "Turn on lamp")
    assert planner.prompt.startswith("Task: Turn on light\nStep 1: Walk to bedroom\nStep 2: Switch on lamp\n\nTask: Turn on lamp")
    fixed = make_zeroshot(FakeLM(), demonstrations=DEMOS, dynamic_example=False)
    fixed.reset(TASK, _obs())
    assert fixed.example == DEMOS[0]
    named = make_zeroshot(FakeLM(), demonstrations=DEMOS, dynamic_example=False, fixed_example="Turn on light")
    named.reset(TASK, _obs())
    assert named.example == DEMOS[1]
    for make in (make_zeroshot, make_vanilla):  # a fine-tuned model's prompt: the task alone
        bare = make(FakeLM(), demonstrations=DEMOS, prompt_example=False)
        bare.reset(TASK, _obs())
        assert bare.example is None and bare.prompt == "Task: Turn on lamp\nStep 1:"
        assert bare.config.prompt_format != make(FakeLM(), demonstrations=DEMOS).config.prompt_format


def test_ablation_without_translation_emits_the_raw_sample():
    lm = SampleLM([[("turn the lamp on", -0.2), ("walk to bedroom", -3.0)]])
    planner = make_zeroshot(lm, demonstrations=DEMOS, num_samples=2, translation=False)
    d = _run(planner, steps=1)[0]
    assert d.skill == "turn the lamp on" and planner.name == "zeroshot-no_translation"


def test_ablation_without_trajectory_correction_appends_the_raw_sample():
    lm = SampleLM([[("switch on the lamp now", -0.2)]])
    planner = make_zeroshot(lm, demonstrations=DEMOS, num_samples=1, trajectory_correction=False)
    d = _run(planner, steps=1)[0]
    assert d.skill == "switch on lamp" and planner.prompt.endswith("Step 1: Switch on the lamp now\nStep 2:")


def test_vanilla_takes_the_most_likely_plan_and_emits_its_steps_verbatim():
    lm = SampleLM([[(" Walk to kitchen\nStep 2: grab cup", -2.0),
                    (" Walk to bedroom\nStep 2: Switch on lamp\nStep 3: dance wildly\n\nTask: other", -0.5)]])
    planner = make_vanilla(lm, demonstrations=DEMOS, num_samples=2, repetition_penalty=1.5)
    d = _run(planner)
    assert [x.skill for x in d] == ["Walk to bedroom", "Switch on lamp", "dance wildly", "done"]
    assert lm.generate_calls[0]["n"] == 2 and "\n\n" in lm.generate_calls[0]["stop"] and lm.generate_calls[0]["repetition_penalty"] == 1.5
    assert planner.example == DEMOS[0]  # fixed example by default


def test_parse_plan():
    assert parse_plan(" Walk to bedroom\nStep 2: Lie on bed.\nnonsense line\n\nStep 9: x") == [
        "Walk to bedroom", "Lie on bed", "nonsense line"]
    assert parse_plan("") == [] and parse_plan("\nTask: y") == []


def test_action_embeddings_are_cached_on_disk(tmp_path):
    lm = FakeLM()
    labels = SKILLS[:-1]
    first = action_embeddings(lm, labels)
    files = list((tmp_path / "embeddings").glob("*.npy"))
    assert len(files) == 1 and "fake-lm" in files[0].name
    clear_memory_cache()
    lm2 = FakeLM()
    second = action_embeddings(lm2, labels)
    assert np.array_equal(first, second)
    assert sum(len(c) for c in lm2.embed_calls) == 1  # only the probe: the matrix came from disk
    assert action_set_hash(labels) != action_set_hash(labels[::-1])
    other = FakeLM(dim=64)  # same name, different model: the stale file is not used
    clear_memory_cache()
    assert action_embeddings(other, labels).shape == (len(labels), 64)


def test_only_the_actions_an_observation_allows_are_embedded_and_other_processes_add_to_the_cache(tmp_path):
    """A row is embedded the first time an admissible mask allows it; a later process (memory cleared)
    reads those rows from disk and embeds only the ones it newly needs; rows match a full embedding."""
    from groundplan.grounding.action_index import ActionIndex

    labels = SKILLS[:-1]
    full = action_embeddings(FakeLM(), labels, use_disk=False)
    clear_memory_cache()
    lm = FakeLM()
    index = ActionIndex(lm, SKILLS, "done")
    allowed = np.array([True, False, True, False, False, True])  # aligned with SKILLS (done last)
    mask = index.ensure(allowed)
    assert mask.tolist() == [True, False, True, False, False]
    assert sorted(t for c in lm.embed_calls for t in c) == sorted(["walk to bedroom", "walk to bedroom", "switch on lamp"])
    assert np.isnan(index.matrix[[1, 3, 4]]).all() and np.allclose(index.matrix[[0, 2]], full[[0, 2]])
    clear_memory_cache()
    lm2 = FakeLM()
    later = ActionIndex(lm2, SKILLS, "done")
    assert np.allclose(later.matrix[[0, 2]], full[[0, 2]])  # from disk
    later.ensure(None)
    assert sorted(t for c in lm2.embed_calls[1:] for t in c) == ["grab cup", "switch on tv", "walk to kitchen"]
    assert np.allclose(later.matrix, full)
    clear_memory_cache()
    assert np.allclose(action_embeddings(FakeLM(), labels), full)  # the completed file


def test_two_processes_filling_one_action_set_merge_their_rows_on_disk(tmp_path):
    from groundplan.grounding.action_index import ActionEmbeddings

    labels = SKILLS[:-1]
    full = action_embeddings(FakeLM(), labels, use_disk=False)
    clear_memory_cache()
    first = ActionEmbeddings(FakeLM(), labels)
    clear_memory_cache()  # a second process: its own matrix, nothing on disk yet
    second = ActionEmbeddings(FakeLM(), labels)
    first.ensure(np.array([True, False, False, False, False]))
    second.ensure(np.array([False, False, True, False, False]))  # its save takes row 0 from the first's file
    clear_memory_cache()
    lm = FakeLM()
    merged = ActionEmbeddings(lm, labels).matrix
    assert np.allclose(merged[[0, 2]], full[[0, 2]]) and np.isnan(merged[[1, 3, 4]]).all()


def test_saycan_max_options_prefilters_by_similarity_and_keeps_done():
    lm = FakeLM()
    planner = SayCanPlanner(lm, None, use_affordance=False, max_options=3)
    planner.reset(TASK, _obs())
    decision = planner.next_step(_obs())
    scored = lm.score_calls[0][1]
    assert len(scored) == 3 and " done" in scored and " switch on lamp" in scored
    assert len(decision.candidates) == 3
    unfiltered = SayCanPlanner(FakeLM(), None, use_affordance=False)
    unfiltered.reset(TASK, _obs())
    assert len(unfiltered.next_step(_obs()).candidates) == len(SKILLS)


def test_on_virtualhome_a_bad_step_is_a_failed_step_not_a_crash():
    pytest.importorskip("virtualhome_eval")
    from groundplan.envs.virtualhome.env import VirtualHomeEnv
    from groundplan.rollout.episode import run_episode

    env = VirtualHomeEnv()
    task = next(t for t in env.tasks() if t.task_id == "11_1") if any(t.task_id == "11_1" for t in env.tasks()) else env.tasks()[0]
    lm = SampleLM([[(" Walk to bedroom\nStep 2: Teleport to the moon\nStep 3: Switch on floor lamp", -0.3)]])
    trace = run_episode(make_vanilla(lm, demonstrations=env.demonstrations(), num_samples=1), env, task, 0)
    assert trace.error is None
    steps = [s for s in trace.steps if not s.done]
    assert [s.success for s in steps][:2] == [True, False] and "no action template" in steps[1].feedback
    assert trace.metrics["executability"] == 0.0 and trace.metrics["length"] == 3.0


def test_translation_never_picks_an_action_the_scene_does_not_admit():
    """VirtualHome's shared action list covers every object of the dataset; a scene admits only the
    steps whose objects it contains (Observation.admissible)."""
    skills = ["drink water glass", "drink coffee", "walk to kitchen", "done"]
    lm = FakeLM(generations=[" drink water glass"] * 10)
    planner = make_zeroshot(lm, demonstrations=[("Drink", ["walk to kitchen", "drink coffee"])], num_samples=1)
    obs = Observation(skills=skills, admissible=np.array([False, True, True, True]))
    planner.reset(Task("t", "Drink", "f", goal=None), obs)
    decision = planner.next_step(obs)
    assert decision.skill in {"drink coffee", "walk to kitchen"}
    assert all(c.skill != "drink water glass" for c in decision.candidates)


def _fail(skill: str):
    from groundplan.core.types import StepResult
    return StepResult(False, f"{skill}: failed", _obs())


def _ok(skill: str):
    from groundplan.core.types import StepResult
    return StepResult(True, f"{skill}: done", _obs())


def test_dialog_prompt_reads_no_demonstration_and_done_samples_end_the_plan():
    lm = SampleLM([[(" [Switch on lamp]", -0.5), (" switch on lamp.", -0.6), ("done", -0.1)],
                   [(" done.", -0.2), ("done", -0.1), (" grab cup", -0.9)]])
    planner = make_zeroshot(lm, prompt="saycan_eai", num_samples=3)  # no demonstrations given: none needed
    decisions = _run(planner)
    assert planner.example is None and planner.name == "zeroshot-dialog"
    assert planner.prompt.startswith("The robot answers") and "Human: Turn on lamp\nRobot: 1. switch on lamp, 2." in planner.prompt
    assert decisions[0].info["samples"] == ["[Switch on lamp]", "switch on lamp", "done"]  # brackets kept, "." cut
    assert decisions[0].skill == "switch on lamp" and "done" not in [c.extra["sample"] for c in decisions[0].candidates]
    assert decisions[1].done and decisions[1].info["stop"] == "done_samples"
    assert lm.generate_calls[0]["stop"] == (",", "\n")
    with pytest.raises(InvalidInputError, match="unknown prompt"):
        make_zeroshot(lm, prompt="no_such_prompt")


def test_reprompt_takes_a_failed_step_back_and_bars_it_until_a_success():
    rounds = [[("switch on lamp", -0.1)], [("switch on lamp", -0.1)], [("walk to bedroom", -0.1)],
              [("switch on lamp", -0.1)]]
    planner = make_zeroshot(SampleLM(rounds), prompt="saycan_eai", num_samples=1, reprompt_on_failure=True,
                            repeat_penalty=0.0)
    planner.reset(TASK, _obs(), seed=0)
    first = planner.next_step(_obs(), None)
    opening = planner.prompt[: -len(first.prompt_delta)]
    again = planner.next_step(_obs(), _fail(first.skill))  # the lamp failed: taken back and barred
    assert first.skill == "switch on lamp" and again.skill != "switch on lamp"
    assert again.info["reprompt"] == {"failed": "switch on lamp", "barred": ["switch on lamp"]}
    assert planner.prompt == opening + again.prompt_delta and planner._history == [again.skill]
    seeds = [c["seed"] for c in planner.lm.generate_calls]
    assert seeds[0] != seeds[1]  # sampled again, not the same draw
    third = planner.next_step(_obs(), _ok(again.skill))  # a success lifts the bar
    assert third.skill == "walk to bedroom" and "reprompt" not in third.info
    fourth = planner.next_step(_obs(), _ok(third.skill))
    assert fourth.skill == "switch on lamp"
    # without re-prompting the failed step stays in the prompt (the paper's open-loop prompt)
    plain = make_zeroshot(SampleLM(rounds[:2]), prompt="saycan_eai", num_samples=1, repeat_penalty=0.0)
    plain.reset(TASK, _obs(), seed=0)
    d1 = plain.next_step(_obs(), None)
    d2 = plain.next_step(_obs(), _fail(d1.skill))
    assert d2.skill == "switch on lamp" and plain._history == ["switch on lamp", "switch on lamp"]


def test_reprompt_attempts_count_toward_max_steps_and_an_all_barred_step_ends():
    planner = make_zeroshot(SampleLM([[("grab cup", -0.1)]] * 5), prompt="saycan_eai", num_samples=1,
                            reprompt_on_failure=True, max_steps=3, epsilon=None)
    planner.reset(TASK, _obs(), seed=0)
    d = planner.next_step(_obs(), None)
    for _ in range(2):
        d = planner.next_step(_obs(), _fail(d.skill))
    assert not d.done
    end = planner.next_step(_obs(), _fail(d.skill))
    assert end.done and end.info["stop"] == "max_steps"
    skills = ["grab cup", "done"]
    lone = make_zeroshot(SampleLM([[("grab cup", -0.1)]] * 2), prompt="saycan_eai", num_samples=1,
                         reprompt_on_failure=True, epsilon=None)
    lone.reset(TASK, Observation(skills=skills), seed=0)
    d = lone.next_step(Observation(skills=skills), None)
    end = lone.next_step(Observation(skills=skills), _fail(d.skill))
    assert end.done and end.info["stop"] == "no_action_left"
