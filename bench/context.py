"""Benchmark: prompt-cache hit share and render time of Berth's context engine.

Replays a generated conversation (40 turns, 8 tool rounds each, 9 model requests per turn) through
``berth.runtime.render.TimelineRenderer`` and a model of Anthropic prompt caching:

* a request is a list of content blocks (the renderer's parts); the cache key of a prefix is its
  content blocks, so the same text split into different blocks is a different prefix;
* a breakpoint on a block writes the prefix ending there to the cache (or refreshes it); prefixes
  are written only at breakpoints;
* a prefix is served from the cache only if it ends at one of this request's breakpoints, was written
  as a breakpoint before, and was written or used within the last 5 minutes (using it refreshes it);
* at most 4 breakpoints per request.

Anthropic also looks for a written prefix at the block boundaries before each breakpoint ("about 20
blocks"). The model runs twice: ``strict`` (no look-back: a prefix must end exactly at a breakpoint)
and ``look-back 20`` (each breakpoint also matches a prefix ending up to 20 blocks before it, the
closest match wins). Berth's checkpoints do not rely on the look-back; single-breakpoint strategies do.

It prints, side by side in one run, the share of input tokens served from cache (all requests, the
first request of each turn, and rounds 2+) for Berth's checkpoints, for a breakpoint on the last
message only, for one breakpoint before SOURCES POOL/ANNOUNCE, and for no caching; then the render time
per round at 10, 100 and 1,000 blocks for the incremental renderer against a cold render of the same
timeline. Tokens are estimated at four characters each.

It also replays the conversation with compaction, as the loop runs it (before a round whose prompt is over 90%
of ``--budget``, the oldest turns become a summary; a deterministic summarizer stands in for the model), and
prints for both runs the uncached input tokens by cause: **new content** (no earlier request sent that prefix;
of it, SOURCES POOL and ANNOUNCE, which the renderer rebuilds after the last checkpoint every round),
**checkpoint moves** (the prefix was sent before but not written where this request's breakpoints look),
**compaction** (the first request after a compaction, whose prefix is new), **TTL expiry** (written, but more
than 5 minutes ago).
Usage: ``python bench/context.py [--turns N] [--rounds N] [--compaction-turns N] [--budget TOKENS ...]``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from _machine import header

from berth.runtime.announce import AnnounceState
from berth.runtime.blocks import Block, BlockType
from berth.runtime.compaction import SummaryRequest, compact_timeline, estimate_prompt_tokens, estimate_tokens
from berth.runtime.render import PromptPart, TimelineRenderer, render_timeline
from berth.runtime.sources import Source, SourceRow, SourcesPool, source_line
from berth.runtime.timeline import Timeline

CACHE_TTL = timedelta(minutes=5)
MAX_BREAKPOINTS = 4
LOOKBACK_BLOCKS = 20
"""Block boundaries before a breakpoint that Anthropic also checks for a written prefix."""
SYSTEM = "You are a careful research agent.\n" + "\n".join(
    f"tool web.tool_{n}: does thing {n} with params {{query: str, limit: int}}" for n in range(60)
)
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
IMAGE_TOKENS = 1600
"""What Anthropic counts for an image of about 1.15 megapixels (``width x height / 750``), whatever its file size."""
IMAGE_PATH = "fi:turn_1.attachments/screen.png"


def words(seed: int, count: int) -> str:
    """Deterministic filler text (no randomness, so every run replays the same conversation)."""
    vocabulary = ["alpha", "beta", "gamma", "delta", "schema", "invoice", "latency", "cache", "region", "quota"]
    return " ".join(vocabulary[(seed * 7 + i * 3) % len(vocabulary)] + str((seed + i) % 97) for i in range(count))


def block(type_: BlockType, path: str, turn_id: str, at: datetime, **fields: object) -> Block:
    fields.setdefault("author", "runtime")
    return Block(type=type_, path=path, turn_id=turn_id, ts=at, **fields)  # type: ignore[arg-type]


def head_blocks(turn_id: str, at: datetime, seed: int) -> list[Block]:
    return [
        block(BlockType.TURN_HEADER, f"ar:{turn_id}.turn.header", turn_id, at),
        block(BlockType.USER_PROMPT, f"ar:{turn_id}.user.prompt", turn_id, at, text=words(seed, 40), author="user"),
    ]


def round_blocks(turn_id: str, call_id: str, at: datetime, seed: int, sources: Sequence[SourceRow] = ()) -> list[Block]:
    """One tool round; a result that brought ``sources`` lists them as the runtime's tool results do."""
    listing = (
        "".join(
            [
                f"\nsources: {', '.join(f'[[S:{row.sid}]]' for row in sources)}",
                *(f"\n{source_line(r)}" for r in sources),
            ]
        )
        if sources
        else ""
    )
    return [
        block(
            BlockType.REACT_NOTES,
            f"ar:{turn_id}.react.notes.{call_id}",
            turn_id,
            at,
            text=words(seed, 25),
            call_id=call_id,
        ),
        block(
            BlockType.REACT_TOOL_CALL,
            f"tc:{turn_id}.{call_id}.call",
            turn_id,
            at,
            data={"tool_id": "web.search", "params": {"query": words(seed, 4)}},
            mime="application/json",
            author="assistant",
        ),
        block(
            BlockType.REACT_TOOL_RESULT,
            f"tc:{turn_id}.{call_id}.result",
            turn_id,
            at,
            text=words(seed, 150 + (seed % 5) * 60) + listing,
            author="tool",
        ),
    ]


