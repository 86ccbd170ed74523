"""``groundplan eai generate``, the open-loop EAI row: the model is given EAI's stored prompt and nothing
else, the answers land in EAI's ``<model>_outputs.json`` format, resumably, one task's failure recorded
without stopping the run; over ``llm.backend: openai`` against ``groundplan serve``'s ``/v1/completions``
the file it writes is scored by ``groundplan eai score``'s own function."""
from __future__ import annotations

import dataclasses
import functools
import json
import socket
import threading
import time
import zlib
from pathlib import Path

import pytest

from groundplan.config import LLMSpec
from groundplan.core.errors import InvalidInputError
from groundplan.envs.virtualhome.eai.prompts import stored_prompts
from groundplan.llm.base import Generation
from groundplan.pipelines.eai.generate import EAIGenerateConfig, generate, select_task_ids
from tests.fakes import FakeLM

#: three official-set tasks with short prompts, each prompt its task's alone (28 stored prompt texts are
#: shared by two to six program ids, e.g. 1035_1, 113_2 and 137_2, so those could not tell tasks apart)
IDS = ["38_1", "549_2", "563_1"]
MORE = ["415_1", "975_2"]


def answer_for(prompt: str) -> str:
    """The scripted answer to one prompt: it names the prompt, so a record shows which prompt it answered."""
    return f'{{"WALK": ["bathroom"]}} # {zlib.crc32(prompt.encode())}'


class PromptKeyedLM(FakeLM):
    """A FakeLM that answers each prompt with :func:`answer_for` and raises for the prompt ``fail_on``."""

    def __init__(self, fail_on: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.fail_on = fail_on

    def generate(self, prompt, params):
        self.generate_calls.append({"prompt": prompt, **dataclasses.asdict(params)})
        if prompt == self.fail_on:
            raise RuntimeError("server went away")
        return [Generation(text=answer_for(prompt), logprob_mean=-1.0, num_tokens=3, finish_reason="stop")]


def _read(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))


def test_generates_eai_format_with_the_stored_prompt_resumes_and_records_errors(tmp_path):
    prompts = stored_prompts()
    assert len({prompts[i] for i in IDS + MORE}) == 5
    cfg = EAIGenerateConfig(ids=IDS, output=tmp_path, label="fake", max_new_tokens=64)
    lm = PromptKeyedLM()
    run = generate(cfg, lm=lm, progress=False)
    rows = _read(tmp_path / "fake_outputs.json")
    assert [r["identifier"] for r in rows] == sorted(IDS)
    for r in rows:  # each task's answer is the answer to EAI's exact prompt for that task, and nothing else
        assert set(r) == {"identifier", "llm_output"} and r["llm_output"] == answer_for(prompts[r["identifier"]])
    assert len(lm.generate_calls) == 3
    assert sorted(c["prompt"] for c in lm.generate_calls) == sorted(prompts[i] for i in IDS)
    assert all(c["temperature"] == 0.0 and c["max_new_tokens"] == 64 and c["n"] == 1 for c in lm.generate_calls)
    assert run["n"] == 3 and run["generated"] == 3 and run["errors"] == []
    saved = json.loads((tmp_path / "fake_run.json").read_text())
    assert saved["n"] == 3 and saved["wall_s"] >= 0 and saved["tasks_per_s"] > 0 and saved["config"]["label"] == "fake"

    # a rerun asks the model nothing: every task is in the file
    again = PromptKeyedLM()
    run = generate(cfg, lm=again, progress=False)
    assert again.generate_calls == [] and run["skipped"] == 3 and run["generated"] == 0
    assert _read(tmp_path / "fake_outputs.json") == rows

    # two more tasks, one failing: recorded with its error, the other still written
    more = EAIGenerateConfig(ids=IDS + MORE, output=tmp_path, label="fake")
    failing = PromptKeyedLM(fail_on=prompts["415_1"])
    run = generate(more, lm=failing, progress=False)
    assert sorted(c["prompt"] for c in failing.generate_calls) == sorted(prompts[i] for i in MORE)  # 3 skipped
    rows = {r["identifier"]: r for r in _read(tmp_path / "fake_outputs.json")}
    assert set(rows) == set(IDS + MORE)
    assert rows["415_1"]["llm_output"] == "" and "server went away" in rows["415_1"]["error"]
    assert rows["975_2"] == {"identifier": "975_2", "llm_output": answer_for(prompts["975_2"])}
    assert run["errors"] == ["415_1"] and run["generated"] == 2

    # a rerun tries the failed task again, and only it
    fixed = PromptKeyedLM()
    generate(more, lm=fixed, progress=False)
    assert [c["prompt"] for c in fixed.generate_calls] == [prompts["415_1"]]
    rows = {r["identifier"]: r for r in _read(tmp_path / "fake_outputs.json")}
    assert rows["415_1"] == {"identifier": "415_1", "llm_output": answer_for(prompts["415_1"])}

    # a selection that leaves out answers already in the file (another sample or seed) is refused, naming them
    with pytest.raises(InvalidInputError, match="outside this run's selection") as err:
        generate(EAIGenerateConfig(ids=IDS, output=tmp_path, label="fake"), lm=PromptKeyedLM(), progress=False)
    assert all(i in str(err.value) for i in MORE)


