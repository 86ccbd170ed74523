"""Planning as a service (DESIGN.md, "Serve"; issue 12): a Ray Serve application with an LLM scorer
deployment (``@serve.batch``), one planner deployment per configured planner and a FastAPI ingress,
plus the trace viewer page it serves at ``/`` (also ``groundplan view``).

Modules: ``config`` (the YAML schema), ``schemas`` (request/response models), ``service`` (the plain
planning logic, no Ray), ``sessions`` (the session store), ``api`` (the FastAPI app over a backend),
``app`` (the Ray Serve deployments and ``serve run`` entry point), ``viewer`` (the trace viewer).
"""
