"""The HTTP API fuzzed from its own OpenAPI document with schemathesis, against a real ``berth run`` host.

Valid and invalid requests (bodies, queries, headers, path parameters) are generated for every operation; a real
conversation, turn and file (named outside Latin-1) are fixed where the path names them, so the requests reach
past the id checks. No request may get a server error, a status or content type the document does not list, or
a body that does not match the document's schema for it (every error is ``{"error": {"code", "message",
"details"}}``).

A third pass sends what the schema-driven generator almost never makes, where it once made a 500: in every id
(path, query or header: ``turn_id``, ``Last-Event-ID`` …) and every number, oversized numerals (up to 6,000
digits, past Python's 4,300-digit parse limit), an event id ``<turn>:<numeral>``, digits ``str.isdigit`` takes
but ``int`` does not, and names outside Latin-1 (Cyrillic, CJK, U+202E) in path ids.

The examples are derandomized (the same on every run), so a failure here is a regression, not luck; drop
``derandomize`` locally to explore further.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
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


SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True
)
HUGE_NUMERALS = st.one_of(st.sampled_from([19, 20, 4301, 5000]), st.integers(19, 6000)).map(lambda digits: "9" * digits)
ODD_DIGITS = st.sampled_from(["²", "١٢٣", "٣" * 30, "1e999", "-0", "+1", "0x1F", "1_000"])
FOREIGN_NAMES = st.sampled_from(["Отчёт.txt", "報告書", "invoice\u202etxt.exe", "café", "ß" * 300])


def hostile_values(known: str | None, in_header: bool) -> st.SearchStrategy[str]:
    """What to put in one id or number: oversized numerals, odd digits, either after ``<known>:`` (an event id
    past every bound), and names outside Latin-1 (in a header, which carries Latin-1 only, those that fit it)."""
    numerals = st.one_of(HUGE_NUMERALS, ODD_DIGITS)
    choices = [numerals, FOREIGN_NAMES]
    if known:
        choices.append(numerals.map(lambda numeral: f"{known}:{numeral}"))
    values = st.one_of(choices)
    return values.filter(_latin_1) if in_header else values


def _latin_1(value: str) -> bool:
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def targeted(parameter: Any) -> bool:
    """An id (``turn_id``, ``Last-Event-ID`` …) or a number (``limit``, ``stuck_after_s``)."""
    schema = parameter.definition.get("schema", {})
    types = {schema.get("type"), *(option.get("type") for option in schema.get("anyOf", []))}
    return "id" in parameter.name.lower().replace("-", "_").split("_") or bool(types & {"integer", "number"})


@dataclass(frozen=True)
class Parameter:
    """A parameter the document may not list (shaped as schemathesis's own)."""

    name: str
    definition: dict[str, Any]


LAST_EVENT_ID = Parameter("Last-Event-ID", {"schema": {"type": "string"}})


def streams_events(operation: schemathesis.APIOperation) -> bool:
    """Whether the operation answers ``text/event-stream`` (so a client may send ``Last-Event-ID``)."""
    responses = operation.definition.raw.get("responses", {})
    return any("text/event-stream" in (answer.get("content") or {}) for answer in responses.values())


def fixed_for(operation: schemathesis.APIOperation, known_ids: dict[str, str]) -> dict[str, str]:
    """The known ids of the operation's path (the files route's ``path`` is the known file)."""
    fixed = {name: value for name, value in known_ids.items() if "{" + name + "}" in operation.path}
    if "/files/{path}" in operation.path:
        fixed["path"] = known_ids["file_path"]
    return fixed


def fuzz(operation: schemathesis.APIOperation, mode: GenerationMode, fixed: dict[str, str], host: str) -> str | None:
    """Run one operation's generated requests; what failed (with a command to reproduce it), or None."""
    headers = ADMIN if operation.path.startswith("/v1/admin") else USER

    @given(case=operation.as_strategy(mode, path_parameters=fixed or None))
    @SETTINGS
    def probe(case: schemathesis.Case) -> None:
        case.call_and_validate(base_url=host, headers=headers, checks=CHECKS, timeout=30)

    return _failure(operation, probe)


def fuzz_hostile(operation: schemathesis.APIOperation, fixed: dict[str, str], host: str) -> str | None:
    """Run the operation's requests with hostile values in its ids and numbers (:func:`hostile_values`)."""
    headers = ADMIN if operation.path.startswith("/v1/admin") else USER
    locations: dict[str, list[Any]] = {
        "path_parameters": list(operation.path_parameters),
        "query": list(operation.query),
        "headers": list(operation.headers),
    }
    if streams_events(operation) and "last-event-id" not in {p.name.lower() for p in locations["headers"]}:
        locations["headers"].append(LAST_EVENT_ID)  # every event stream takes it (the SSE spec), documented or not
    if not any(targeted(parameter) for parameters in locations.values() for parameter in parameters):
        return None

    @given(data=st.data())
    @SETTINGS
    def probe(data: st.DataObject) -> None:
        chosen: dict[str, dict[str, str]] = {location: {} for location in locations}
        for location, parameters in locations.items():
            for parameter in parameters:
                if targeted(parameter) and data.draw(st.booleans(), label=f"hostile {parameter.name}"):
                    known = fixed.get(parameter.name) or fixed.get("turn_id")
                    value = data.draw(hostile_values(known, location == "headers"), label=parameter.name)
                    chosen[location][parameter.name] = value
        strategy = operation.as_strategy(
            GenerationMode.POSITIVE,
            path_parameters={**fixed, **chosen["path_parameters"]} or None,
            query=chosen["query"] or None,
            headers=chosen["headers"] or None,
        )
        case = data.draw(strategy)
        case.call_and_validate(base_url=host, headers=headers, checks=CHECKS, timeout=30)

    return _failure(operation, probe)


def _failure(operation: schemathesis.APIOperation, probe: Callable[[], None]) -> str | None:
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


@pytest.mark.parametrize("mode", ["valid", "invalid", "hostile"])
def test_no_request_gets_a_server_error_or_an_answer_its_document_does_not_describe(
    host: str, known_ids: dict[str, str], mode: str
) -> None:
    api = schemathesis.openapi.from_url(f"{host}/openapi.json")
    failures = []
    for result in api.get_all_operations():
        operation = result.ok()
        fixed = fixed_for(operation, known_ids)
        if operation.method.upper() == "DELETE" and "conversation_id" in fixed:
            fixed["conversation_id"] = a_conversation_to_delete(host)  # the shared one is for the others
        if mode == "hostile":
            failures.append(fuzz_hostile(operation, fixed, host))
        else:
            generation = GenerationMode.POSITIVE if mode == "valid" else GenerationMode.NEGATIVE
            failures.append(fuzz(operation, generation, fixed, host))
    found = [failure for failure in failures if failure is not None]
    assert found == [], "\n\n".join(found)


def test_the_known_file_downloads_with_its_name_in_the_header(host: str, known_ids: dict[str, str]) -> None:
    """The valid pass fetches this file; its name is outside Latin-1 (it was once a 500)."""
    conversation, path = known_ids["conversation_id"], known_ids["file_path"]
    answer = httpx.get(f"{host}/v1/acme/support/conversations/{conversation}/files/{path}", headers=USER)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-disposition"].endswith("filename*=UTF-8''%D0%9E%D1%82%D1%87%D1%91%D1%82.txt")
