"""The trace viewer in headless Chromium (Selenium): open a sweep, filter, click an episode, and check
what is shown; one screenshot per view (to docs/viewer-*.png with GROUNDPLAN_REFRESH_DOCS=1)."""
from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from groundplan.core.stats import wilson_interval as wilson
from groundplan.pipelines.evaluate.sweep import run_sweep
from groundplan.rollout.frames import png_bytes, write_frames
from groundplan.viewer.data import ViewerData
from groundplan.viewer.server import make_server
from tests.conftest import require_in_ci
from tests.fakes import FakeLM, small_kitchen_config

#: where the browser test saves its screenshots: a temporary folder, or docs/ (the pictures the docs show)
#: when GROUNDPLAN_REFRESH_DOCS=1, so that a test run never rewrites files of the checkout by itself
DOCS = Path(__file__).resolve().parent.parent / "docs"
PLAN = ["find a coke can", "pick up the coke can", "bring it to you", "put down the coke can", "done"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("outputs")
    cfg = small_kitchen_config(out, name="kitchen_demo", tasks={"families": ["nl_nouns", "nl_single_primitive"], "per_family": 3},
                               seeds=[0], max_steps=6)
    result = run_sweep(cfg, lm=FakeLM.following(PLAN), progress=False)
    first = result.traces[0]
    frames = []
    for k in range(len(first.steps) + 1):  # synthetic top-down frames (the kitchen renders none)
        img = np.full((48, 64, 3), 235, dtype=np.uint8)
        img[8:40, 4 + 10 * k: 14 + 10 * k] = (200, 60, 40)
        frames.append((k, png_bytes(img)))
    write_frames(result.run_dir, first.episode_id, frames)
    return result


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two sweeps of the same episodes in one folder: A follows the whole plan, B stops after two skills."""
    out = tmp_path_factory.mktemp("compare")
    tasks = {"families": ["nl_nouns", "nl_single_primitive"], "per_family": 3}
    for name, plan in (("run_a", PLAN), ("run_b", [*PLAN[:2], "done"])):
        run_sweep(small_kitchen_config(out, name=name, tasks=tasks, seeds=[0], max_steps=6), lm=FakeLM.following(plan),
                  progress=False)
    return out


def test_compare_data_is_groundplan_compare(two_runs):
    from groundplan.core.errors import InvalidInputError
    from groundplan.evaluation.compare import compare_folders

    data = ViewerData(two_runs)
    got = data.compare("run_a", "run_b")
    want, _ = compare_folders(two_runs / "run_a", two_runs / "run_b")
    assert got["planners"] == want["planners"] and got["n_shared"] == want["n_shared"] == 12
    assert (got["run_a"], got["run_b"]) == ("run_a", "run_b")
    with pytest.raises(KeyError):
        data.compare("run_a", "../run_b")
    other = small_kitchen_config(two_runs, name="run_c", tasks={"families": ["structured"], "per_family": 1}, seeds=[0])
    run_sweep(other, lm=FakeLM.following(PLAN), progress=False)
    with pytest.raises(InvalidInputError, match="share no episode"):
        data.compare("run_a", "run_c")
    (two_runs / "run_c" / "traces.jsonl").unlink()  # leave the folder as the browser test expects it


def test_data_side(sweep):
    data = ViewerData(sweep.run_dir.parent)
    assert [r["name"] for r in data.runs()] == ["kitchen_demo"]
    run = data.run_data("kitchen_demo")
    assert len(run["traces"]) == len(sweep.traces) and run["summary"]
    all_rows = [r for r in run["table"] if r["family"] == "all"]
    assert {r["planner"] for r in all_rows} == {"SayCan", "No-VF"}
    row = all_rows[0]
    ex = row["execution_success"]
    assert (ex["lo"], ex["hi"]) == pytest.approx(wilson(ex["k"], ex["n"]))
    assert "Infinity" not in data.run_json("kitchen_demo")
    with pytest.raises(KeyError):
        data.frame_path("kitchen_demo", "..", "0.png")
    with pytest.raises(KeyError):
        data.run_data("../etc")
    assert wilson(0, 0) == (0.0, 1.0) and wilson(5, 10)[0] == pytest.approx(0.2366, abs=1e-3)


def chromium_and_driver() -> tuple[str | None, str | None]:
    """Chromium and ChromeDriver as found on ``PATH`` (the README's test command installs both there:
    Debian's ``chromium``, ``chromium-driver``; other systems name the browser ``chromium-browser``)."""
    return shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")


def test_the_browser_and_its_driver_are_looked_up_on_path(tmp_path, monkeypatch):
    """Wherever ``PATH`` puts them, not at a fixed /usr/bin path."""
    for name in ("chromium-browser", "chromedriver"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert chromium_and_driver() == (str(tmp_path / "chromium-browser"), str(tmp_path / "chromedriver"))
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert chromium_and_driver() == (None, None)


@pytest.fixture(scope="module")
def browser():
    chromium, chromedriver = chromium_and_driver()
    if chromium is None or chromedriver is None:
        require_in_ci("no Chromium and ChromeDriver on PATH (Debian: apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(chromedriver), options=opts)
    yield driver
    driver.quit()


def test_viewer_compares_two_runs_in_a_browser(two_runs, browser, tmp_path):
    shots = DOCS if os.environ.get("GROUNDPLAN_REFRESH_DOCS") == "1" else tmp_path
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from groundplan.evaluation.compare import compare_folders

    want, _ = compare_folders(two_runs / "run_a", two_runs / "run_b")
    server = make_server(two_runs, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        wait = WebDriverWait(browser, 30)
        browser.get(f"http://127.0.0.1:{server.server_address[1]}/")
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr.episode-row")) == 12)
        assert not browser.find_element(By.ID, "comparison").is_displayed()
        Select(browser.find_element(By.ID, "compare")).select_by_value("run_b")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#compare-table tr.compare-row"))
        text = browser.find_element(By.ID, "comparison").text
        assert "A = run_a vs B = run_b" in text and "12 shared episodes" in text
        rows = browser.find_elements(By.CSS_SELECTOR, "#compare-table tr.compare-row")
        tests = [t for p in want["planners"] for t in (p["tests"] or [None])]
        assert len(rows) == len(tests)
        first = want["planners"][0]
        assert rows[0].text.startswith(first["planner"]) and f"({first['success']['a']['successes']}/" in rows[0].text
        browser.save_screenshot(str(shots / "viewer-compare.png"))
        Select(browser.find_element(By.ID, "compare")).select_by_value("")
        wait.until(lambda d: not d.find_element(By.ID, "comparison").is_displayed())
    finally:
        server.shutdown()
        server.server_close()


def test_viewer_in_a_browser(sweep, browser, tmp_path):
    shots = DOCS if os.environ.get("GROUNDPLAN_REFRESH_DOCS") == "1" else tmp_path
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    server = make_server(sweep.run_dir.parent, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        wait = WebDriverWait(browser, 30)
        browser.get(f"http://127.0.0.1:{server.server_address[1]}/")
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr.episode-row")) == len(sweep.traces))
        summary = browser.find_elements(By.CSS_SELECTOR, "tr.summary-row")
        assert len(summary) == 6 and "[" in summary[0].text  # 2 planners x (2 families + all), with intervals
        browser.save_screenshot(str(shots / "viewer-sweep.png"))

        Select(browser.find_element(By.ID, "filter-planner")).select_by_visible_text("SayCan")
        Select(browser.find_element(By.ID, "filter-success")).select_by_value("true")
        rows = browser.find_elements(By.CSS_SELECTOR, "tr.episode-row")
        expected = [t for t in sweep.traces if t.planner == "SayCan" and t.execution_success]
        assert len(rows) == len(expected) > 0
        assert all("SayCan" in r.text and "success" in r.text for r in rows)
        browser.save_screenshot(str(shots / "viewer-filtered.png"))

        Select(browser.find_element(By.ID, "filter-success")).select_by_value("")
        Select(browser.find_element(By.ID, "filter-planner")).select_by_value("")
        first = sweep.traces[0]
        browser.find_element(By.CSS_SELECTOR, f"tr.episode-row[data-id='{first.episode_id}']").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#frames img[src^='blob:']")) == len(first.steps) + 1)
        chips = browser.find_elements(By.CSS_SELECTOR, "#timeline .chip")
        assert [c.text.split(". ", 1)[1] for c in chips] == [s.chosen for s in first.steps]
        goal = browser.find_element(By.ID, "goal").text
        assert ("success" if first.execution_success else "failure") in goal
        assert len(browser.find_elements(By.CSS_SELECTOR, ".step svg.scores")) == len(first.steps)
        assert browser.find_elements(By.CSS_SELECTOR, ".step svg .bar-1")  # SayCan: affordance bars drawn
        deltas = [e.get_attribute("textContent") for e in browser.find_elements(By.CSS_SELECTOR, ".prompt-delta")]
        assert deltas == [s.prompt_delta for s in first.steps if s.prompt_delta]
        assert [e.text.removeprefix("feedback: ") for e in browser.find_elements(By.CSS_SELECTOR, ".feedback")] == \
            [s.feedback for s in first.steps if s.feedback]
        browser.save_screenshot(str(shots / "viewer-episode.png"))
    finally:
        server.shutdown()
        server.server_close()


def test_serve_app_mounts_the_viewer_behind_its_token(two_runs):
    from fastapi.testclient import TestClient

    from groundplan.serve.api import build_api
    from groundplan.serve.config import ServeConfig
    from groundplan.serve.local import LocalBackend

    cfg = ServeConfig(viewer_dir=str(two_runs))
    c = TestClient(build_api(cfg, LocalBackend(cfg, FakeLM()), token="t0k"))
    auth = {"Authorization": "Bearer t0k"}
    assert c.get("/").status_code == 200 and "compare" in c.get("/").text  # the page itself holds no data
    assert c.get("/viewer/api/compare/run_a/run_b").status_code == 401
    r = c.get("/viewer/api/compare/run_a/run_b", headers=auth)
    assert r.status_code == 200 and r.json() == ViewerData(two_runs).compare("run_a", "run_b")
    assert c.get("/viewer/api/compare/run_a/nope", headers=auth).status_code == 404
    assert [x["name"] for x in c.get("/viewer/api/runs", headers=auth).json()] == ["run_a", "run_b"]


def test_viewer_shows_an_eai_episode_with_its_error_type(browser, tmp_path_factory, tmp_path):
    """An episode of EAI's closed-loop env whose steps the executor refuses: the viewer names each failing
    step's error type (the env's ``info["error"]``, EAI's executor error) beside its outcome."""
    pytest.importorskip("virtualhome_eval")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from groundplan.config import EvalConfig

    shots = DOCS if os.environ.get("GROUNDPLAN_REFRESH_DOCS") == "1" else tmp_path
    out = tmp_path_factory.mktemp("eai_view")
    cfg = EvalConfig.model_validate({
        "name": "eai_view", "env": {"name": "virtualhome_eai", "options": {"ids": ["57_1"]}},
        "planners": [{"name": "saycan_novf", "label": "LM scoring",
                      "options": {"prompt": "saycan_eai", "max_instruction_chars": 20000}}],
        "seeds": [0], "max_steps": 3, "output_dir": str(out), "runtime": {"executor": "local", "mlflow": False}})
    # the LM prefers grabbing, which fails far from the object (EAI's executor: a missing step)
    lm = FakeLM(lambda prompt, option: -1.0 if option.strip().startswith("[GRAB]") else -20.0)
    result = run_sweep(cfg, lm=lm, progress=False)
    trace = result.traces[0]
    failed = [s for s in trace.steps if not s.done and not s.success]
    assert failed and all(s.info["env"].get("error") for s in failed)
    server = make_server(out, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        wait = WebDriverWait(browser, 30)
        browser.get(f"http://127.0.0.1:{server.server_address[1]}/")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.episode-row"))
        browser.find_element(By.CSS_SELECTOR, f"tr.episode-row[data-id='{trace.episode_id}']").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".step .error-type"))
        shown = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".step .error-type")]
        assert shown == [f"· error type: {s.info['env']['error']}" for s in failed]
        assert "characters: show all" in browser.find_element(By.CSS_SELECTOR, "details.instruction").text
        browser.execute_script("document.querySelector('.step .error-type').scrollIntoView({block: 'center'})")
        browser.save_screenshot(str(shots / "viewer-eai.png"))
    finally:
        server.shutdown()
        server.server_close()
