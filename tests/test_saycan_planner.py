"""SayCan (Algorithm 1), its No-VF and Generative baselines (Sec. 5.5) and the Listing 1 prompt."""
from __future__ import annotations

import math
import warnings

import pytest
from fakes import FakeLM, FixedAffordance, ToyAffordance, ToyEnv

from groundplan.core.errors import InvalidInputError
from groundplan.core.types import Observation, Task
from groundplan.llm.base import LanguageModel
from groundplan.planners import PLANNERS
from groundplan.planners.prompt_files import available_prompts, load_prompt
from groundplan.planners.saycan import GenerativePlanner, SayCanConfig, SayCanPlanner

SKILLS = ToyEnv.SKILLS
TASK = ToyEnv().tasks()[0]
OBS = Observation(skills=list(SKILLS))


def make_saycan(lm: FakeLM, affordance=None, **options) -> SayCanPlanner:
    planner = SayCanPlanner(lm, affordance if affordance is not None else FixedAffordance(), **options)
    planner.reset(TASK, OBS)
    return planner


def test_fake_lm_satisfies_the_protocol() -> None:
    """The stand-in the planner tests rely on has the protocol's methods and answers as its doc says: one
    score per option, in order, from its table or ``default_token_logprob`` per whitespace token."""
    lm = FakeLM({"find a coke can": -1.5}, default_token_logprob=-2.0)
    assert isinstance(lm, LanguageModel)
    scores = lm.score("Robot: 1.", [" find a coke can", " pick up the coke can", " done"])
    assert [(s.option, s.logprob_sum, s.num_tokens) for s in scores] == [
        (" find a coke can", -1.5, 4), (" pick up the coke can", -10.0, 5), (" done", -2.0, 1)]
    assert [s.logprob_mean for s in scores] == pytest.approx([-1.5 / 4, -2.0, -2.0])
    assert lm.score_batch([("Robot: 1.", [" done"])]) == [[scores[2]]]
    assert lm.score_calls == [("Robot: 1.", [" find a coke can", " pick up the coke can", " done"]),
                              ("Robot: 1.", [" done"])]


def test_prompt_file_is_listing_1() -> None:
    text = load_prompt("saycan_kitchen")
    assert "saycan_kitchen" in available_prompts()
    assert text.startswith(
        "Robot: Hi there, I'm a robot operating in an office kitchen.\n"
        "Robot: You can ask me to do various tasks and I'll tell you the sequence of actions I would do "
        "to accomplish your task.\nHuman: How would you hold the snickers?\nRobot: 1. pick up the snickers, 2. done.\n"
    )
    lines = text.splitlines()
    humans, robots = lines[2::2], lines[3::2]
    assert len(humans) == len(robots) == 16  # NOTES.md: the listing has 16 examples
    assert all(h.startswith("Human: ") for h in humans) and all(r.startswith("Robot: 1. ") for r in robots)
    assert "5. find an dried fruit," in text and "8. tell you I'm done." in text  # the paper's own typos
    assert text.isascii() and text.endswith("9. done.\n")


def test_prompt_after_two_steps_matches_listing_format() -> None:
    lm = FakeLM.following(ToyEnv.REFERENCE)
    planner = make_saycan(lm)
    first = planner.next_step(OBS, None)
    second = planner.next_step(OBS, None)
    assert (first.skill, second.skill) == ("find a coke can", "pick up the coke can")
    assert first.prompt_delta == " find a coke can, 2." and second.prompt_delta == " pick up the coke can, 3."
    assert planner.prompt == (
        load_prompt("saycan_kitchen")
        + "Human: bring me a coke can\nRobot: 1. find a coke can, 2. pick up the coke can, 3."
    )
    assert planner.history == ["find a coke can", "pick up the coke can"]


def test_done_closes_the_answer_like_the_listing() -> None:
    planner = make_saycan(FakeLM({"done": 0.0}))
    decision = planner.next_step(OBS, None)
    assert decision.done and decision.skill == "done" and decision.prompt_delta == " done."
    assert planner.prompt.endswith("Human: bring me a coke can\nRobot: 1. done.")
    with pytest.raises(RuntimeError, match="reset"):
        planner.next_step(OBS, None)


def test_combined_is_llm_plus_log_affordance_and_zero_affordance_is_never_chosen() -> None:
    lm = FakeLM({"put down the coke can": -0.1, "pick up the coke can": -3.0, "find a coke can": -2.0})
    affordance = FixedAffordance({"put down the coke can": 0.0, "find a coke can": 0.25, "done": 0.1})
    planner = make_saycan(lm, affordance)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # log(0) must not warn
        decision = planner.next_step(OBS, None)
    by_skill = {c.skill: c for c in decision.candidates}
    assert [c.skill for c in decision.candidates] == SKILLS
    for c in decision.candidates:
        expected = c.llm + math.log(c.affordance) if c.affordance > 0 else -math.inf
        assert c.combined == pytest.approx(expected)
    assert by_skill["put down the coke can"].combined == -math.inf
    # LLM argmax is "put down" (affordance 0); "pick up" -3 + log 1 beats "find" -2 + log .25 = -3.39
    assert decision.skill == "pick up the coke can"
    assert by_skill["find a coke can"].affordance == 0.25


