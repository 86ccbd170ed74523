"""Planning as a service, so that a robot or a user interface can ask for its next skill over HTTP while
one batching LLM scorer serves every session: a Ray Serve application with an LLM scorer
deployment (eval's scorer host, :class:`~groundplan.actors.scorer.LLMScorer`, under ``serve.deployment``),
one planner deployment per configured planner and a FastAPI ingress,
plus the trace viewer (:mod:`groundplan.viewer`) mounted at ``/``.

Modules: ``config`` (the YAML schema), ``schemas`` (request/response models), ``service`` (the plain
planning logic and the configured scorer host, no Ray), ``sessions`` (the session store), ``api`` (the FastAPI app over a backend),
``app`` (the Ray Serve deployments and ``serve run`` entry point), ``signals`` (stopping on SIGINT and
SIGTERM).
"""
