"""A real turn stack for tests: bundle registry, store and memory index (SQLite, or PostgreSQL when the test runs
on distributed storage: ``berth.testing.storage``) and a scripted model."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from berth.config import Configuration
from berth.config.models.assembly import ModelRef
from berth.default_plugins.models.scripted import ScriptedProvider
from berth.default_plugins.storage.sqlite import SqliteConversationStore
from berth.default_plugins.storage.sqlite_memory import SqliteMemoryIndex
from berth.host.registry import BundleRegistry
from berth.runtime.events import TurnEvent
from berth.runtime.loop import ModelResolver, TurnInput, TurnResult, TurnRunner
from berth.runtime.memory import Embedder, HashedNgramEmbedder, MemorySearch
from berth.storage.conversations import ConversationStore
from berth.storage.memory import MemoryIndex
from berth.storage.scope import ConversationScope
from berth.testing.storage import current_storage_kind
from berth.tools.packs import ToolPackFactory


def action(tool_id: str, notes: str = "", **params: Any) -> str:
    """A scripted response that calls a tool."""
    body = {"action": "call_tool", "notes": notes, "tool_call": {"tool_id": tool_id, "params": params}}
    return f"<channel:thinking>calling {tool_id}</channel:thinking><channel:action>{json.dumps(body)}</channel:action>"


def complete(answer: str, followups: Sequence[str] = (), notes: str = "") -> str:
    """A scripted response that finishes the turn."""
    body = {"action": "complete", "notes": notes}
    text = f"<channel:thinking>done</channel:thinking><channel:action>{json.dumps(body)}</channel:action>"
    text += f"<channel:answer>{answer}</channel:answer>"
    if followups:
        text += f"<channel:followups>{json.dumps({'followups': list(followups)})}</channel:followups>"
    return text


class Clock:
    """A controllable UTC clock."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.now += timedelta(seconds=seconds)


@dataclass
class TurnHarness:
    """Runs turns of a bundle against a scripted model and records the events."""

    registry: BundleRegistry
    runner: TurnRunner
    model: ScriptedProvider
    summarizer: ScriptedProvider
    store: ConversationStore
    clock: Clock
    scope: ConversationScope
    events: list[TurnEvent] = field(default_factory=list)
    turns: int = 0

    async def turn(
        self,
        bundle_id: str,
        message: str,
        *,
        script: Sequence[str] = (),
        tenant: str = "acme",
        project: str = "support",
        conversation: str | None = None,
        **extra: Any,
    ) -> TurnResult:
        """Run one turn with ``script`` appended to the model's responses."""
        self.model.extend(script)
        self.turns += 1
        scope = self.scope if conversation is None else self.scope.model_copy(update={"conversation_id": conversation})
        async with self.registry.use(bundle_id) as generation:
            context = self.registry.context_for(generation, tenant, project)

            async def record(event: TurnEvent) -> None:
                self.events.append(event)

            turn_id = f"turn_{self.turns}"
            if getattr(self.store, "queued", False):  # berth-postgres's store in queued mode
                # as in a deployment: the API accepts the turn for the queue, a worker claims it, then runs it
                await self.store.conversation(scope).accept_turn(turn_id, accepted_at=self.clock.now, head=())
                await self.store.claim_turn(scope, turn_id)  # type: ignore[attr-defined]
            return await self.runner.run(
                generation,
                context,
                TurnInput(scope=scope, turn_id=turn_id, message=message, **extra),
                record,
            )

    def of_type(self, event_type: str) -> list[dict[str, Any]]:
        """The payloads of the recorded events of one type."""
        return [event.data for event in self.events if event.type == event_type]

    def streamed(self, marker: str = "answer") -> str:
        """The text streamed to one marker."""
        return "".join(e["text"] for e in self.of_type("channel.delta") if e["marker"] == marker)


def write_descriptors(root: Path, bundles: Mapping[str, Any], react: Mapping[str, Any] | None = None) -> Path:
    """Descriptors with tenant acme/support and the given bundles."""
    root.mkdir(parents=True, exist_ok=True)
    platform = {"react": dict(react or {})}
    (root / "assembly.yaml").write_text(
        yaml.safe_dump({"platform": platform, "tenants": {"acme": {"projects": {"support": {}}}}})
    )
    (root / "bundles.yaml").write_text(yaml.safe_dump({"bundles": dict(bundles)}))
    return root


@asynccontextmanager
async def turn_harness(
    tmp_path: Path,
    bundles: Mapping[str, Any],
    react: Mapping[str, Any] | None = None,
    chunk_size: int = 7,
    *,
    models: ModelResolver | None = None,
    tool_packs: Mapping[str, ToolPackFactory] | None = None,
    result_preview_chars: int = 400,
    embedder: Embedder | None = None,
) -> AsyncIterator[TurnHarness]:
    """Start the stack; close it afterwards.

    :param models: resolves model roles instead of the scripted ``model``/``summarizer`` pair (a real
        provider against a fake server); the scripted providers are still created, and stay unused.
    :param tool_packs: the host's tool packs (``{"web": factory}``); bundles may enable only these.
    :param result_preview_chars: how much of a tool result every prompt shows (the platform's default is 6,000).
    :param embedder: the memory index's embedder (the builtin hashed n-grams by default).
    """
    config = Configuration.load(write_descriptors(tmp_path / "descriptors", bundles, react))
    registry = BundleRegistry(config, known_tool_packs=set(tool_packs) if tool_packs is not None else None)
    outcomes = await registry.start()
    assert all(o.ok for o in outcomes), outcomes
    opened = AsyncExitStack()
    store, index = await opened.enter_async_context(_stores(tmp_path))
    model = ScriptedProvider([], chunk_size=chunk_size)
    summarizer = ScriptedProvider([], chunk_size=50, name="summarizer")
    clock = Clock()
    default_ref = ModelRef(provider="scripted", model="script")

    def scripted_models(role: str | None) -> tuple[ModelRef, Any]:
        return (default_ref, summarizer if role == "summarizer" else model)

    def memory(scope: ConversationScope) -> MemorySearch:
        return MemorySearch(index, embedder or HashedNgramEmbedder(), scope=scope)

    runner = TurnRunner(
        store=store,
        models=models or scripted_models,
        tool_packs=tool_packs,
        memory=memory,
        clock=clock,
        result_preview_chars=result_preview_chars,
    )
    scope = ConversationScope(tenant="acme", project="support", user_id="ada", conversation_id="conv1")
    try:
        yield TurnHarness(registry, runner, model, summarizer, store, clock, scope)
    finally:
        await registry.close()
        await opened.aclose()


@asynccontextmanager
async def _stores(tmp_path: Path) -> AsyncIterator[tuple[ConversationStore, MemoryIndex]]:
    """The conversation store and memory index of the storage kind the test runs on."""
    if current_storage_kind() == "distributed":
        from berth_postgres.conversations import PostgresConversationStore
        from berth_postgres.memory import PostgresMemoryIndex
        from berth_postgres.testing import async_scratch_database

        async with async_scratch_database() as dsn:
            store = PostgresConversationStore(dsn, queued=True)
            await store.open()
            index = PostgresMemoryIndex(pool=store.pool)
            await index.open()
            try:
                yield store, index
            finally:
                await index.aclose()
                await store.aclose()
        return
    sqlite = SqliteConversationStore(tmp_path / "var")
    await sqlite.open()
    sqlite_index = SqliteMemoryIndex(tmp_path / "var")
    await sqlite_index.open()
    try:
        yield sqlite, sqlite_index
    finally:
        await sqlite_index.aclose()
        await sqlite.aclose()
