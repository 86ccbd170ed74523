"""Serving end to end: lm-evaluation-harness's own ``local-completions`` client scoring SayCan kitchen steps
over HTTP against ``groundplan serve --local`` and against llama.cpp's server, same weights, same machine.

The work: the recorded steps of ``bench_peers.py`` (real SayCan kitchen prompts of ~1,040 tokens with all 51
skills), each (prompt, option) pair one ``loglikelihood`` request, which the client sends as a
``/v1/completions`` call with ``echo``, ``logprobs`` and ``max_tokens: 1`` (its own payload; prompts as text,
since llama.cpp's server takes no token-id prompts, so both sides tokenise as they serve). Client settings,
each side timed over its own window, the sides alternating per setting:

- ``c1``: one request at a time (``num_concurrent=1``, ``batch_size=1``);
- ``c8``: eight concurrent requests (``num_concurrent=8``);
- ``b51``: a step's 51 pairs in one call (``batch_size=51``; the completions API takes a list of prompts).

groundplan serves the embedded SmolLM2-135M with its score memo off (``scorer.memo_size=0``; its prefix cache
stays on); llama.cpp's server (llama-cpp-python's ``llama_cpp.server``) serves the same model's GGUF with its
prompt cache on. Both get the same CPU thread count (``--threads``). llama.cpp answers a ~1,040-token echo in
tens of seconds on a small CPU, so it runs only the first ``--llamacpp-requests`` requests of each setting
(the count is printed); a rate over fewer requests is still a rate.

Reported per side and setting: requests/s over the window and p50/p99 seconds per HTTP call (timed inside the
client's own call methods), and the largest log-likelihood difference between the sides on the requests
both ran. Last line: ``result: gp_c1_rps=... gp_c8_rps=... gp_b51_rps=... llamacpp_c1_rps=... ...
gp_c1_p99_s=... ratio_c1=... max_abs_diff=... threads=...``.

    python benchmarks/bench_http_peers.py [--steps 2] [--threads 2] [--llamacpp-requests 4] [--sides groundplan llamacpp]
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


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2, help="recorded kitchen steps (51 requests each)")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for each server")
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
    pairs = [(s.prompt, o) for s in steps[: args.steps] for o in s.options]

    from groundplan.factory import build_llm
    from groundplan.llm.loading import embedded_gguf

    model = "smollm2-135m-instruct"
    tok_dir = tempfile.mkdtemp(prefix="bench_http_tok_")
    build_llm("hf", model).tokenizer.save_pretrained(tok_dir)  # the client's tokenizer: the served model's own
    times = CallTimes()
    times.install()
    logs = Path(tempfile.mkdtemp(prefix="bench_http_logs_"))
    results: dict[str, dict[str, Any]] = {}
    lls: dict[str, list[float]] = {}
    for side in args.sides:
        port = free_port()
        if side == "groundplan":
            proc = start_groundplan(port, args.threads, logs / "groundplan.log")
            work, name = pairs, model
        else:
            missing = [m for m in ("llama_cpp", "sse_starlette", "starlette_context", "pydantic_settings")
                       if importlib.util.find_spec(m) is None]
            if missing:
                log.warning("llamacpp side skipped: %s missing (pip install 'llama-cpp-python[server]')", missing)
                continue
            proc = start_llamacpp(port, args.threads, str(embedded_gguf(model)), logs / "llamacpp.log")
            work, name = pairs[: args.llamacpp_requests], model
        try:
            for setting in args.settings:
                concurrent, batch = SETTINGS[setting]
                lm = client(f"http://127.0.0.1:{port}/v1/completions", name, tok_dir, concurrent, batch)
                try:
                    run_window(lm, work[:1], times)  # warm: the first prompt's forward, outside the window
                    window, calls, got = run_window(lm, work, times)
                except Exception as exc:  # a server that refuses the setting (llama.cpp: a list of prompts)
                    log.warning("%s %s failed: %s", side, setting, exc)
                    results[f"{side}_{setting}"] = {"failed": True}
                    continue
                results[f"{side}_{setting}"] = {"n": len(work), "rps": len(work) / window, "window_s": window,
                                                "p50_s": statistics.median(calls), "p99_s": percentile(calls, 99),
                                                "calls": len(calls)}
                lls.setdefault(side, got)
                log.info("%s %s: %d requests in %.1f s (%.2f req/s), %d calls, p50 %.2f s, p99 %.2f s", side, setting,
                         len(work), window, len(work) / window, len(calls), statistics.median(calls),
                         percentile(calls, 99))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    fields: dict[str, Any] = {}
    for key, r in results.items():
        short = key.replace("groundplan", "gp")
        fields[f"{short}_rps"] = "failed" if r.get("failed") else f"{r['rps']:.3f}"
        fields[f"{short}_p99_s"] = "failed" if r.get("failed") else f"{r['p99_s']:.2f}"
    for setting in args.settings:
        gp, lc = results.get(f"groundplan_{setting}"), results.get(f"llamacpp_{setting}")
        if gp and lc and not gp.get("failed") and not lc.get("failed"):
            fields[f"ratio_{setting}"] = f"{gp['rps'] / lc['rps']:.1f}"
    if "groundplan" in lls and "llamacpp" in lls:
        common = min(len(lls["groundplan"]), len(lls["llamacpp"]))
        diff = max(abs(a - b) for a, b in zip(lls["groundplan"][:common], lls["llamacpp"][:common]))
        fields["max_abs_diff"] = f"{diff:.3f}"
    fields["llamacpp_requests"] = args.llamacpp_requests
    fields["threads"] = args.threads
    log.info("server logs in %s", logs)
    report(fields)


if __name__ == "__main__":
    main()
