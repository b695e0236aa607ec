"""Inputs the OpenAPI-driven fuzzer does not make, against the same real host: none may get a server error.

NUL bytes, over-long and traversing path segments, extreme dates, chunked bodies over the limit, oversized and
too many headers, files of any name downloaded back, ``Last-Event-ID`` of any shape. Each was once a 500 (or the
wrong 4xx); the properties keep them from coming back, and the examples pin the exact answers.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from urllib.parse import quote, unquote, urlsplit

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

USER = {"Authorization": "Bearer acme-web-dev-key"}
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

hostile_segments = st.one_of(
    st.text(min_size=1, max_size=40),
    st.just("\x00"),
    st.text(min_size=1, max_size=5).map(lambda t: t + "\x00" + t),
    st.integers(256, 6000).map(lambda n: "a" * n),
    st.sampled_from(["..", "../..", "%2e%2e", "..%2f..%2fetc%2fpasswd", "~", "\\..\\", "\udcff"]),
)
extreme_dates = st.one_of(
    st.datetimes().map(lambda d: d.isoformat()),
    st.sampled_from(
        [
            "0001-01-01T00:00:00",
            "9999-12-31T23:59:59",
            "0001-01-01T00:00:00+14:00",
            "9999-12-31T23:59:59-12:00",
            "2026-13-45",
            "now",
            "",
        ]
    ),
)


def quoted(segment: str) -> str:
    return quote(segment.encode("utf-8", errors="surrogatepass"), safe="")


def greeter_url(host: str) -> str:
    """The greeter widget's URL (with its ticket) as the bundle listing hands it to acme's user."""
    bundles = httpx.get(f"{host}/v1/acme/support/bundles", headers=USER, timeout=10).json()
    hello = next(bundle for bundle in bundles if bundle["id"] == "hello")
    return host + next(widget["url"] for widget in hello["widgets"] if widget["alias"] == "greeter")


@given(segment=hostile_segments)
@SETTINGS
def test_widget_and_static_paths_never_get_a_server_error(host: str, segment: str) -> None:
    for url in (f"{greeter_url(host)}{quoted(segment)}", f"{host}/static/{quoted(segment)}"):
        answer = httpx.get(url, timeout=10)
        assert answer.status_code < 500, (url, answer.status_code, answer.text[:300])


@pytest.mark.parametrize("segment", ["\x00", "a" * 5000, "../../../../etc/passwd"])
def test_a_path_no_file_can_have_is_a_json_404(host: str, segment: str) -> None:
    answer = httpx.get(f"{greeter_url(host)}{quoted(segment)}", timeout=10)
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "not_found"


@given(start=extreme_dates, end=extreme_dates)
@SETTINGS
def test_feedback_reports_take_any_dates_without_a_server_error(host: str, start: str, end: str) -> None:
    answer = httpx.get(f"{host}/v1/acme/support/feedback", params={"from": start, "to": end}, headers=USER)
    assert answer.status_code < 500, (start, end, answer.text[:300])


def test_the_widest_period_is_a_report(host: str) -> None:
    period = {"from": "0001-01-01T00:00:00", "to": "9999-12-31T23:59:59"}
    answer = httpx.get(f"{host}/v1/acme/support/feedback", params=period, headers=USER)
    assert answer.status_code == 200, answer.text


def chunks(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    sent = 0
    while sent < total:
        piece = min(size, total - sent)
        sent += piece
        yield b" " * piece


@given(megabytes=st.integers(26, 40), route=st.sampled_from(["turns", "conversations"]))
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_chunked_bodies_over_the_limit_are_413_on_every_route(
    host: str, known_ids: dict[str, str], megabytes: int, route: str
) -> None:
    """The example descriptors' limit is 25 MiB (``max_body_bytes``); the body comes without a Content-Length."""
    base = f"{host}/v1/acme/support/conversations"
    url = f"{base}/{known_ids['conversation_id']}/turns" if route == "turns" else base
    headers = {**USER, "Content-Type": "application/json"}
    answer = httpx.post(url, content=chunks(megabytes * 1024 * 1024), headers=headers, timeout=60)
    assert answer.status_code == 413, answer.text[:300]
    assert answer.json()["error"]["code"] == "payload_too_large"


