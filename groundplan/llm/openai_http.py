"""The HTTP transport of the OpenAI-compatible backend (:mod:`groundplan.llm.openai_backend`), apart from
what is sent and how answers are read, so that scoring, sampling and embeddings share one set of rules
for faults, keys and concurrency.

Faults: a 429 or 5xx answer, a timeout or a failed connection is retried ``max_retries`` times with
exponential backoff (or the server's ``Retry-After``); what still fails raises :class:`LLMServiceError`,
naming the URL, an :class:`~groundplan.core.errors.InfrastructureError`, so an episode records it as an
infrastructure failure and not as the planner's. The API key is read from the environment variable
``api_key_env`` names at every request and never stored, logged or put in an error message (a server
that quotes it back has it replaced by ``***``). The requests of one call go out concurrently, at most
``max_concurrency`` at a time, over one pool shared by all calls.
"""
from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import requests

from groundplan.core.errors import InfrastructureError
from groundplan.llm.options import OpenAIOptions

log = logging.getLogger(__name__)

#: longest part of a server's answer quoted in an error message
_QUOTE = 500


class LLMServiceError(InfrastructureError):
    """The OpenAI-compatible server could not be reached, timed out, kept answering 429/5xx past
    ``max_retries``, refused a request, or answered something this backend cannot use. The message names
    the URL and never holds the API key; ``status`` is the HTTP status of a refused request (4xx) or the last answer of one that failed after its retries (429, 5xx); None when no answer came."""

    status: int | None = None


@dataclass
class HTTPStats:
    """Counters for the scorer actor's metrics and tests."""

    requests: int = 0
    retries: int = 0
    failures: int = 0


class OpenAIClient:
    """POSTs JSON to ``<base_url>/<path>`` with the backend's retries, key handling and concurrency limit;
    ``stats`` counts requests, retries and failures.

    Args:
        options: the backend's validated options (``base_url``, ``api_key_env``, ``max_concurrency``,
            ``timeout_s``, ``max_retries``, ``backoff_s``).
    """

    def __init__(self, options: OpenAIOptions) -> None:
        self.options = options
        self.base_url = options.base_url
        self.stats = HTTPStats()
        self._pool = ThreadPoolExecutor(max_workers=options.max_concurrency, thread_name_prefix="openai-http")
        self._local = threading.local()

    def _key(self) -> str | None:
        env = self.options.api_key_env
        return (os.environ.get(env) or None) if env else None

    def redact(self, text: str) -> str:
        """``text`` with the API key, should a server have quoted it back, replaced by ``***``."""
        key = self._key()
        return text.replace(key, "***") if key else text

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        return session

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``<base_url>/<path>``: 429, 5xx, timeouts and failed connections retried with
        backoff; anything that still fails raises :class:`LLMServiceError` naming the URL."""
        url = f"{self.base_url}/{path}"
        opts = self.options
        headers = {"Content-Type": "application/json"}
        key = self._key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        payload = json.dumps(body)
        problem, status = "", None
        for attempt in range(opts.max_retries + 1):
            wait = opts.backoff_s * (2 ** attempt)
            self.stats.requests += 1
            status = None
            try:
                r = self._session().post(url, data=payload, headers=headers, timeout=opts.timeout_s)
            except requests.Timeout:
                problem = f"no answer from {url} within timeout_s={opts.timeout_s:g} s"
            except requests.ConnectionError as exc:
                problem = f"cannot connect to {url} ({_reason(exc)})"
            except requests.RequestException as exc:
                raise self.error(f"request to {url} failed: {type(exc).__name__}: {exc}") from None
            else:
                if r.status_code == 429 or r.status_code >= 500:
                    problem, status = f"{url} answered HTTP {r.status_code}: {quote(r.text)}", r.status_code
                    wait = _retry_after(r.headers.get("Retry-After"), wait)
                elif r.status_code >= 400:
                    hint = ""
                    if r.status_code in (401, 403):
                        hint = (f" (the API key comes from ${opts.api_key_env}, which is "
                                f"{'set' if key else 'unset'})" if opts.api_key_env else " (api_key_env is null: no key sent)")
                    raise self.error(f"{url} answered HTTP {r.status_code}{hint}: {quote(r.text)}", r.status_code)
                else:
                    try:
                        data = r.json()
                    except ValueError:
                        raise self.error(f"{url} answered HTTP {r.status_code} with no JSON: {quote(r.text)}") from None
                    if not isinstance(data, dict):
                        raise self.error(f"{url} answered JSON that is not an object: {quote(r.text)}")
                    return data
            if attempt < opts.max_retries:
                self.stats.retries += 1
                log.warning("%s; retry %d of %d in %.2f s", self.redact(problem), attempt + 1, opts.max_retries, wait)
                time.sleep(wait)
        raise self.error(f"{problem}; gave up after {opts.max_retries + 1} attempt(s) (max_retries={opts.max_retries})",
                         status)

    def error(self, message: str, status: int | None = None) -> LLMServiceError:
        """The :class:`LLMServiceError` to raise for ``message`` (key redacted), counted as a failure."""
        self.stats.failures += 1
        err = LLMServiceError(self.redact(message))
        err.status = status
        return err

    def concurrently(self, fn: Callable[..., Any], items: Sequence[Any]) -> list[Any]:
        """``fn(item)`` for every item, at most ``max_concurrency`` in flight (the pool is shared by all
        calls); the first error is raised once all have finished."""
        if len(items) == 1:
            return [fn(items[0])]
        futures = [self._pool.submit(fn, item) for item in items]
        results, first_error = [], None
        for f in futures:
            try:
                results.append(f.result())
            except BaseException as exc:  # wait for the rest, so no request outlives the call
                first_error = first_error or exc
                results.append(None)
        if first_error is not None:
            raise first_error
        return results

    def close(self) -> None:
        """Stop the request threads (the client is unusable afterwards)."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def quote(text: str) -> str:
    """``text`` on one line, cut to ``_QUOTE`` characters: a server's answer as an error message quotes it."""
    text = " ".join(str(text).split())
    return text if len(text) <= _QUOTE else text[:_QUOTE] + " ..."


def _reason(exc: requests.ConnectionError) -> str:
    """The root cause of a failed connection ("[Errno 111] Connection refused"), not urllib3's wrapping."""
    text = str(exc)
    found = re.search(r"\[Errno -?\d+\][^'\")\n]*", text)
    if found:
        return found.group(0).strip()
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first[:200]


def _retry_after(header: str | None, default: float) -> float:
    """The server's Retry-After in seconds (capped at a minute), else ``default``."""
    try:
        return min(60.0, max(0.0, float(header))) if header else default
    except ValueError:
        return default
