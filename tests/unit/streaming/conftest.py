"""Fixtures shared by the channel-streaming tests: sources to cite, a fake clock, a chunk-driven renderer."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest

from berth.streaming import (
    ChannelRenderer,
    ChannelSpec,
    CitationSource,
    SourceLookup,
    StreamEvent,
    StreamResult,
)

RenderRun = Callable[..., tuple[list[StreamEvent], StreamResult]]


class FakeClock:
    """A clock that advances one second every time it is read: timing without sleeping."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    """A fresh :class:`FakeClock`."""
    return FakeClock()


@pytest.fixture(scope="session")
def sources() -> dict[int, CitationSource]:
    """Sources 1 to 5 with http(s) URLs, titled "Source N" (a plain dict is a ``SourceLookup``)."""
    return {
        sid: CitationSource(sid=sid, url=f"https://example.org/s/{sid}", title=f"Source {sid}") for sid in range(1, 6)
    }


@pytest.fixture(scope="session")
def render() -> RenderRun:
    """Run a :class:`ChannelRenderer` over chunks; return all its events and its result."""

    def run(
        specs: Iterable[ChannelSpec],
        chunks: Iterable[str],
        *,
        sources: SourceLookup | None = None,
        clock: Callable[[], float] | None = None,
    ) -> tuple[list[StreamEvent], StreamResult]:
        renderer = (
            ChannelRenderer(specs, sources=sources)
            if clock is None
            else ChannelRenderer(specs, sources=sources, clock=clock)
        )
        events: list[StreamEvent] = []
        for chunk in chunks:
            events.extend(renderer.feed(chunk))
        events.extend(renderer.finish())
        return events, renderer.result()

    return run
