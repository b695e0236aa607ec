"""Live-event inboxes and conversation titles: the parts the HTTP tests cannot reach one by one."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from berth.runtime.blocks import Block, BlockType
from berth.runtime.live import LiveEvent, LiveInbox, LiveInboxClosedError, announce_line
from berth.runtime.titles import TITLE_MAX_CHARS, clean_title

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def inbox() -> LiveInbox:
    return LiveInbox("turn_live1", clock=lambda: NOW)


async def test_events_wait_for_the_next_take_in_order_and_files_get_their_own_folder() -> None:
    box = inbox()
    first = await box.deliver(LiveEvent("followup", "also this"))
    second = await box.deliver(LiveEvent("steer", "no, that", attachments=(("notes.txt", "text/plain", b"hi"),)))
    assert [b.path for b in first.blocks] == ["ar:turn_live1.user.followup.1"]
    assert [b.path for b in second.blocks] == [
        "ar:turn_live1.user.steer.2",
        "fi:turn_live1.attachments/live-2/notes.txt",
    ]
    assert second.block.type == BlockType.USER_STEER and second.blocks[1].text == "hi"
    assert box.steer_waiting()
    taken = box.take()
    assert [r.number for r in taken] == [1, 2]
    assert box.take() == () and not box.steer_waiting()
    assert box.received == taken


async def test_closing_returns_only_what_the_loop_never_took_and_refuses_later_events() -> None:
    box = inbox()
    await box.deliver(LiveEvent("followup", "seen"))
    box.take()
    await box.deliver(LiveEvent("followup", "too late"))
    unseen = box.close()
    assert [r.event.message for r in unseen] == ["too late"]
    assert box.close() == () and box.unseen == unseen
    with pytest.raises(LiveInboxClosedError):
        await box.deliver(LiveEvent("steer", "after the end"))


async def test_events_before_the_turn_records_are_handed_to_the_recorder_when_it_attaches() -> None:
    box = inbox()
    await box.deliver(LiveEvent("followup", "while queued"))
    persisted: list[Sequence[Block]] = []

    async def persist(blocks: Sequence[Block]) -> None:
        persisted.append(blocks)

    early = box.attach(persist)
    assert [b.text for b in early] == ["while queued"]
    await box.deliver(LiveEvent("followup", "while running"))
    assert [[b.text for b in blocks] for blocks in persisted] == [["while running"]]


async def test_a_steer_cancels_the_stream_in_progress_once_and_says_so() -> None:
    box = inbox()
    started = asyncio.Event()

    async def stream() -> str:
        with box.streaming():
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                task = asyncio.current_task()
                assert task is not None
                if box.claim_steer_cancel() and task.uncancel() == 0:
                    return "steered"
                raise
        return "finished"

    task = asyncio.create_task(stream())
    await started.wait()
    await box.deliver(LiveEvent("followup", "a follow-up never cancels"))
    await asyncio.sleep(0)
    assert not task.done()
    await box.deliver(LiveEvent("steer", "stop"))
    assert await task == "steered"
    assert not box.claim_steer_cancel()


async def test_with_cancel_streams_off_a_steer_waits_for_the_next_decision() -> None:
    box = inbox()
    box.cancel_streams = False
    started = asyncio.Event()
    release = asyncio.Event()

    async def stream() -> str:
        with box.streaming():
            started.set()
            await release.wait()
        return "finished"

    task = asyncio.create_task(stream())
    await started.wait()
    await box.deliver(LiveEvent("steer", "later"))
    release.set()
    assert await task == "finished"
    assert box.steer_waiting()


async def test_announce_lines_mark_new_events_and_cut_long_messages() -> None:
    box = inbox()
    received = await box.deliver(LiveEvent("followup", "x" * 1000))
    line = announce_line(received, new=True)
    assert line.startswith("NEW followup ar:turn_live1.user.followup.1 at 2026-11-25T12:00:00Z: ")
    assert line.endswith("(all of it: ar:turn_live1.user.followup.1)")
    assert not announce_line(received, new=False).startswith("NEW")


@pytest.mark.parametrize(
    ("reply", "title"),
    [
        ('Title: "Weather in Paris".', "Weather in Paris"),
        ("<channel:answer>**Paris** trip</channel:answer>", "Paris trip"),
        ("\n\n  Budget review  \nsecond line", "Budget review"),
        ("\u00abM\u00e9t\u00e9o \u00e0 Paris\u00bb", "M\u00e9t\u00e9o \u00e0 Paris"),
        ('""', None),
        ("", None),
    ],
)
def test_clean_title_keeps_one_plain_line(reply: str, title: str | None) -> None:
    assert clean_title(reply) == title


@given(st.text())
def test_clean_title_is_one_short_trimmed_line_or_none(reply: str) -> None:
    title = clean_title(reply)
    if title is not None:
        assert title and len(title) <= TITLE_MAX_CHARS
        assert "\n" not in title and "\r" not in title
        assert title == title.strip()
        assert "<channel:" not in title
