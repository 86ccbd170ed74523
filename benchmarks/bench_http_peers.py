"""Serving end to end: lm-evaluation-harness's own ``local-completions`` client scoring SayCan kitchen steps
over HTTP against ``groundplan serve --local`` and against llama.cpp's server, same weights, same machine.

The work: the recorded steps of ``bench_peers.py`` (real SayCan kitchen prompts of ~1,040 tokens with all 51
skills), each (prompt, option) pair one ``loglikelihood`` request, which the client sends as a
``/v1/completions`` call with ``echo``, ``logprobs`` and ``max_tokens: 1`` (its own payload; prompts as text,
since llama.cpp's server takes no token-id prompts, so both sides tokenise as they serve). Client settings,
each side timed over its own window:

- ``c1``: one request at a time (``num_concurrent=1``, ``batch_size=1``);
- ``c8``: eight concurrent requests (``num_concurrent=8``);
- ``b51``: a step's 51 pairs in one call (``batch_size=51``; the completions API takes a list of prompts).

groundplan serves the embedded SmolLM2-135M with its score memo off (``scorer.memo_size=0``; its prefix cache
stays on); llama.cpp's server (llama-cpp-python's ``llama_cpp.server``) serves the same model's GGUF with its
prompt cache on. Both get the same CPU thread count (``--threads``). llama.cpp answers a ~1,040-token echo in
tens of seconds on a small CPU, so it runs only the first ``--llamacpp-requests`` requests of each setting
(the count is printed); a rate over fewer requests is still a rate.

The run has ``--rounds`` rounds, each with its own recorded steps (so no side meets a prompt an earlier round
cached), the same requests for every side; within a round the sides alternate (groundplan's engine in this
process, then each server, the order flipping each round). The in-process side is the step the HTTP targets
are stated against: the same steps' 51 options in one ``score`` call each, same thread count.

Beside it, with groundplan among the sides, the engine's share of each setting runs in this process on the
same steps (``bench_echo_requests.echo_step``): the step's texts in calls of as many as the setting has in
flight (1, 8 or 51), each call's one-token generates after it, nothing of HTTP, JSON or the client. Its
ratio to the in-process step (``gp_<setting>_engine_vs_inprocess``) is the floor under the setting's own: the
part of a miss that no server or protocol work can recover. For the settings that send one call at a time
the client's own seconds a step outside its calls (``gp_<setting>_client_s``: tokenising, building requests,
reading answers, on the same cores) are reported too.

Reported per side and setting: requests/s (the median over the rounds, logged with its range) and the p99
seconds per HTTP call (timed inside the client's own call methods), a step's seconds over HTTP against the
in-process step (``gp_<setting>_vs_inprocess``: a step's requests (51) / requests-per-second / the in-process
step's median),
and the largest log-likelihood difference between the sides on the requests both ran. Last line:
``result: inprocess_step_s=... gp_c1_rps=... gp_c1_p99_s=... ... gp_b51_vs_inprocess=...
gp_b51_engine_vs_inprocess=... gp_b51_client_s=... ratio_c1=... max_abs_diff=... rounds=... threads=...``.

    python benchmarks/bench_http_peers.py [--steps 2] [--rounds 3] [--threads 2] [--llamacpp-requests 4] [--sides groundplan llamacpp]
"""
from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.*, when run as a script
from benchmarks.bench_echo_requests import echo_step  # noqa: E402
from benchmarks.bench_peers import STEPS_FILE, load_steps  # noqa: E402
from benchmarks.harness import percentile, report, setup_logging  # noqa: E402

