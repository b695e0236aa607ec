"""The passage a search hit shows (berth.knowledge.passage): the part of a chunk that best matches the query —
the answer where it sits in the middle or at the end of a long chunk, cut at line/sentence boundaries with …
marks, never over its cap, always the chunk's own text, holding a query word whenever the chunk does."""

from __future__ import annotations

import re
import textwrap

from hypothesis import given, settings
from hypothesis import strategies as st

from berth.knowledge.passage import PASSAGE_CHARS, PASSAGES_TOTAL_CHARS, passage, passage_cap, passage_terms

FILLER = "The platform keeps its settings in one file and reads them once at start. " * 6

SECTION = (
    "## Backups\n\n"
    + FILLER
    + "\n\n"
    + FILLER.replace("settings", "logs")
    + "\n\n"
    + "Snapshots of the volume are taken every night at 02:00 UTC and kept for 35 days; "
    "a restore replays the write-ahead log up to the minute you name.\n\n"
    + FILLER.replace("settings", "metrics")
    + "\n"
)


def test_the_answer_in_the_middle_of_a_long_chunk_is_in_the_passage() -> None:
    shown = passage(SECTION, "how long are volume snapshots kept?")
    assert "kept for 35 days" in shown
    assert len(shown) <= PASSAGE_CHARS
    assert shown.startswith("…") and shown.endswith("…")  # cut on both sides
    assert shown[1:-1].strip() in SECTION
    # the first 240 characters (what a hit showed before) hold only the heading and filler
    assert "35 days" not in " ".join(SECTION.split())[:240]


def test_the_answer_at_the_end_of_a_chunk_and_sentence_boundaries() -> None:
    text = FILLER * 3 + "Finally, the restore replays the write-ahead log up to the minute you name."
    shown = passage(text, "restore up to a minute write-ahead", cap=300)
    assert shown.endswith("the minute you name.")
    assert shown.startswith("…The platform keeps")  # a whole sentence, not a word cut in half
    assert not shown.endswith("…")


def test_code_keeps_its_lines_and_indentation() -> None:
    code = "\n".join(f"def helper_{n}(value):\n    return value + {n}\n" for n in range(40))
    code += "\ndef retry_budget(attempts):\n    delay = 0.5 * 2 ** attempts\n    return min(delay, 30.0)\n"
    shown = passage(code, "retry_budget delay", cap=200)
    assert "def retry_budget(attempts):\n    delay = 0.5 * 2 ** attempts\n    return min(delay, 30.0)" in shown
    assert shown.startswith("…") and not shown.endswith("…")


def test_a_short_chunk_is_whole_and_a_chunk_without_the_words_shows_its_start() -> None:
    assert passage("  A short section.\n", "anything") == "A short section."
    shown = passage(SECTION, "kubernetes ingress")
    assert shown.startswith("## Backups") and shown.endswith("…")


def test_many_hits_share_a_bounded_total() -> None:
    assert passage_cap(5) == PASSAGE_CHARS
    assert passage_cap(20) * 20 <= PASSAGES_TOTAL_CHARS
    assert passage_cap(1_000) == 200


WORDS = ["alpha", "beta", "gamma", "delta", "snapshot", "restore", "x", "replica", "zeta", "omega", "éclair"]


def _word_in(word: str, text: str) -> bool:
    return re.search(r"(?<![^\W_])" + re.escape(word), text, re.IGNORECASE) is not None


@settings(max_examples=300, deadline=None)
@given(
    text=st.lists(
        st.one_of(st.sampled_from(WORDS), st.sampled_from([" ", " ", "\n", ". ", "\n\n", "  ", ", "])), max_size=400
    ).map("".join),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join),
    cap=st.integers(min_value=30, max_value=900),
)
def test_the_passage_is_capped_part_of_the_chunk_and_holds_a_query_word(text: str, query: str, cap: int) -> None:
    shown = passage(text, query, cap)
    assert len(shown) <= cap
    assert shown.removeprefix("…").removesuffix("…") in text
    if any(_word_in(word, text) for word in passage_terms(query)):
        assert any(_word_in(word, shown) for word in passage_terms(query))


def test_the_tool_text_is_stable() -> None:
    """What the model reads of one passage: plain text (no markup added), its lines as in the chunk."""
    text = textwrap.dedent(
        """\
        # Failover

        Promote the replica with the promotion job.
        """
    )
    assert passage(text, "promote") == text.strip()