def test_limit_takes_the_same_seeded_sample_of_sorted_ids():
    a = select_task_ids(EAIGenerateConfig(ids=IDS + MORE, limit=2, seed=3, output=Path("x")))
    b = select_task_ids(EAIGenerateConfig(ids=list(reversed(IDS + MORE)), limit=2, seed=3, output=Path("x")))
    assert a == b and len(a) == 2 and a == sorted(a)
    with pytest.raises(Exception, match="extra"):
        EAIGenerateConfig(output=Path("x"), unknown=1)


def test_ray_executor_runs_one_model_per_worker_through_the_actor_pool(tmp_path, ray_local):
    cfg = EAIGenerateConfig(ids=IDS, output=tmp_path, label="fake", executor="ray", workers=2)
    # the factory must unpickle in the workers: tests.fakes is importable there, this module is not
    answer = '{"WALK": ["bathroom"]}'
    run = generate(cfg, lm_factory=functools.partial(FakeLM, generations=[answer] * 3), progress=False)
    rows = _read(tmp_path / "fake_outputs.json")
    assert [r["identifier"] for r in rows] == sorted(IDS)
    assert all(r["llm_output"] == answer for r in rows) and run["errors"] == [] and run["model"] == "fake-lm"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tiny_llama(folder: Path):
    """A 2-layer random Llama with SmolLM2's tokenizer and room for EAI's prompts (~2,500 tokens)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from groundplan.llm.hf import HFLanguageModel
    from groundplan.llm.loading import resolve_model_path

    tok = AutoTokenizer.from_pretrained(resolve_model_path("smollm2-135m-instruct"))
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                      eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return HFLanguageModel(model=str(folder), dtype="float32", device_map=None)


def test_openai_backend_against_groundplan_serve_then_scored(tmp_path, monkeypatch):
    """The row over ``llm.backend: openai`` against the serve API's ``/v1/completions`` (``local_app``,
    what ``groundplan serve --local`` runs, in a thread), then scored by ``eai score``'s function."""
    pytest.importorskip("uvicorn")
    import uvicorn

    from groundplan.pipelines.eai.score import EAIScoreConfig, score
    from groundplan.serve.api import build_api
    from groundplan.serve.config import ServeConfig
    from groundplan.serve.local import LocalBackend

    lm = _tiny_llama(tmp_path / "tiny")
    serve_cfg = ServeConfig(viewer_dir=None)
    token = "eai-generate-token"
    monkeypatch.setenv("GP_EAI_TEST_KEY", token)
    port = _free_port()
    app = build_api(serve_cfg, LocalBackend(serve_cfg, lm), llm_name="tiny", token=token)
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    try:
        for _ in range(400):
            if srv.started:
                break
            time.sleep(0.05)
        llm = LLMSpec(backend="openai", model="tiny", options={"base_url": f"http://127.0.0.1:{port}/v1",
                                                               "api_key_env": "GP_EAI_TEST_KEY", "max_retries": 0})
        cfg = EAIGenerateConfig(llm=llm, ids=IDS[:2], output=tmp_path / "responses", max_new_tokens=12)
        run = generate(cfg, progress=False)
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
    assert run["errors"] == [] and run["n"] == 2
    rows = _read(tmp_path / "responses" / "tiny_outputs.json")
    assert [r["identifier"] for r in rows] == sorted(IDS[:2]) and all(set(r) == {"identifier", "llm_output"} for r in rows)

    result = score(EAIScoreConfig(output=tmp_path / "scored", responses=tmp_path / "responses",
                                  semantics="official", count_corrections=False))
    assert result["models"] == ["tiny"]
    assert [r["n"] for r in result["rows"]["official"]] == [2]
    verdicts = [json.loads(line) for line in (tmp_path / "scored" / "verdicts.jsonl").read_text().splitlines()]
    assert sorted(v["task_id"] for v in verdicts if v["model"] == "tiny") == sorted(IDS[:2])
