"""Property-based run of the OpenAPI schema (Schemathesis, small form): generated requests, valid and
invalid, must never give a 5xx and every response must match the documented schema."""
from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import (
    negative_data_rejection,
    positive_data_acceptance,
)

from groundplan.serve.config import ServeConfig
from groundplan.serve.local import local_app
from tests.fakes import FakeLM

CFG = ServeConfig(planners=[{"name": "saycan", "label": "SayCan", "affordance": "kitchen_value"}],
                  limits={"max_steps": 3, "max_session_steps": 3}, viewer_dir=None)
schema = schemathesis.openapi.from_asgi("/openapi.json", local_app(CFG, FakeLM(), token="t0k"))


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_conforms_to_its_schema(case):
    headers = {"Authorization": "Bearer t0k"}
    response = case.call(headers=headers)
    assert response.status_code < 500, response.text
    # a body over limits.max_body_bytes is refused with 413 before it is parsed: also a rejection
    # and the configured limits (limits.max_options, max_instruction_chars, ...) are stricter than the
    # schema's static ceilings: a schema-valid request beyond them gets a 400 with a message, by design
    excluded = [positive_data_acceptance] + ([negative_data_rejection] if response.status_code == 413 else [])
    case.validate_response(response, headers=headers, excluded_checks=excluded)
