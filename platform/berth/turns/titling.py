"""Titling conversations in the background after their first answered turn (SPEC §4.1).

The host asks :meth:`ConversationTitler.should_title` once per conversation (one read, then remembered)
and hands the ended turn to :meth:`ConversationTitler.title`, which runs off the turn's critical path:
``turn.completed`` has been sent; the summarizer's title is stored, streamed to the turn's subscribers
as ``conversation.titled``, and the turn's event log is closed after it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from berth.runtime.events import TurnEvent
from berth.runtime.loop import ModelResolver, model_label
from berth.runtime.metering import ModelCall
from berth.runtime.titles import make_title
from berth.storage.meta import MetaStore
from berth.storage.scope import ConversationScope

if TYPE_CHECKING:
    from berth.turns.running import RunningTurn
    from berth.usage import UsageLedger

log = logging.getLogger(__name__)

TITLED_KEPT = 10_000
"""Conversations remembered as decided (past it, the oldest are asked about again: one read each)."""
TITLE_TIMEOUT_S = 30.0
"""How long the summarizer may take over a title; the turn's event stream stays open until then."""

ConversationKey = tuple[str, str, str, str]


class ConversationTitler:
    """Makes each conversation's title once, in background tasks it owns until :meth:`aclose`.

    :param meta: where titles are stored.
    :param models: the model resolver of a scope (the title comes from its ``summarizer`` role).
    :param enabled: whether ``react.conversation_titles`` is on for a tenant and project.
    :param usage: records the title call's usage, when usage is accounted.
    """

    def __init__(
        self,
        meta: MetaStore,
        models: Callable[[ConversationScope], ModelResolver],
        enabled: Callable[[str, str], bool],
        usage: UsageLedger | None = None,
    ) -> None:
        self._meta = meta
        self._models = models
        self._enabled = enabled
        self._usage = usage
        self._decided: dict[ConversationKey, None] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._titling: dict[asyncio.Task[None], ConversationKey] = {}

    async def should_title(self, scope: ConversationScope) -> bool:
        """True once per conversation: when titles are on and it has no title from the user or the summarizer."""
        key = (scope.tenant, scope.project, scope.user_id, scope.conversation_id)
        if key in self._decided or not self._enabled(scope.tenant, scope.project):
            return False
        meta = await self._meta.get_conversation(scope)
        self._decided[key] = None
        if len(self._decided) > TITLED_KEPT:
            del self._decided[next(iter(self._decided))]
        return meta is not None and meta.title_source not in ("user", "summary")

    def start(self, running: RunningTurn, prompt: str, answer: str | None) -> None:
        """Title ``running``'s conversation in the background; the task closes the turn's event log."""
        scope = running.scope
        task = asyncio.create_task(self._title(running, prompt, answer), name=f"title {scope.conversation_id}")
        self._tasks.add(task)
        self._titling[task] = (scope.tenant, scope.project, scope.user_id, scope.conversation_id)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda done: self._titling.pop(done, None))

    async def forget(self, scope: ConversationScope) -> None:
        """Stop titling the conversation ``scope`` names (it is being deleted): cancel its title, if one is being
        made, wait until it has stopped, and forget that it was decided."""
        key = (scope.tenant, scope.project, scope.user_id, scope.conversation_id)
        self._decided.pop(key, None)
        tasks = [task for task, titled in self._titling.items() if titled == key]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)

    async def _title(self, running: RunningTurn, prompt: str, answer: str | None) -> None:
        scope = running.scope
        try:
            async with asyncio.timeout(TITLE_TIMEOUT_S):
                model_ref, provider = self._models(scope)("summarizer")
                made = await make_title(provider, prompt, answer)
            if self._usage is not None:
                call = ModelCall(model_label(model_ref), "title", made.usage, datetime.now(UTC))
                await self._usage.record_call(scope, running.turn_id, running.bundle_id, call)
            if made.title is not None and await self._meta.set_title(scope, made.title, source="summary"):
                titled = {"conversation_id": scope.conversation_id, "title": made.title}
                await running.log.append(TurnEvent("conversation.titled", titled))
        except Exception:  # a title is a nicety: the conversation keeps its provisional one
            log.warning("could not title conversation %s", scope.conversation_id, exc_info=True)
        finally:
            await running.log.close()

    async def aclose(self) -> None:
        """Cancel the titles still being made (their turns' logs close) and wait for them briefly."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)
