"""The fence tracker: CommonMark fenced code blocks followed through text fed in pieces."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.streaming.fences import FenceTracker


def tracker_after(*pieces: str) -> FenceTracker:
    tracker = FenceTracker()
    for piece in pieces:
        tracker.feed(piece)
    return tracker


@pytest.mark.parametrize(
    ("text", "in_fence"),
    [
        ("```\n", True),
        ("```python\n", True),
        ("~~~~ info `with` backticks\n", True),
        ("   ```\n", True),
        ("    ```\n", False),
        ("``\n", False),
        ("```a`b\n", False),
        ("text ```\n", False),
        ("```\ncode\n```\n", False),
        ("```\ncode\n```  \t\n", False),
        ("````\n```\n", True),
        ("```\n~~~\n", True),
        ("```\n``` x\n", True),
        ("~~~\n~~~~\n", False),
    ],
)
def test_fences_open_and_close_by_commonmark_rules(text: str, in_fence: bool) -> None:
    assert tracker_after(text).in_fence is in_fence


def test_a_fence_takes_effect_only_at_the_end_of_its_opening_line() -> None:
    tracker = tracker_after("```python")
    assert (tracker.in_fence, tracker.tag_is_boundary()) == (False, True)
    tracker.feed("\n")
    assert (tracker.in_fence, tracker.tag_is_boundary()) == (True, False)


def test_a_closing_run_right_before_a_tag_makes_the_tag_a_boundary() -> None:
    assert tracker_after("```\ncode\n```").tag_is_boundary()
    assert tracker_after("```\ncode\n```  ").tag_is_boundary()
    assert not tracker_after("```\ncode\n``").tag_is_boundary()
    assert not tracker_after("````\ncode\n```").tag_is_boundary()
    assert not tracker_after("```\ncode\n``` x").tag_is_boundary()


def test_windows_line_endings_close_a_fence() -> None:
    assert not tracker_after("```\r\ncode\r\n```\r\n").in_fence


MARKDOWN = st.lists(
    st.sampled_from(["```", "~~~", "````", "`", "~", " ", "   ", "\n", "x", "py", "\t", "\r"]), max_size=30
).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=MARKDOWN, data=st.data())
def test_any_split_of_the_text_gives_the_same_state(text: str, data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    whole = tracker_after(text)
    points = [0, *cuts, len(text)]
    pieces = tracker_after(*(text[a:b] for a, b in pairwise(points)))
    assert (pieces.in_fence, pieces.tag_is_boundary()) == (whole.in_fence, whole.tag_is_boundary())
