"""A real HTTP server on 127.0.0.1 for tool-pack tests: web pages, failures and a SearxNG-style search API."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

ARTICLE_HTML = """<!doctype html>
<html><head><title>Harbour Berths &amp; Moorings</title></head>
<body>
<nav><a href="/">Home</a> | <a href="/about">About us</a> | <a href="/contact">Contact</a></nav>
<main><article>
<h1>Harbour Berths and Moorings</h1>
<p>A berth is a designated location in a port or harbour used for mooring vessels when they are not at sea.
Berths give ships a safe place to load and unload cargo and passengers.</p>
<p>Larger ports assign berths by length and draught, and harbour masters keep a schedule of arrivals so
that every vessel finds its berth free when it arrives.</p>
</article></main>
<footer>Copyright 2024 Example Ports Ltd. All rights reserved. Cookie settings. Privacy policy.</footer>
</body></html>"""

SEARCH_RESULTS = {
    "query": "berths",
    "results": [
        {
            "url": "https://ports.example/berths",
            "title": "What is a berth?",
            "content": "A berth is a designated location in a port.",
            "publishedDate": "2024-05-01T10:00:00",
        },
        {"url": "https://ports.example/berths?utm_source=searx", "title": "duplicate", "content": "same page"},
        {"url": "ftp://files.example/berths.txt", "title": "not citable", "content": "ftp"},
        {"title": "no url at all", "content": "dropped"},
        {"url": "https://harbours.example/moorings", "title": "Moorings", "content": "Mooring buoys and piles."},
    ],
}

HUGE_BODY_BYTES = 64 * 1024 * 1024
_CHUNK = b"x" * 65536


@dataclass
class PlaygroundServer:
    """A running server: its base URL and what it saw (search requests, bytes of the huge body sent)."""

    base_url: str
    search_requests: list[dict[str, Any]] = field(default_factory=list)
    huge_bytes_sent: int = 0
    huge_finished: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str) -> str:
        """The absolute URL of ``path`` on this server."""
        return self.base_url + path


def _handler_for(server: PlaygroundServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

        def reply(self, status: int, body: bytes, content_type: str | None, **headers: str) -> None:
            self.send_response(status)
            if content_type is not None:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name.replace("_", "-"), value)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            route = routes.get(path)
            if route is None:
                self.reply(404, b"not found", "text/plain")
            else:
                route(self)

        def article(self) -> None:
            self.reply(200, ARTICLE_HTML.encode(), "text/html; charset=utf-8")

        def untyped_article(self) -> None:
            self.reply(200, ARTICLE_HTML.encode(), None)

        def tiny(self) -> None:
            body = b"<html><head><title>Tiny &amp; Short</title></head><body><p>Hello harbour.</p></body></html>"
            self.reply(200, body, "text/html")

        def empty_page(self) -> None:
            self.reply(200, b"<html><head><title>Nothing  here</title></head><body></body></html>", "text/html")

        def plain(self) -> None:
            self.reply(200, "Line one\nLine two: café\n".encode(), "text/plain; charset=utf-8")

        def latin1(self) -> None:
            self.reply(200, "Crème brûlée".encode("iso-8859-1"), "text/plain; charset=ISO-8859-1")

        def data(self) -> None:
            self.reply(200, json.dumps({"berths": 12, "port": "Example"}).encode(), "application/json")

        def pdf(self) -> None:
            self.reply(200, b"%PDF-1.7\n%binary", "application/pdf")

        def redirect(self) -> None:
            self.reply(302, b"", "text/plain", Location="/article")

        def redirect_loop(self) -> None:
            self.reply(302, b"", "text/plain", Location="/redirect-loop")

        def redirect_to_file(self) -> None:
            self.reply(302, b"", "text/plain", Location="file:///etc/passwd")

        def redirect_to_localhost(self) -> None:
            port = self.server.server_address[1]
            self.reply(302, b"", "text/plain", Location=f"http://localhost:{port}/article")

        def missing(self) -> None:
            self.reply(404, b"no such page", "text/plain")

        def broken(self) -> None:
            self.reply(500, b"internal error", "text/plain")

        def huge(self) -> None:
            # No Content-Length: the client only learns the size by reading, and must stop early.
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            try:
                while server.huge_bytes_sent < HUGE_BODY_BYTES:
                    self.wfile.write(_CHUNK)
                    server.huge_bytes_sent += len(_CHUNK)
            except OSError:
                pass
            finally:
                server.huge_finished.set()

        def huge_declared(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(HUGE_BODY_BYTES))
            self.end_headers()
            self.wfile.write(_CHUNK)

        def slow(self) -> None:
            server.release.wait(30)
            self.reply(200, b"too late", "text/plain")

        def search(self) -> None:
            query = {name: values[0] for name, values in parse_qs(urlsplit(self.path).query).items()}
            server.search_requests.append({"params": query, "headers": dict(self.headers.items())})
            self.reply(200, json.dumps(SEARCH_RESULTS).encode(), "application/json")

        def search_broken(self) -> None:
            self.reply(500, b"engine down", "text/plain")

        def search_not_json(self) -> None:
            self.reply(200, b"<html>login</html>", "text/html")

    routes: dict[str, Callable[[Handler], None]] = {
        "/article": Handler.article,
        "/untyped-article": Handler.untyped_article,
        "/tiny": Handler.tiny,
        "/empty-page": Handler.empty_page,
        "/plain.txt": Handler.plain,
        "/latin1.txt": Handler.latin1,
        "/data.json": Handler.data,
        "/paper.pdf": Handler.pdf,
        "/redirect": Handler.redirect,
        "/redirect-loop": Handler.redirect_loop,
        "/redirect-to-file": Handler.redirect_to_file,
        "/redirect-to-localhost": Handler.redirect_to_localhost,
        "/missing": Handler.missing,
        "/broken": Handler.broken,
        "/huge": Handler.huge,
        "/huge-declared": Handler.huge_declared,
        "/slow": Handler.slow,
        "/search": Handler.search,
        "/search-broken": Handler.search_broken,
        "/search-not-json": Handler.search_not_json,
        "/search-slow": Handler.slow,
    }
    return Handler


@pytest.fixture
def playground() -> Iterator[PlaygroundServer]:
    """A threaded HTTP server on 127.0.0.1 (a free port) serving pages, failures and a SearxNG-style API."""
    state = PlaygroundServer(base_url="")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(state))
    httpd.daemon_threads = True
    state.base_url = f"http://127.0.0.1:{httpd.server_address[1]}"
    # A short poll interval keeps shutdown() quick at teardown.
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), name="web-playground", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
