"""The HTTP API fuzzed from its own OpenAPI document with schemathesis, against a real ``berth run`` host.

Valid and invalid requests (bodies, queries, path parameters) are generated for every operation; a real
conversation and turn are fixed where the path names them, so the requests reach past the id checks. No
request may get a server error, a status or content type the document does not list, or a body that does
not match the document's schema for it (every error is ``{"error": {"code", "message", "details"}}``).

The examples are derandomized (the same on every run), so a failure here is a regression, not luck; drop
``derandomize`` locally to explore further.
"""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

USER = {"Authorization": "Bearer acme-web-dev-key"}
ADMIN = {"Authorization": "Bearer ops-admin-dev-key"}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def fuzz(operation: schemathesis.APIOperation, mode: GenerationMode, fixed: dict[str, str], host: str) -> str | None:
    """Run one operation's generated requests; what failed (with a command to reproduce it), or None."""
    headers = ADMIN if operation.path.startswith("/v1/admin") else USER

    @given(case=operation.as_strategy(mode, path_parameters=fixed or None))
    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True)
    def probe(case: schemathesis.Case) -> None:
        case.call_and_validate(base_url=host, headers=headers, checks=CHECKS, timeout=30)

    try:
        probe()
    except Unsatisfiable:  # invalid mode: an operation without inputs has nothing to get wrong
        return None
    except (Exception, BaseExceptionGroup) as exc:  # schemathesis: a group of failures, each reproducible
        return f"{operation.label}: {exc}"
    return None


def a_conversation_to_delete(host: str) -> str:
    """A conversation of its own for ``DELETE``, so the fixed one stays for the operations fuzzed after it."""
    created = httpx.post(f"{host}/v1/acme/support/conversations", json={}, headers=USER)
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
def test_no_request_gets_a_server_error_or_an_answer_its_document_does_not_describe(
    host: str, known_ids: dict[str, str], mode: GenerationMode
) -> None:
    api = schemathesis.openapi.from_url(f"{host}/openapi.json")
    failures = []
    for result in api.get_all_operations():
        operation = result.ok()
        fixed = {name: value for name, value in known_ids.items() if "{" + name + "}" in operation.path}
        if operation.method.upper() == "DELETE" and "conversation_id" in fixed:
            fixed["conversation_id"] = a_conversation_to_delete(host)  # the shared one is for the others
        failures.append(fuzz(operation, mode, fixed, host))
    found = [failure for failure in failures if failure is not None]
    assert found == [], "\n\n".join(found)