def raw_request(host: str, head: bytes) -> bytes:
    """Send ``head`` (request line and headers) over a plain socket; the status line of the answer."""
    parts = urlsplit(host)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(head)
        answer = b""
        while b"\r\n" not in answer:
            data = sock.recv(4096)
            if not data:
                break
            answer += data
    return answer.split(b"\r\n", 1)[0]


def test_a_200_kb_header_is_refused_with_431(host: str) -> None:
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n"
    assert raw_request(host, head).split(b" ")[1] == b"431"


def test_five_thousand_headers_are_refused_with_431(host: str) -> None:
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(5000)) + b"\r\n"
    assert raw_request(host, head).split(b" ")[1] == b"431"


def test_ordinary_headers_pass(host: str) -> None:
    assert httpx.get(f"{host}/healthz", headers={"X-Trace": "a" * 1000}).status_code == 200


FILE_NAMES = st.one_of(
    st.text(min_size=1, max_size=30),
    st.sampled_from(["Отчёт.txt", "報告書.pdf", "invoice\u202etxt.exe", "naïve café.txt", "emoji 🧾.txt"]),
)


def name_in(header: str) -> str:
    """The file name a client reads from ``Content-Disposition``: ``filename*`` when there is one (RFC 6266)."""
    extended = re.search(r"filename\*=UTF-8''([^;]+)", header)
    if extended:
        return unquote(extended.group(1), errors="strict")
    plain = re.search(r'filename="([^"]*)"', header)
    assert plain, header
    return plain.group(1)


@given(names=st.lists(FILE_NAMES, min_size=1, max_size=3, unique=True))
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_a_file_of_any_name_downloads_with_its_name_in_the_header(host: str, names: list[str]) -> None:
    created = httpx.post(f"{host}/v1/acme/support/conversations", json={"bundle": "hello"}, headers=USER)
    conversation = f"{host}/v1/acme/support/conversations/{created.json()['id']}"
    files = [("file", (name, b"some plain text", "text/plain")) for name in names]
    started = httpx.post(f"{conversation}/turns", data={"message": "keep"}, files=files, headers=USER, timeout=30)
    if started.status_code != 202:  # a name no file can have ("..", NUL): refused, not a server error
        assert started.status_code == 400, (names, started.text[:300])
        return
    httpx.get(f"{host}{started.json()['events_url']}", headers=USER, timeout=30)  # until the turn ends
    detail = httpx.get(conversation, headers=USER).json()
    (turn,) = detail["turns"]
    assert len(turn["attachments"]) == len(names)
    for attachment in turn["attachments"]:
        answer = httpx.get(f"{conversation}/files/{quote(attachment['path'], safe='')}", headers=USER)
        assert answer.status_code == 200, (attachment, answer.text[:300])
        header = answer.headers["content-disposition"]
        assert header.isascii()
        assert name_in(header) == attachment["path"].rsplit("/", 1)[-1]


LAST_EVENT_IDS = st.one_of(
    st.text(st.characters(max_codepoint=0xFF, exclude_categories=["Cc"])),
    st.integers(0, 6000).map(lambda digits: "9" * digits),
    st.text(st.characters(categories=["Nd", "No"], max_codepoint=0xFF), min_size=1),
)


@given(tail=LAST_EVENT_IDS, prefixed=st.booleans(), in_query=st.booleans())
@SETTINGS
def test_any_last_event_id_resumes_or_is_a_400(
    host: str, known_ids: dict[str, str], tail: str, prefixed: bool, in_query: bool
) -> None:
    turn = known_ids["turn_id"]
    url = f"{host}/v1/acme/support/conversations/{known_ids['conversation_id']}/turns/{turn}/events"
    value = f"{turn}:{tail}" if prefixed else tail
    if in_query:
        answer = httpx.get(url, params={"last_event_id": value}, headers=USER, timeout=30)
    else:
        raw = value.strip().encode("latin-1")  # a header carries Latin-1 (httpx sends str as ASCII only)
        answer = httpx.get(url, headers={**USER, "Last-Event-ID": raw}, timeout=30)
    assert answer.status_code in (200, 400), (value[:80], answer.status_code, answer.text[:300])
    if answer.status_code == 400:
        assert answer.json()["error"]["code"] == "last_event_id_invalid"