def test_ties_go_to_the_first_skill() -> None:
    planner = make_saycan(FakeLM(default_token_logprob=0.0))  # every option scores 0
    assert planner.next_step(OBS, None).skill == SKILLS[0]


def test_novf_picks_llm_argmax_even_when_its_affordance_is_zero() -> None:
    affordance = FixedAffordance({"put down the coke can": 0.0})
    planner = PLANNERS.get("saycan_novf")(lm=FakeLM({"put down the coke can": -0.1}), affordance=affordance)
    planner.reset(TASK, OBS)
    decision = planner.next_step(OBS, None)
    assert planner.name == "saycan_novf"
    assert decision.skill == "put down the coke can"
    assert all(c.affordance is None and c.combined == c.llm for c in decision.candidates)
    assert affordance.calls == 0


def test_sum_and_mean_rank_differently_where_length_matters() -> None:
    # "pick up the coke can": 5 tokens, sum -5 (mean -1); "done": 1 token, sum -2 (mean -2)
    table = {"pick up the coke can": -5.0, "done": -2.0}
    summed = make_saycan(FakeLM(table, default_token_logprob=-9.0), llm_score="sum").next_step(OBS, None)
    mean = make_saycan(FakeLM(table, default_token_logprob=-9.0), llm_score="mean").next_step(OBS, None)
    assert summed.skill == "done"
    assert mean.skill == "pick up the coke can"
    pick = next(c for c in mean.candidates if c.skill == "pick up the coke can")
    assert pick.llm == pytest.approx(-1.0) and pick.extra == {"logprob_sum": -5.0, "logprob_mean": -1.0, "num_tokens": 5}


def test_exactly_one_score_call_per_step_with_all_options() -> None:
    lm = FakeLM.following(ToyEnv.REFERENCE)
    planner = make_saycan(lm, prune=False)  # pruning (the default) scores feasible options only
    prompts = []
    for _ in range(3):
        prompts.append(planner.prompt)
        planner.next_step(OBS, None)
    assert [p for p, _ in lm.score_calls] == prompts
    assert all(options == [" " + s for s in SKILLS] for _, options in lm.score_calls)


def test_affordance_sees_history_and_gets_the_seed() -> None:
    affordance = ToyAffordance()
    planner = SayCanPlanner(FakeLM.following(ToyEnv.REFERENCE), affordance)
    planner.reset(TASK, OBS, seed=7)
    assert affordance.resets == [("toy-coke", 7)]


def test_empty_skill_list_raises() -> None:
    planner = make_saycan(FakeLM())
    with pytest.raises(InvalidInputError, match="no skills"):
        planner.next_step(Observation(skills=[]), None)


@pytest.mark.parametrize("instruction", ["", "   ", "x" * 1001])
def test_bad_instruction_raises(instruction: str) -> None:
    planner = SayCanPlanner(FakeLM(), FixedAffordance())
    with pytest.raises(InvalidInputError):
        planner.reset(Task("t", instruction, "f", goal=None), OBS)


def test_max_instruction_chars_is_configurable() -> None:
    planner = SayCanPlanner(FakeLM(), FixedAffordance(), max_instruction_chars=10)
    with pytest.raises(InvalidInputError, match="limit is 10"):
        planner.reset(TASK, OBS)


def test_unknown_or_invalid_options_raise_naming_the_field() -> None:
    with pytest.raises(InvalidInputError, match="unknown option 'llm_scor'"):
        SayCanPlanner(FakeLM(), FixedAffordance(), llm_scor="mean")
    with pytest.raises(InvalidInputError, match="option 'llm_score'"):
        PLANNERS.get("saycan")(lm=FakeLM(), affordance=FixedAffordance(), llm_score="max")
    with pytest.raises(InvalidInputError, match="option 'max_steps'"):
        SayCanPlanner(FakeLM(), FixedAffordance(), max_steps=0)
    with pytest.raises(InvalidInputError, match="saycan_kitchen"):
        GenerativePlanner(FakeLM(), prompt="no_such_prompt")


def test_config_object_and_overrides_combine() -> None:
    planner = SayCanPlanner(FakeLM(), FixedAffordance(), SayCanConfig(llm_score="mean"), max_steps=5)
    assert planner.config.llm_score == "mean" and planner.max_steps == 5


