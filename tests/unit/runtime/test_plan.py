"""Plans: new/replace/activate/close as snapshot blocks, step markers from notes, open plans."""

from __future__ import annotations

from datetime import timedelta

import pytest
from runtime_builders import T0, ConversationBuilder

from berth.runtime.blocks import Block, BlockType
from berth.runtime.paths import PlanAliasPath, parse_path
from berth.runtime.plan import (
    PlanBook,
    PlanCommand,
    PlanError,
    PlanSnapshot,
    apply_plan_command,
    apply_step_markers,
    parse_step_markers,
)


class Plans:
    """A tiny driver that feeds react.plan results back into the book, as the loop does."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []

    @property
    def book(self) -> PlanBook:
        return PlanBook.from_blocks(self.blocks)

    def command(self, mode: str, *, plan_id: str | None = None, steps: tuple[str, ...] = (), new_id: str = "") -> None:
        command = PlanCommand.model_validate({"mode": mode, "plan_id": plan_id, "steps": steps})
        now = T0 + timedelta(seconds=len(self.blocks))
        self.blocks += apply_plan_command(self.book, command, turn_id="turn_1", now=now, new_plan_id=new_id)

    def notes(self, text: str) -> tuple[Block, ...]:
        produced = apply_step_markers(self.book, text, turn_id="turn_2", now=T0)
        self.blocks += produced
        return produced


def test_new_plan_is_a_snapshot_block_plus_an_ack_and_becomes_current() -> None:
    plans = Plans()
    plans.command("new", steps=("collect", "compare", "draft"), new_id="plan_a")
    snapshot_block, ack = plans.blocks
    assert snapshot_block.type == BlockType.REACT_PLAN
    assert snapshot_block.path == "ar:turn_1.react.plan.plan_a"
    assert ack.type == BlockType.REACT_PLAN_ACK
    current = plans.book.current
    assert current is not None
    assert current.plan_id == "plan_a"
    assert [(s.n, s.label, s.status) for s in current.steps] == [
        (1, "collect", "pending"),
        (2, "compare", "pending"),
        (3, "draft", "pending"),
    ]


def test_marker_lines_in_notes_update_the_current_plan() -> None:
    plans = Plans()
    plans.command("new", steps=("collect", "compare", "draft"), new_id="plan_a")
    plans.notes("Progress:\n✓ [1] collected\n… [2] comparing\nsome prose with ✗ [3] inside a line")
    current = plans.book.current
    assert current is not None
    assert [s.status for s in current.steps] == ["done", "in_progress", "pending"]
    assert current.last_turn_id == "turn_2"
    assert plans.blocks[-1].text == "plan plan_a: ✓ [1], … [2]"


def test_notes_without_changes_produce_no_blocks() -> None:
    plans = Plans()
    assert plans.notes("✓ [1]") == ()  # no plan yet
    plans.command("new", steps=("a",), new_id="plan_a")
    assert plans.notes("no markers here") == ()
    assert plans.notes("□ [1] still pending") == ()


def test_plan_whose_steps_all_finish_is_complete_and_leaves_the_open_list() -> None:
    plans = Plans()
    plans.command("new", steps=("a", "b"), new_id="plan_a")
    plans.notes("✓ [1]\n✗ [2] not possible")
    assert plans.book.get("plan_a").status == "complete"  # type: ignore[union-attr]
    assert plans.book.current is None
    assert plans.book.open_plans() == ()


def test_replace_supersedes_the_old_plan_with_a_new_current_one() -> None:
    plans = Plans()
    plans.command("new", steps=("a",), new_id="plan_a")
    plans.command("replace", plan_id="plan_a", steps=("b", "c"), new_id="plan_b")
    book = plans.book
    old = book.get("plan_a")
    assert old is not None
    assert (old.status, old.superseded_by) == ("superseded", "plan_b")
    assert old.superseded_ts is not None
    assert book.current_plan_id == "plan_b"
    assert [p.plan_id for p in book.open_plans()] == ["plan_b"]


def test_activate_makes_an_older_open_plan_current_again() -> None:
    plans = Plans()
    plans.command("new", steps=("a",), new_id="plan_a")
    plans.command("new", steps=("b",), new_id="plan_b")
    assert plans.book.current_plan_id == "plan_b"
    plans.command("activate", plan_id="plan_a")
    assert plans.book.current_plan_id == "plan_a"
    assert [p.plan_id for p in plans.book.open_plans()] == ["plan_a", "plan_b"]


def test_close_ends_a_plan_and_leaves_no_current_plan() -> None:
    plans = Plans()
    plans.command("new", steps=("a",), new_id="plan_a")
    plans.command("close", plan_id="plan_a")
    book = plans.book
    assert book.get("plan_a").status == "closed"  # type: ignore[union-attr]
    assert book.current is None
    assert book.open_plans() == ()


def test_open_plans_lists_the_four_most_recently_updated() -> None:
    plans = Plans()
    for n in range(1, 7):
        plans.command("new", steps=("x",), new_id=f"plan_{n}")
    assert [p.plan_id for p in plans.book.open_plans()] == ["plan_6", "plan_5", "plan_4", "plan_3"]


def test_latest_alias_resolves_to_the_newest_snapshot_of_a_lineage() -> None:
    plans = Plans()
    plans.command("new", steps=("a", "b"), new_id="plan_a")
    plans.notes("✓ [1]")
    alias = parse_path("ar:plan.latest:plan_a")
    assert isinstance(alias, PlanAliasPath)
    block = plans.book.resolve(alias)
    assert block is plans.blocks[-2]
    assert PlanSnapshot.model_validate(block.data).steps[0].status == "done"  # type: ignore[union-attr]
    assert plans.book.resolve(PlanAliasPath("plan_zzz")) is None


@pytest.mark.parametrize(
    ("mode", "plan_id", "steps", "code"),
    [
        ("new", None, (), "plan_steps_missing"),
        ("activate", "plan_zzz", (), "plan_not_found"),
        ("close", None, (), "plan_not_found"),
        ("activate", "plan_a", (), "plan_not_open"),
    ],
)
def test_impossible_plan_requests_have_stable_codes(
    mode: str, plan_id: str | None, steps: tuple[str, ...], code: str
) -> None:
    plans = Plans()
    if code == "plan_not_open":
        plans.command("new", steps=("a",), new_id="plan_a")
        plans.command("close", plan_id="plan_a")
    with pytest.raises(PlanError) as caught:
        plans.command(mode, plan_id=plan_id, steps=steps, new_id="plan_new")
    assert caught.value.code == code


def test_step_marker_parsing_accepts_list_bullets_and_lets_the_last_mark_win() -> None:
    assert parse_step_markers("- ✓ [1] a\n* … [2] b\n  ✗ [2] gave up\n□ [10] later") == {
        1: "done",
        2: "failed",
        10: "pending",
    }


def test_damaged_snapshot_blocks_are_skipped() -> None:
    plans = Plans()
    plans.command("new", steps=("a",), new_id="plan_a")
    broken = plans.blocks[0].model_copy(update={"data": {"plan_id": "plan_a"}})
    assert PlanBook.from_blocks([*plans.blocks, broken]).current_plan_id == "plan_a"


def test_plan_renders_with_step_markers_and_current_tag() -> None:
    plans = Plans()
    plans.command("new", steps=("collect", "draft"), new_id="plan_a")
    plans.notes("✓ [1]")
    current = plans.book.current
    assert current is not None
    assert current.render(current=True).splitlines() == [
        "plan_id=plan_a (current)",
        "  ✓ [1] collect",
        "  □ [2] draft",
    ]


def test_a_plan_book_extended_round_by_round_equals_one_read_at_once() -> None:
    conversation = ConversationBuilder().turn("turn_1")
    book = PlanBook.from_blocks(conversation.timeline.blocks)
    read = len(conversation.timeline)
    for n, command in enumerate(
        [
            PlanCommand(mode="new", steps=("look", "answer")),
            PlanCommand(mode="new", steps=("other",)),
            PlanCommand(mode="close"),
        ],
        start=1,
    ):
        blocks = apply_plan_command(
            PlanBook.from_blocks(conversation.timeline.blocks),
            command,
            turn_id="turn_1",
            now=T0,
            new_plan_id=f"1p{n}",
            call_id=f"c{n}",
        )
        conversation.timeline.contribute(*blocks)
        book = book.extended(conversation.timeline.blocks[read:])
        read = len(conversation.timeline)
        whole = PlanBook.from_blocks(conversation.timeline.blocks)
        assert (book.current_plan_id, book.open_plans()) == (whole.current_plan_id, whole.open_plans())
