"""The example bundles in ``bundles/``, loaded through their installed entry points."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from berth.testing import BundleHost

HostFactory = Callable[..., BundleHost]


def test_hello_has_a_tool_a_skill_and_a_widget(bundle_host: HostFactory) -> None:
    host = bundle_host(["hello"])
    generation = host.generation("hello")
    assert generation.catalog.tool_ids == ["hello.greet"]
    assert list(generation.skills) == ["greeting-etiquette"]
    assert generation.skills["greeting-etiquette"].sources[0]["url"].startswith("https://")
    assert list(generation.widgets) == ["greeter"]
    assert host.call_tool("hello", "hello.greet", {"name": "Ada", "language": "fr"}) == "Bonjour, Ada!"


def test_docs_indexes_its_handbook_and_searches_it(bundle_host: HostFactory) -> None:
    host = bundle_host(["docs"])
    generation = host.generation("docs")
    assert sorted(generation.knowledge) == ["berth-docs", "berth-source", "handbook"]
    handbook = generation.knowledge["handbook"]
    host.run(handbook.refresh())
    assert sorted(host.run(handbook.store.files())) == ["expenses.md", "onboarding.md", "vacation.md"]
    results = host.call_tool("docs", "docs.search_docs", {"query": "vacation days"})
    assert results[0] == {"path": "ks:handbook/vacation.md", "title": "Vacation policy", "score": 7}


def test_docs_props_limit_the_results(bundle_host: HostFactory) -> None:
    host = bundle_host({"docs": {"source": {"entry_point": "docs"}, "props": {"max_results": 1}}})
    assert len(host.call_tool("docs", "docs.search_docs", {"query": "vacation expenses"})) == 1


class RecordingSearch(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        RecordingSearch.seen.append({"auth": self.headers["Authorization"], "body": body})
        payload = json.dumps({"results": [{"path": "remote", "title": body["query"]}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def search_server() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), RecordingSearch)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/search"
    finally:
        server.shutdown()


def test_docs_remote_search_sends_the_bundle_secret(
    bundle_host: HostFactory, search_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_DOCS_SEARCH_KEY", "remote-search-key-123")
    host = bundle_host(
        {"docs": {"source": {"entry_point": "docs"}, "props": {"remote_search_url": search_server, "max_results": 2}}},
        bundle_secrets={"docs": {"search_api_key": "env:TEST_DOCS_SEARCH_KEY"}},
    )
    results = host.call_tool("docs", "docs.search_docs", {"query": "holidays"})
    assert results == [{"path": "remote", "title": "holidays"}]
    assert RecordingSearch.seen[-1] == {
        "auth": "Bearer remote-search-key-123",
        "body": {"query": "holidays", "limit": 2},
    }


def test_ops_copilot_sorts_incident_notes(bundle_host: HostFactory) -> None:
    host = bundle_host(["ops-copilot"])
    assert host.generation("ops-copilot").agent is not None
    notes = ["14:05 paged on-call", "no time here", "9:30 deploy started", "14:20 - rollback"]
    assert host.call_tool("ops-copilot", "ops-copilot.incident_timeline", {"notes": notes}) == [
        {"time": "09:30", "event": "deploy started"},
        {"time": "14:05", "event": "paged on-call"},
        {"time": "14:20", "event": "rollback"},
    ]