def test_saycan_needs_an_affordance_source() -> None:
    with pytest.raises(InvalidInputError, match="saycan_novf"):
        PLANNERS.get("saycan")(lm=FakeLM())


def test_registered_planner_names() -> None:
    lm = FakeLM()
    assert {"saycan", "saycan_novf", "generative"} <= set(PLANNERS.names())
    assert PLANNERS.get("saycan")(lm, FixedAffordance()).name == "saycan"
    assert PLANNERS.get("saycan_novf")(lm).name == "saycan_novf"
    assert PLANNERS.get("generative")(lm, FixedAffordance()).name == "generative"
    with pytest.raises(InvalidInputError):
        PLANNERS.get("saycan_novf")(lm, use_affordance=True)


def test_generative_projects_generated_text_to_the_nearest_skill() -> None:
    lm = FakeLM(generations=[" pick up coke", " bring it to you, 4."])
    planner = GenerativePlanner(lm)
    planner.reset(TASK, OBS)
    decision = planner.next_step(OBS, None)
    assert decision.skill == "pick up the coke can" and not decision.done
    assert decision.prompt_delta == " pick up the coke can, 2."
    assert planner.prompt.endswith("Robot: 1. pick up the coke can, 2.")
    assert decision.info["generated"] == " pick up coke"
    cosines = {c.skill: c.llm for c in decision.candidates}
    assert [c.skill for c in decision.candidates] == SKILLS
    assert max(cosines, key=cosines.get) == "pick up the coke can"
    assert all(c.affordance is None and c.combined == c.llm for c in decision.candidates)
    assert lm.generate_calls[0] | {"prompt": None} == {
        "prompt": None, "n": 1, "temperature": 0.0, "top_p": 1.0, "max_new_tokens": 16, "stop": (",", "\n"), "seed": None,
        "repetition_penalty": 1.0, "logprobs": None,
    }
    # second step: skill embeddings come from the cache, only the generated text is embedded
    assert planner.next_step(OBS, None).skill == "bring it to you"
    assert lm.embed_calls[0] == [*SKILLS, "pick up coke"] and lm.embed_calls[1] == ["bring it to you"]


def test_generative_empty_generation_means_done() -> None:
    planner = GenerativePlanner(FakeLM(generations=["\n"]))
    planner.reset(TASK, OBS)
    decision = planner.next_step(OBS, None)
    assert decision.done and decision.skill == "done" and decision.info["empty_generation"]
    assert planner.prompt.endswith("Robot: 1. done.")


def test_saycan_scores_only_admissible_skills():
    lm = FakeLM({"pick up the sponge": -0.1})
    planner = SayCanPlanner(lm, None, use_affordance=False)
    obs = Observation(skills=["pick up the sponge", "pick up the apple", "done"], admissible=[False, True, True])
    planner.reset(Task("t", "tidy up", "f", goal=None), obs)
    decision = planner.next_step(obs)
    assert [c.skill for c in decision.candidates] == ["pick up the apple", "done"]
    assert decision.skill != "pick up the sponge"


@pytest.mark.parametrize("prune_by", ["affordance", "llm"])
def test_avoid_recent_withholds_the_last_k_choices_but_never_done(prune_by: str) -> None:
    """With avoid_recent k a skill chosen in the last k steps is not scored or chosen again, whichever way the
    argmax is pruned; at 0 (Algorithm 1) the model's favourite repeats."""
    lm = FakeLM({"find a coke can": -0.1, "pick up the coke can": -0.5, "bring it to you": -0.9, "done": -9.0})

    def run(k: int) -> tuple[list[str], list[list[str]]]:
        planner = make_saycan(lm, avoid_recent=k, prune_by=prune_by)
        decisions = [planner.next_step(OBS, None) for _ in range(4)]
        return [d.skill for d in decisions], [[c.skill for c in d.candidates] for d in decisions]

    assert run(0)[0] == ["find a coke can"] * 4
    assert run(1)[0] == ["find a coke can", "pick up the coke can"] * 2
    chosen, offered = run(2)
    assert chosen == ["find a coke can", "pick up the coke can", "bring it to you", "find a coke can"]
    assert "find a coke can" not in offered[1] and "done" in offered[2]
    assert not {"find a coke can", "pick up the coke can"} & set(offered[2])


def test_avoid_recent_offers_every_skill_when_nothing_else_is_left() -> None:
    lm = FakeLM({"a": -0.1, "b": -0.2})
    obs = Observation(skills=["a", "b"])
    planner = SayCanPlanner(lm, None, use_affordance=False, avoid_recent=3)
    planner.reset(Task("t", "do it", "f", goal=None), obs)
    assert [planner.next_step(obs).skill for _ in range(3)] == ["a", "b", "a"]