def final_blocks(turn_id: str, at: datetime, seed: int) -> list[Block]:
    return [
        block(
            BlockType.ASSISTANT_COMPLETION,
            f"ar:{turn_id}.assistant.completion",
            turn_id,
            at,
            text=words(seed, 120),
            author="assistant",
        )
    ]


Strategy = Callable[[Sequence[PromptPart]], list[int]]


def berth_checkpoints(parts: Sequence[PromptPart]) -> list[int]:
    """Berth: the system message plus the previous-turn, pre-tail and tail checkpoints."""
    return [i for i, part in enumerate(parts) if part.cache_checkpoint is not None]


def last_message_only(parts: Sequence[PromptPart]) -> list[int]:
    """The common default: one breakpoint on the last content block of the request."""
    return [len(parts) - 1]


def last_timeline_block(parts: Sequence[PromptPart]) -> list[int]:
    """A fairer single breakpoint: on the last block before the volatile SOURCES POOL and ANNOUNCE."""
    return [max(i for i, part in enumerate(parts) if part.section in ("system", "history", "current_turn"))]


def no_caching(parts: Sequence[PromptPart]) -> list[int]:
    """No breakpoints at all."""
    return []


@dataclass
class CacheModel:
    """Anthropic-style prompt cache: prefixes written at breakpoints, served only at breakpoints, 5-minute TTL.

    ``lookback`` is how many block boundaries before each breakpoint are also checked for a written
    prefix (0: only the breakpoint itself).
    """

    lookback: int = 0
    written: dict[str, datetime] = field(default_factory=dict)
    input_tokens: int = 0
    cached_tokens: int = 0
    first_round_input: int = 0
    first_round_cached: int = 0
    sent: set[str] = field(default_factory=set)
    """Every prefix (at every block boundary) any earlier request sent: what a cache could have held."""
    uncached: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0))
    """The uncached input tokens by cause (see :data:`CAUSES`)."""
    volatile_tokens: int = 0
    """Of the new content: SOURCES POOL and ANNOUNCE, rebuilt after the last checkpoint every round."""

    def request(
        self,
        parts: Sequence[PromptPart],
        breakpoints: list[int],
        now: datetime,
        *,
        first_round: bool,
        after_compaction: bool = False,
    ) -> None:
        assert len(breakpoints) <= MAX_BREAKPOINTS
        running = hashlib.sha256()
        keys: list[str] = []
        tokens: list[int] = []
        total = 0
        for part in parts:
            running.update(part.text.encode())
            running.update(b"\x00")
            for media in part.media:  # an image block's content is its bytes
                running.update(hashlib.sha256(media.data).digest())
                total += IMAGE_TOKENS
            keys.append(running.hexdigest())
            total += estimate_tokens(part.text)
            tokens.append(total)
        served: int | None = None
        for index in breakpoints:
            for candidate in range(index, max(index - self.lookback, 0) - 1, -1):
                written_at = self.written.get(keys[candidate])
                if written_at is not None and now - written_at <= CACHE_TTL:
                    if served is None or candidate > served:
                        served = candidate
                    break
        hit = 0
        if served is not None:
            hit = tokens[served]
            self.written[keys[served]] = now  # a cache hit refreshes the entry's lifetime
        self.attribute(keys, tokens, breakpoints, hit, after_compaction=after_compaction)
        if not after_compaction:
            self.volatile_tokens += sum(
                estimate_tokens(part.text) for part in parts if part.section in ("sources", "announce")
            )
        for index in breakpoints:
            self.written[keys[index]] = now
        self.sent.update(keys)
        self.input_tokens += total
        self.cached_tokens += hit
        if first_round:
            self.first_round_input += total
            self.first_round_cached += hit

    def attribute(
        self, keys: list[str], tokens: list[int], breakpoints: list[int], hit: int, *, after_compaction: bool
    ) -> None:
        """Split this request's uncached tokens by cause: after a compaction all of them are the compaction's;
        otherwise what no earlier request sent is new content, a prefix written at a breakpoint but expired is
        TTL expiry, and a prefix sent before but not written where this request's breakpoints look is a
        checkpoint move."""
        total = tokens[-1] if tokens else 0
        if after_compaction:
            self.uncached["compaction"] += total - hit
            return
        seen = max((tokens[i] for i, key in enumerate(keys) if key in self.sent), default=0)
        expired = max(
            (
                tokens[candidate]
                for index in breakpoints
                for candidate in range(index, max(index - self.lookback, 0) - 1, -1)
                if keys[candidate] in self.written
            ),
            default=0,
        )
        reachable = max(hit, min(expired, seen))
        self.uncached["new content"] += total - max(seen, hit)
        self.uncached["TTL expiry"] += reachable - hit
        self.uncached["checkpoint moves"] += max(seen, hit) - reachable

    def share(self) -> float:
        """Share of all input tokens served from the cache."""
        return self.cached_tokens / self.input_tokens

    def first_round_share(self) -> float:
        """Share of the input tokens of each turn's first request served from the cache."""
        return self.first_round_cached / self.first_round_input

    def later_rounds_share(self) -> float:
        """Share of the input tokens of rounds 2+ (multi-round turns) served from the cache."""
        return (self.cached_tokens - self.first_round_cached) / (self.input_tokens - self.first_round_input)


