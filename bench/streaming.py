"""Channel streaming throughput: Berth's incremental parser against a re-scanning regex baseline.

Run: ``.venv/bin/python bench/streaming.py`` (about half a minute). For 16-byte and 1 KB chunks it
prints throughput (MB/s of model output) and the time per chunk (µs) of

* the baseline — what a first implementation usually does: append the chunk to a buffer, re-run a
  channel regex over the whole buffer, re-render the citations of every channel, hold back a
  trailing partial tag or token, and emit what is new since the last chunk;
* ``ChannelRenderer`` — Berth's synchronous core (tags, fences, citations, composite JSON, results);
* ``ChannelStream`` — the same plus the async layer with a primary emitter and one subscriber;

all measured in this run, with the speed-up over the baseline. The baseline's cost grows with the
square of the response length, so it is compared on a 64 KB response; Berth alone is also run on a
2 MB one to show that its cost per byte does not grow. Before timing, the script checks that the
baseline and Berth emit the same text for the document.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time
from collections.abc import Callable

from _machine import header

from berth.streaming import (
    ChannelDelta,
    ChannelEvent,
    ChannelRenderer,
    ChannelSpec,
    ChannelStream,
    CitationSource,
    StreamEvent,
)
from berth.streaming.citations import parse_sids, render_sources

SPECS = [
    ChannelSpec(name="thinking", emit_marker="thinking"),
    ChannelSpec(name="action", format="json", composite=True),
    ChannelSpec(name="answer", emit_marker="answer", replace_citations=True),
    ChannelSpec(name="followups", format="json", emit_marker="followups"),
]
CITING = {"answer"}
SOURCES = {
    sid: CitationSource(sid=sid, url=f"https://example.org/doc/{sid}", title=f"Reference {sid}") for sid in range(1, 21)
}
REPEATS = 5


def make_document(answer_bytes: int) -> str:
    """A realistic final response: thinking, an action, a long cited markdown answer, followups."""
    thinking = "I should compare the two reports and check the 2023 figures against the filings.\n" * 40
    paragraph = (
        "The committee's revenue grew 12% year over year [[S:{a}]], driven by subscriptions "
        "and a `price < cost` correction in Q3 [[S:{a},{b}]]. See the appendix for details [[S:{c}-{d}]].\n\n"
    )
    fence = "```python\nfor row in rows:\n    total += row.amount  # <b>not a tag</b>\n```\n\n"
    parts: list[str] = []
    size = 0
    i = 0
    while size < answer_bytes:
        a = i % 20 + 1
        piece = paragraph.format(a=a, b=(a % 20) + 1, c=a, d=min(a + 2, 20))
        if i % 7 == 6:
            piece += fence
        parts.append(piece)
        size += len(piece)
        i += 1
    answer = "".join(parts)
    return (
        f"<channel:thinking>{thinking}</channel:thinking>\n"
        '<channel:action>{"action": "complete", "notes": "answering from [[S:1]] and [[S:2]]"}'
        "</channel:action>\n"
        f"<channel:answer>{answer}</channel:answer>\n"
        '<channel:followups>{"followups": ["Break it down by region?", "Compare with 2022?"]}'
        "</channel:followups>"
    )


class RescanBaseline:
    """Re-scans the whole buffer with a regex at every chunk (the naive incremental parser)."""

    _CHANNEL = re.compile(r"<channel:([A-Za-z0-9_-]+)>(.*?)(</channel:\1>|\Z)", re.DOTALL | re.IGNORECASE)
    _PARTIAL_TAG = re.compile(r"</?(?:c(?:h(?:a(?:n(?:n(?:e(?:l(?::[A-Za-z0-9_-]*)?)?)?)?)?)?)?)?\Z", re.IGNORECASE)
    _PARTIAL_TOKEN = re.compile(r"\[(?:\[[ \tSs:\d,\-]*\]?)?\Z")
    _TOKEN = re.compile(
        r"\[\[[ \t]*[Ss][ \t]*:[ \t]*(\d+(?:[ \t]*-[ \t]*\d+)?(?:[ \t]*,[ \t]*\d+(?:[ \t]*-[ \t]*\d+)?)*)[ \t]*\]\]"
    )

    def __init__(self, sources: dict[int, CitationSource], citing: set[str]) -> None:
        self._sources = sources
        self._citing = citing
        self._buffer = ""
        self._sent: dict[tuple[str, int], int] = {}

    def feed(self, chunk: str) -> list[tuple[str, int, str]]:
        """Append ``chunk``; return the new text per channel instance."""
        self._buffer += chunk
        return self._scan(final=False)

    def finish(self) -> list[tuple[str, int, str]]:
        """Emit whatever was held back."""
        return self._scan(final=True)

    def _render(self, match: re.Match[str]) -> str:
        sids = parse_sids(match.group(1)) or ()
        known = [self._sources[sid] for sid in sids if sid in self._sources]
        return render_sources(known, "markdown") if known and len(known) == len(sids) else match.group(0)

    def _scan(self, *, final: bool) -> list[tuple[str, int, str]]:
        deltas: list[tuple[str, int, str]] = []
        counts: dict[str, int] = {}
        for match in self._CHANNEL.finditer(self._buffer):
            name = match.group(1).lower()
            instance = counts.get(name, 0)
            counts[name] = instance + 1
            body = match.group(2)
            cites = name in self._citing
            if not match.group(3) and not final:
                held = self._PARTIAL_TAG.search(body)
                if held:
                    body = body[: held.start()]
                if cites and (held := self._PARTIAL_TOKEN.search(body)):
                    body = body[: held.start()]
            rendered = self._TOKEN.sub(self._render, body) if cites else body
            key = (name, instance)
            sent = self._sent.get(key, 0)
            if len(rendered) > sent:
                deltas.append((name, instance, rendered[sent:]))
                self._sent[key] = len(rendered)
        return deltas


def chunked(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def run_baseline(chunks: list[str]) -> dict[tuple[str, int], str]:
    baseline = RescanBaseline(SOURCES, CITING)
    out: dict[tuple[str, int], list[str]] = {}
    for chunk in chunks:
        for name, instance, text in baseline.feed(chunk):
            out.setdefault((name, instance), []).append(text)
    for name, instance, text in baseline.finish():
        out.setdefault((name, instance), []).append(text)
    return {key: "".join(parts) for key, parts in out.items()}


def run_renderer(chunks: list[str]) -> dict[tuple[str, int], str]:
    renderer = ChannelRenderer(SPECS, sources=SOURCES)
    out: dict[tuple[str, int], list[str]] = {}
    for chunk in chunks:
        for event in renderer.feed(chunk):
            if type(event) is ChannelDelta:
                out.setdefault((event.channel, event.instance), []).append(event.text)
    for event in renderer.finish():
        if type(event) is ChannelDelta:
            out.setdefault((event.channel, event.instance), []).append(event.text)
    renderer.result()
    return {key: "".join(parts) for key, parts in out.items()}


def run_stream(chunks: list[str]) -> dict[tuple[str, int], str]:
    sent: list[StreamEvent] = []
    seen = 0

    def count(event: ChannelEvent) -> None:
        nonlocal seen
        seen += 1

    async def drive() -> None:
        stream = ChannelStream(SPECS, sources=SOURCES, emit=sent.append)
        stream.subscribe("answer", count)
        for chunk in chunks:
            await stream.feed(chunk)
        await stream.finish()

    asyncio.run(drive())
    return {}


BERTH_RUNS = (
    ("Berth ChannelRenderer (sync core)", run_renderer),
    ("Berth ChannelStream (async)", run_stream),
)


def best_time(run: Callable[[list[str]], object], chunks: list[str], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run(chunks)
        best = min(best, time.perf_counter() - started)
    return best


def row(chunk_label: str, name: str, seconds: float, nbytes: int, nchunks: int, baseline: float | None) -> str:
    """One table row; without ``baseline`` the speed-up column is left out."""
    mb_per_s = nbytes / seconds / 1e6
    per_chunk_us = seconds / nchunks * 1e6
    cells = f"| {chunk_label:>6} | {name:<34} | {mb_per_s:>8.2f} | {per_chunk_us:>9.2f} |"
    if baseline is None:
        return cells
    ratio = "1.0x (baseline)" if seconds == baseline else f"{baseline / seconds:,.1f}x faster"
    return f"{cells} {ratio:<17} |"


def main() -> None:
    """Parse the options, check both sides agree, measure, print."""
    global REPEATS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smaller responses, 1 run: a smoke test of the script")
    options = parser.parse_args()
    if options.quick:
        REPEATS = 1
    document = make_document((6 if options.quick else 60) * 1024)
    large = make_document((128 if options.quick else 2048) * 1024)
    nbytes, large_bytes = len(document.encode()), len(large.encode())
    for size in (16, 1024):
        if run_baseline(chunked(document, size)) != run_renderer(chunked(document, size)):
            raise SystemExit(f"baseline and Berth disagree at {size}-byte chunks; the comparison is void")

    print(f"Channel streaming - {nbytes / 1024:.0f} KB response, best of {REPEATS} runs (baseline at 16 B: 1 run)")
    print()
    print("| chunk  | implementation                     |     MB/s |  µs/chunk | vs baseline       |")
    print("|-------:|------------------------------------|---------:|----------:|-------------------|")
    timings: dict[tuple[str, int], tuple[float, int]] = {}
    implementations = (("baseline: regex re-scan per chunk", run_baseline), *BERTH_RUNS)
    for size, label in ((16, "16 B"), (1024, "1 KB")):
        chunks = chunked(document, size)
        baseline = best_time(run_baseline, chunks, 1 if size == 16 else REPEATS)
        timings["baseline: regex re-scan per chunk", size] = (baseline, len(chunks))
        print(row(label, "baseline: regex re-scan per chunk", baseline, nbytes, len(chunks), baseline))
        for name, run in BERTH_RUNS:
            seconds = best_time(run, chunks, REPEATS)
            timings[name, size] = (seconds, len(chunks))
            print(row(label, name, seconds, nbytes, len(chunks), baseline))
    print()
    # the same bytes cost more in 16 B chunks only because there are more feed calls: the difference,
    # per extra call, is the fixed cost of one chunk
    print("Per-chunk overhead (extra time per extra feed call, 16 B vs 1 KB chunks of the same response)")
    print()
    print("| implementation                     | µs/chunk overhead |")
    print("|------------------------------------|------------------:|")
    for name, _ in implementations:
        (small, small_n), (big, big_n) = timings[name, 16], timings[name, 1024]
        print(f"| {name:<34} | {(small - big) / (small_n - big_n) * 1e6:>17.2f} |")
    print()
    print(f"Berth alone on a {large_bytes / 1024 / 1024:.1f} MB response (the baseline is quadratic in the length)")
    print()
    print("| chunk  | implementation                     |     MB/s |  µs/chunk |")
    print("|-------:|------------------------------------|---------:|----------:|")
    for size, label in ((16, "16 B"), (1024, "1 KB")):
        chunks = chunked(large, size)
        for name, run in BERTH_RUNS:
            print(row(label, name, best_time(run, chunks, 1), large_bytes, len(chunks), None))


if __name__ == "__main__":
    print(header(), flush=True)
    main()
