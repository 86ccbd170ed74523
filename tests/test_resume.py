"""Resume never returns stale results: an episode's id carries a hash of everything that can change its
outcome, so a rerun under a changed config runs the changed episodes."""
from __future__ import annotations

import dataclasses

import pytest

from groundplan.factory import make_env
from groundplan.pipelines.evaluate.sweep import episode_specs, run_sweep, select_tasks
from tests.fakes import FakeLM, small_kitchen_config

PLAN = ["find a coke can", "pick up the coke can", "bring it to you", "put down the coke can", "done"]


def _cfg(tmp_path, **kw):
    base = {"tasks": {"families": ["nl_nouns"], "per_family": 2}, "seeds": [0]}
    return small_kitchen_config(tmp_path, name="resume", **{**base, **kw})


@pytest.mark.parametrize("change, rerun", [
    ({"llm": {"model": "some/other-model"}}, {"SayCan", "No-VF"}),
    ({"max_steps": 4}, {"SayCan", "No-VF"}),
    ({"planners": [{"name": "saycan", "label": "SayCan", "affordance": "kitchen_value", "options": {"llm_score": "mean"}},
                   {"name": "saycan_novf", "label": "No-VF"}]}, {"SayCan"}),
    ({"planners": [{"name": "saycan", "label": "SayCan", "affordance": "kitchen_value",
                    "affordance_options": {"completed_cap": 0.2}}, {"name": "saycan_novf", "label": "No-VF"}]}, {"SayCan"}),
    ({"env": {"name": "kitchen", "options": {"nav_failure_prob": 0.5}}}, {"SayCan", "No-VF"}),
], ids=["llm.model", "max_steps", "planner options", "affordance options", "env options"])
def test_a_changed_config_under_an_old_output_folder_runs_what_changed(tmp_path, change, rerun):
    """Episodes whose outcome can change run again; the unchanged planner's episodes resume."""
    first = run_sweep(_cfg(tmp_path), lm=FakeLM.following(PLAN), progress=False)
    n = len(first.traces)
    k = sum(t.planner in rerun for t in first.traces)
    changed = run_sweep(_cfg(tmp_path, **change), lm=FakeLM.following(PLAN), progress=False)
    assert changed.stats["episodes_run"] == k and changed.skipped == n - k and changed.stale == k
    old = {t.episode_id: t for t in first.traces}
    for t in changed.traces:
        assert (t.episode_id in old) == (t.planner not in rerun)
    assert all(t.config_hash == changed.config.hash() for t in changed.traces if t.planner in rerun)
    # the changed sweep, rerun, resumes itself and still reports only its own episodes
    again = run_sweep(_cfg(tmp_path, **change), lm=FakeLM.following(PLAN), progress=False)
    assert again.skipped == n and [t.episode_id for t in again.traces] == [t.episode_id for t in changed.traces]


def test_the_task_content_is_part_of_the_episode_id(tmp_path):
    cfg = _cfg(tmp_path)
    tasks = select_tasks(make_env(cfg.env), cfg)
    edited = [dataclasses.replace(tasks[0], goal={"edited": True}), *tasks[1:]]
    ids, edited_ids = (
        [s.episode_id for s in episode_specs(cfg, ts)] for ts in (tasks, edited)
    )
    changed = [a != b for a, b in zip(ids, edited_ids)]
    assert changed == [s.task.task_id == tasks[0].task_id for s in episode_specs(cfg, tasks)]


def test_unchanged_runtime_or_output_settings_keep_the_ids(tmp_path):
    a = _cfg(tmp_path)
    b = _cfg(tmp_path / "elsewhere", runtime={"executor": "local", "mlflow": False, "workers": 9})
    tasks = select_tasks(make_env(a.env), a)
    assert [s.episode_id for s in episode_specs(a, tasks)] == [s.episode_id for s in episode_specs(b, tasks)]


def test_traces_of_another_config_are_moved_aside_and_never_reported(tmp_path):
    """A narrower task selection under the same folder: the unselected episodes' traces leave
    ``traces.jsonl`` (so ``groundplan tables`` and every other reader see only this config's episodes),
    are kept in ``traces.other.jsonl``, and come back, without running again, when selected again."""
    from groundplan.evaluation.tables import run_tables
    from groundplan.rollout.traces import read_traces

    wide = run_sweep(_cfg(tmp_path), lm=FakeLM.following(PLAN), progress=False)
    run_dir = wide.run_dir
    narrow = run_sweep(_cfg(tmp_path, tasks={"families": ["nl_nouns"], "per_family": 1}), lm=FakeLM.following(PLAN),
                       progress=False)
    assert narrow.stats["episodes_run"] == 0 and narrow.stale == len(wide.traces) - len(narrow.traces) > 0
    on_disk = [t.episode_id for t in read_traces(run_dir / "traces.jsonl")]
    assert on_disk == [t.episode_id for t in narrow.traces]
    aside = {t.episode_id for t in read_traces(run_dir / "traces.other.jsonl")}
    assert aside == {t.episode_id for t in wide.traces} - set(on_disk)
    table = run_tables([run_dir])
    per_planner = len(narrow.traces) // 2
    assert f"(n={per_planner} shared episodes)" in table and f"(n={len(wide.traces) // 2} shared" not in table
    back = run_sweep(_cfg(tmp_path), lm=FakeLM.following(PLAN), progress=False)
    assert back.stats["episodes_run"] == 0 and back.stale == 0
    assert sorted(t.episode_id for t in read_traces(run_dir / "traces.jsonl")) == sorted(t.episode_id for t in wide.traces)
    assert not list(read_traces(run_dir / "traces.other.jsonl"))