CacheModels = dict[tuple[str, int], CacheModel]
CAUSES = ("new content", "checkpoint moves", "compaction", "TTL expiry")
"""Why input tokens were not served from the cache."""


@dataclass
class Compaction:
    """Compaction during a replay, as the loop runs it: before a round whose prompt is over ``threshold`` of
    ``budget``, the oldest turns become a summary (a deterministic summarizer stands in for the model)."""

    budget: int
    threshold: float = 0.9
    count: int = 0

    def over(self, prompt_tokens: int) -> bool:
        """Whether a prompt this size is compacted first."""
        return prompt_tokens > self.threshold * self.budget

    def run(self, timeline: Timeline, now: datetime, system: str, pool: SourcesPool, announce: AnnounceState) -> bool:
        """Compact ``timeline``; whether it was."""

        def estimate(candidate: Timeline) -> int:
            return estimate_prompt_tokens(render_timeline(candidate, system=system, sources=pool, announce=announce))

        async def summarize(request: SummaryRequest) -> str:
            return words(len(request.turn_ids) * 31 + self.count, min(request.max_tokens // 3, 400))

        outcome = asyncio.run(
            compact_timeline(
                timeline,
                summarizer=summarize,
                context_budget_tokens=self.budget,
                now=now,
                threshold=self.threshold,
                estimate=estimate,
            )
        )
        self.count += outcome.applied
        return outcome.applied


def replay(
    turns: int,
    rounds: int,
    strategies: dict[str, Strategy],
    compaction: Compaction | None = None,
    image: bytes | None = None,
) -> tuple[CacheModels, int]:
    """Replay the conversation once, feeding every request to a strict and a look-back cache model per strategy
    (compacting as the loop does when ``compaction`` is given; with ``image``, turn 1 attaches it, shown to the
    model as an image)."""
    models = {(name, lookback): CacheModel(lookback) for name in strategies for lookback in (0, LOOKBACK_BLOCKS)}
    timeline = Timeline()
    renderer = TimelineRenderer()
    pool = SourcesPool()
    now = T0
    requests = 0
    for turn in range(1, turns + 1):
        turn_id = f"turn_{turn}"
        timeline.contribute(*head_blocks(turn_id, now, turn))
        if image is not None and turn == 1:
            text = f"(image/png, {len(image)} bytes: shown to you as an image)"
            attached = block(
                BlockType.USER_ATTACHMENT, IMAGE_PATH, turn_id, now, text=text, mime="image/png", author="user"
            )
            timeline.contribute(attached.model_copy(update={"meta": {"media": "image", "name": "screen.png"}}))
            renderer.media[IMAGE_PATH] = image
        for round_number in range(1, rounds + 2):
            announce = AnnounceState(
                iteration=round_number,
                max_iterations=rounds + 1,
                budget_tokens_left=200_000 - round_number * 1_000,
                now=now,
                user_timezone="Europe/Berlin",
            )
            prompt = renderer.render(timeline, system=SYSTEM, sources=pool, announce=announce)
            compacted = False
            if compaction is not None and compaction.over(estimate_prompt_tokens(prompt)):
                compacted = compaction.run(timeline, now, SYSTEM, pool, announce)
                prompt = renderer.render(timeline, system=SYSTEM, sources=pool, announce=announce)
            parts = prompt.parts()
            for (name, _), model in models.items():
                model.request(
                    parts, strategies[name](parts), now, first_round=round_number == 1, after_compaction=compacted
                )
            requests += 1
            now += timedelta(seconds=20)
            seed = turn * 100 + round_number
            if round_number <= rounds:
                merge = pool.merge([Source(url=f"https://example.org/{turn}/{round_number}", title=words(seed, 6))])
                pool = merge.pool
                rows = [row for sid in merge.sids if (row := pool.get(sid)) is not None]
                timeline.contribute(*round_blocks(turn_id, f"c{round_number}", now, seed, rows))
            else:
                timeline.contribute(*final_blocks(turn_id, now, seed))
        now += timedelta(seconds=90)  # the user reads the answer and asks again
    return models, requests


def timeline_of(size: int) -> Timeline:
    """A timeline of about ``size`` blocks: whole turns of 8 rounds, the last one open."""
    timeline = Timeline()
    turn = 0
    while len(timeline) < size:
        turn += 1
        turn_id = f"turn_{turn}"
        timeline.contribute(*head_blocks(turn_id, T0, turn))
        for r in range(1, 9):
            if len(timeline) >= size:
                break
            timeline.contribute(*round_blocks(turn_id, f"c{r}", T0, turn * 10 + r))
        else:
            timeline.contribute(*final_blocks(turn_id, T0, turn))
    return timeline


def render_times(size: int, rounds: int = 30) -> tuple[float, float]:
    """Milliseconds per round: incremental renderer (only new blocks rendered) and a cold render."""
    announce = AnnounceState(iteration=1, max_iterations=15, budget_tokens_left=100_000, now=T0, user_timezone="UTC")
    pool = SourcesPool()
    timeline = timeline_of(size)
    turn_id = timeline.blocks[-1].turn_id
    renderer = TimelineRenderer()
    renderer.render(timeline, system=SYSTEM, sources=pool, announce=announce)
    extra = [round_blocks(turn_id, f"x{n}", T0, n) for n in range(rounds)]
    started = time.perf_counter()
    for blocks in extra:
        timeline.contribute(*blocks)
        renderer.render(timeline, system=SYSTEM, sources=pool, announce=announce)
    incremental = (time.perf_counter() - started) * 1000 / rounds
    started = time.perf_counter()
    for _ in range(rounds):
        render_timeline(timeline, system=SYSTEM, sources=pool, announce=announce)
    cold = (time.perf_counter() - started) * 1000 / rounds
    return incremental, cold


def print_causes(model: CacheModel, label: str) -> None:
    """The uncached input tokens by cause, with each cause's share of all input."""
    uncached = model.input_tokens - model.cached_tokens
    print(f"# uncached input tokens by cause ({label}): {uncached:,} in all")
    for cause in CAUSES:
        tokens = model.uncached[cause]
        print(f"  {cause:<18} {tokens:>11,}  {tokens / model.input_tokens:>6.2%} of input")
        if cause == "new content":
            volatile = model.volatile_tokens
            print(
                f"    of which SOURCES POOL + ANNOUNCE {volatile:>11,}  {volatile / model.input_tokens:>6.2%} of input"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--compaction-turns", type=int, default=60, help="turns of the runs with compaction")
    parser.add_argument(
        "--budget",
        type=int,
        nargs="+",
        default=[120_000, 150_000, 200_000],
        help="context budgets (tokens) of the runs with compaction (150,000 is the default budget)",
    )
    parser.add_argument("--quick", action="store_true", help="4 turns x 2 rounds: a smoke test of the script")
    options = parser.parse_args()
    if options.quick:
        options.turns, options.rounds, options.compaction_turns, options.budget = 4, 2, 12, [6_000]

    strategies: dict[str, Strategy] = {
        "berth checkpoints": berth_checkpoints,
        "last message only": last_message_only,
        "one before the tail": last_timeline_block,
        "no caching": no_caching,
    }
    models, requests = replay(options.turns, options.rounds, strategies)
    print(f"# prompt caching: {options.turns} turns x {options.rounds} tool rounds, {requests} requests")
    print("# share of input tokens served from cache: all requests / first request of a turn / rounds 2+")
    print(f"{'strategy':<22} {'input tokens':>13} {'strict':>24} {f'look-back {LOOKBACK_BLOCKS}':>24}")
    for name in strategies:
        strict, lookback = models[name, 0], models[name, LOOKBACK_BLOCKS]
        cells = [
            f"{m.share():>6.1%} / {m.first_round_share():>6.1%} / {m.later_rounds_share():>6.1%}"
            for m in (strict, lookback)
        ]
        print(f"{name:<22} {strict.input_tokens:>13,} {cells[0]:>24} {cells[1]:>24}")
    uncached = {name: m.input_tokens - m.cached_tokens for (name, lookback), m in models.items() if lookback == 0}
    print(
        f"ratio (strict): berth sends {uncached['last message only'] / max(uncached['berth checkpoints'], 1):.1f}x "
        "fewer uncached tokens than 'last message only'"
    )
    print_causes(models["berth checkpoints", 0], "berth checkpoints, strict")
    print()
    image = os.urandom(1024 * 1024)  # a 1 MB screenshot (its tokens: IMAGE_TOKENS; its bytes key the cache)
    with_image, _ = replay(options.turns, options.rounds, {"berth checkpoints": berth_checkpoints}, image=image)
    strict = with_image["berth checkpoints", 0]
    print(
        f"# a 1 MB image in turn 1 (an image block before turn 1's head checkpoint), {options.turns} turns: "
        f"{strict.share():.1%} of input served from cache (first requests of a turn {strict.first_round_share():.1%}; "
        f"without the image {models['berth checkpoints', 0].share():.1%})"
    )
    print()
    turns = options.compaction_turns
    print(
        f"# with compaction: {turns} turns x {options.rounds} tool rounds, compacting over 90% of the context "
        "budget; berth checkpoints, strict (look-back 20 in brackets); uncached input by cause"
    )
    print(
        f"{'budget':>9} {'compactions':>12} {'cached':>16} {'new content':>12} {'of it pool':>11} "
        f"{'moves':>7} {'compaction':>11} {'TTL':>6}"
    )
    for budget in options.budget:
        compaction = Compaction(budget=budget)
        models, _ = replay(turns, options.rounds, {"berth checkpoints": berth_checkpoints}, compaction)
        strict, lookback = models["berth checkpoints", 0], models["berth checkpoints", LOOKBACK_BLOCKS]
        share = {cause: tokens / strict.input_tokens for cause, tokens in strict.uncached.items()}
        print(
            f"{budget:>9,} {compaction.count:>12} {strict.share():>8.1%} ({lookback.share():.1%}) "
            f"{share['new content']:>12.2%} {strict.volatile_tokens / strict.input_tokens:>11.2%} "
            f"{share['checkpoint moves']:>7.2%} {share['compaction']:>11.2%} {share['TTL expiry']:>6.2%}"
        )
    print("target: >= 98% cached through >= 2 compactions")
    print()
    print("# render time per round (ms)")
    print(f"{'blocks':>8} {'incremental':>12} {'cold render':>12} {'speed-up':>9}")
    for size in (10, 100, 1_000):
        incremental, cold = render_times(size)
        print(f"{size:>8} {incremental:>12.3f} {cold:>12.3f} {cold / incremental:>8.1f}x")


if __name__ == "__main__":
    print(header(), flush=True)
    main()
