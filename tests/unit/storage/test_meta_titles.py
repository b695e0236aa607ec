"""The embedded meta store's titles: who set them, and a database made before titles had a source."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from berth.default_plugins.storage.sqlite_meta import DATABASE_FILE, SqliteMetaStore
from berth.storage.meta import ConversationMeta
from berth.storage.scope import ConversationScope

NOW = datetime(2026, 11, 25, tzinfo=UTC)
SCOPE = ConversationScope(tenant="acme", project="support", user_id="u1", conversation_id="c_1")


async def test_a_provisional_title_gives_way_to_the_summary_and_the_summary_never_to_the_user(tmp_path: Path) -> None:
    store = SqliteMetaStore(tmp_path)
    await store.open()
    try:
        await store.create_conversation(ConversationMeta(SCOPE, None, "hello", NOW, NOW))
        await store.touch_conversation(SCOPE, at=NOW, title="what is the weather")
        meta = await store.get_conversation(SCOPE)
        assert meta is not None and (meta.title, meta.title_source) == ("what is the weather", "message")
        await store.touch_conversation(SCOPE, at=NOW, title="a later message")  # keeps the first
        assert await store.set_title(SCOPE, "Weather", source="summary")
        assert await store.set_title(SCOPE, "Mine", source="user")
        assert not await store.set_title(SCOPE, "Summary again", source="summary")
        meta = await store.get_conversation(SCOPE)
        assert meta is not None and (meta.title, meta.title_source) == ("Mine", "user")
        other = ConversationScope(tenant="acme", project="support", user_id="u2", conversation_id="c_1")
        assert not await store.set_title(other, "Not theirs", source="user")
    finally:
        await store.aclose()


async def test_a_database_from_before_title_sources_opens_and_keeps_its_rows(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / DATABASE_FILE) as old:
        old.execute(
            "CREATE TABLE conversations (tenant TEXT NOT NULL, project TEXT NOT NULL, user_id TEXT NOT NULL, "
            "conversation_id TEXT NOT NULL, title TEXT, bundle TEXT, created_at TEXT NOT NULL, "
            "updated_at TEXT NOT NULL, PRIMARY KEY (tenant, project, user_id, conversation_id))"
        )
        old.execute(
            "INSERT INTO conversations VALUES ('acme', 'support', 'u1', 'c_1', 'Old title', 'hello', ?, ?)",
            (NOW.isoformat(), NOW.isoformat()),
        )
    store = SqliteMetaStore(tmp_path)
    await store.open()
    try:
        meta = await store.get_conversation(SCOPE)
        assert meta is not None and (meta.title, meta.title_source) == ("Old title", None)
        assert await store.set_title(SCOPE, "Summarized", source="summary")
    finally:
        await store.aclose()