log = logging.getLogger("benchmarks.http_peers")
ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {"c1": (1, 1), "c8": (8, 1), "b51": (1, 51)}  # name -> (num_concurrent, batch_size)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 300.0) -> None:
    """Poll ``url`` until it answers 200; raise if the server process exits or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} before it was ready ({url})")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} not ready after {timeout_s:.0f} s")


def start_groundplan(port: int, threads: int, log_path: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, "-m", "groundplan.cli", "serve", str(ROOT / "configs" / "serve_kitchen.yaml"), "--local",
           "--port", str(port), "--set", "scorer.memo_size=0", "--set", "limits.max_body_bytes=4194304"]
    proc = subprocess.Popen(cmd, env=env, stdout=log_path.open("w"), stderr=subprocess.STDOUT, cwd=ROOT)
    wait_ready(f"http://127.0.0.1:{port}/v1/healthz", proc)
    return proc


def start_llamacpp(port: int, threads: int, gguf: str, log_path: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", gguf, "--host", "127.0.0.1", "--port", str(port),
           "--n_ctx", "2048", "--n_threads", str(threads), "--n_threads_batch", str(threads), "--cache", "true"]
    proc = subprocess.Popen(cmd, stdout=log_path.open("w"), stderr=subprocess.STDOUT)
    wait_ready(f"http://127.0.0.1:{port}/v1/models", proc)
    return proc


class CallTimes:
    """Wall seconds of every HTTP call the client makes: its synchronous calls (``requests``, one at a time)
    timed around its own call method, its concurrent ones (``aiohttp``) from sending to the response's
    headers, which a server sends once its answer is ready, so that the time a call waits in the client's
    own queue (its semaphore of ``num_concurrent``) is not counted as the server's latency."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def install(self) -> None:
        import aiohttp
        from lm_eval.models.api_models import TemplateAPI

        sync, request, times = TemplateAPI.model_call, aiohttp.ClientSession._request, self.seconds

        def model_call(self: Any, *a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return sync(self, *a, **k)
            finally:
                times.append(time.perf_counter() - t0)

        async def timed_request(self: Any, *a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await request(self, *a, **k)
            finally:
                times.append(time.perf_counter() - t0)

        TemplateAPI.model_call = model_call
        aiohttp.ClientSession._request = timed_request


def client(base_url: str, model: str, tokenizer_dir: str, concurrent: int, batch: int) -> Any:
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    return LocalCompletionsAPI(base_url=base_url, model=model, tokenizer_backend="huggingface",
                               tokenizer=tokenizer_dir, num_concurrent=concurrent, batch_size=batch,
                               max_retries=1, timeout=3600, tokenized_requests=False)


def run_window(lm: Any, pairs: Sequence[tuple[str, str]], times: CallTimes) -> tuple[float, list[float], list[float]]:
    """(window seconds, per-call seconds, log-likelihoods) of ``pairs`` through the client."""
    from lm_eval.api.instance import Instance

    reqs = [Instance(request_type="loglikelihood", doc={}, arguments=p, idx=i) for i, p in enumerate(pairs)]
    times.seconds.clear()
    t0 = time.perf_counter()
    out = lm.loglikelihood(reqs, disable_tqdm=True)
    return time.perf_counter() - t0, list(times.seconds), [float(ll) for ll, _ in out]


def inprocess_window(lm: Any, steps: Sequence[Any]) -> tuple[float, list[float]]:
    """(window seconds, per-step seconds) of scoring ``steps`` with groundplan's engine in this process: each
    step's 51 options in one ``score`` call, the in-process step the HTTP settings are measured against."""
    per: list[float] = []
    t0 = time.perf_counter()
    for step in steps:
        t = time.perf_counter()
        lm.score(step.prompt, step.options)
        per.append(time.perf_counter() - t)
    return time.perf_counter() - t0, per


def interval(xs: Sequence[float]) -> str:
    """A per-round figure's median with its range over the rounds, as ``m [lo, hi]``."""
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}, {max(xs):.3f}]"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2, help="recorded kitchen steps a round (51 requests each)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; each has its own steps, the same for every side")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for each server and the in-process engine")
    ap.add_argument("--llamacpp-requests", type=int, default=4, help="requests llama.cpp runs per setting")
    ap.add_argument("--sides", nargs="+", default=["groundplan", "llamacpp"], choices=["groundplan", "llamacpp"])
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--steps-file", default=str(STEPS_FILE), help="bench_peers.py's recorded steps")
    args = ap.parse_args(argv)
    setup_logging()

    path = Path(args.steps_file)
    if not path.exists():
        raise SystemExit(f"{path} is missing: run benchmarks/bench_peers.py once to record the steps")
    steps, _ = load_steps(path)
    if len(steps) < args.steps * args.rounds:
        raise SystemExit(f"{path} holds {len(steps)} steps; {args.rounds} rounds of {args.steps} need "
                         f"{args.steps * args.rounds}: record more with bench_peers.py --record")
    rounds = [steps[r * args.steps:(r + 1) * args.steps] for r in range(args.rounds)]
    per_step = statistics.mean(len(s.options) for r in rounds for s in r)  # requests a step (51 in the kitchen)

    import torch

    from groundplan.factory import build_llm
    from groundplan.llm.loading import embedded_gguf

    model = "smollm2-135m-instruct"
    torch.set_num_threads(args.threads)
    engine = build_llm("hf", model)  # the in-process side, and the client's tokenizer: the served model's own
    tok_dir = tempfile.mkdtemp(prefix="bench_http_tok_")
    engine.tokenizer.save_pretrained(tok_dir)
    times = CallTimes()
    times.install()
    logs = Path(tempfile.mkdtemp(prefix="bench_http_logs_"))
    servers: dict[str, tuple[subprocess.Popen, int]] = {}
    for side in args.sides:
        if side == "llamacpp":
            missing = [m for m in ("llama_cpp", "sse_starlette", "starlette_context", "pydantic_settings")
                       if importlib.util.find_spec(m) is None]
            if missing:
                log.warning("llamacpp side skipped: %s missing (pip install 'llama-cpp-python[server]')", missing)
                continue
        port = free_port()
        start = start_groundplan if side == "groundplan" else (
            lambda p, t, lp: start_llamacpp(p, t, str(embedded_gguf(model)), lp))
        servers[side] = (start(port, args.threads, logs / f"{side}.log"), port)
    rps: dict[str, list[float]] = {}
    calls: dict[str, list[float]] = {}
    failed: set[str] = set()
    lls: dict[str, list[float]] = {}
    step_s: list[float] = []
    floor: dict[str, list[float]] = {}  # setting -> the engine's seconds a step, per round
    client_s: dict[str, list[float]] = {}  # side_setting -> the client's seconds a step outside its calls
    try:
        engine.score(rounds[0][0].prompt, rounds[0][0].options[:1])  # warm, as each client's first call is
        for r, work_steps in enumerate(rounds):
            pairs = [(s.prompt, o) for s in work_steps for o in s.options]
            # the sides alternate within a round, the order flipping each round; every side gets these requests
            local = ["inprocess", "engine"] if "groundplan" in servers else ["inprocess"]
            order = [*local, *servers] if r % 2 == 0 else [*reversed(list(servers)), *reversed(local)]
            for side in order:
                if side == "inprocess":
                    _, per = inprocess_window(engine, work_steps)
                    step_s += per
                    continue
                if side == "engine":  # the engine's share of each setting: its echo calls, in this process
                    for setting in args.settings:
                        concurrent, batch = SETTINGS[setting]
                        floor.setdefault(setting, []).append(
                            statistics.mean(echo_step(engine, s, concurrent * batch) for s in work_steps))
                    continue
                proc, port = servers[side]
                work = pairs if side == "groundplan" else pairs[: args.llamacpp_requests]
                for setting in args.settings:
                    key = f"{side}_{setting}"
                    if key in failed:
                        continue
                    concurrent, batch = SETTINGS[setting]
                    lm = client(f"http://127.0.0.1:{port}/v1/completions", model, tok_dir, concurrent, batch)
                    try:
                        if r == 0:
                            run_window(lm, work[:1], times)  # warm: the first prompt's forward, outside the window
                        window, seconds, got = run_window(lm, work, times)
                    except Exception as exc:  # a server that refuses the setting (llama.cpp: a list of prompts)
                        log.warning("%s %s failed: %s", side, setting, exc)
                        failed.add(key)
                        continue
                    rps.setdefault(key, []).append(len(work) / window)
                    calls.setdefault(key, []).extend(seconds)
                    if concurrent == 1:  # one call at a time: what the window holds besides them is the client's
                        client_s.setdefault(key, []).append((window - sum(seconds)) * per_step / len(work))
                    lls.setdefault(side, []).extend(got)
                    log.info("round %d %s %s: %d requests in %.1f s (%.2f req/s), %d calls, p50 %.2f s", r, side,
                             setting, len(work), window, len(work) / window, len(seconds), statistics.median(seconds))
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    fields: dict[str, Any] = {"inprocess_step_s": f"{statistics.median(step_s):.3f}"}
    for key in [*rps, *failed]:
        short = key.replace("groundplan", "gp")
        if key in failed:
            fields[f"{short}_rps"] = "failed"
            continue
        fields[f"{short}_rps"] = f"{statistics.median(rps[key]):.3f}"
        fields[f"{short}_p99_s"] = f"{percentile(calls[key], 0.99):.2f}"
        log.info("%s req/s over %d rounds: %s (median [min, max])", key, len(rps[key]), interval(rps[key]))
    for setting in args.settings:
        gp, lc = rps.get(f"groundplan_{setting}"), rps.get(f"llamacpp_{setting}")
        if gp and lc:
            fields[f"ratio_{setting}"] = f"{statistics.median(gp) / statistics.median(lc):.1f}"
        if gp:  # seconds a step's requests take over HTTP against the in-process step, per round
            per_round = [per_step / g / statistics.median(step_s) for g in gp]
            fields[f"gp_{setting}_vs_inprocess"] = f"{statistics.median(per_round):.2f}"
            log.info("groundplan %s: a step over HTTP / the in-process step: %s", setting, interval(per_round))
        if floor.get(setting):  # the same ratio with nothing of HTTP, JSON or the client in it: its floor
            engine_round = [f / statistics.median(step_s) for f in floor[setting]]
            fields[f"gp_{setting}_engine_vs_inprocess"] = f"{statistics.median(engine_round):.2f}"
            log.info("groundplan %s: the engine's share of a step / the in-process step: %s", setting,
                     interval(engine_round))
        if client_s.get(f"groundplan_{setting}"):
            fields[f"gp_{setting}_client_s"] = f"{statistics.median(client_s[f'groundplan_{setting}']):.3f}"
    if "groundplan" in lls and "llamacpp" in lls:
        common = min(len(lls["groundplan"]), len(lls["llamacpp"]))
        diff = max(abs(a - b) for a, b in zip(lls["groundplan"][:common], lls["llamacpp"][:common]))
        fields["max_abs_diff"] = f"{diff:.3f}"
    fields.update(rounds=args.rounds, llamacpp_requests=args.llamacpp_requests, threads=args.threads)
    log.info("server logs in %s", logs)
    report(fields)


if __name__ == "__main__":
    main()
