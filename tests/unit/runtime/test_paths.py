"""The logical path grammar: every family parses and formats back; every bad input is a typed error."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from berth.runtime.paths import (
    MAX_PATH_LENGTH,
    FilePath,
    KnowledgePath,
    LogicalPath,
    LogicalPathError,
    PlanAliasPath,
    RangeSummaryPath,
    RecordPath,
    SkillPath,
    SourcesPath,
    ToolCallPath,
    WorkingSummaryPath,
    format_path,
    parse_path,
    path_turn_id,
)

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

EXAMPLES: list[tuple[str, LogicalPath]] = [
    ("ar:turn_4.user.prompt", RecordPath("turn_4", "user.prompt")),
    ("ar:turn_4.assistant.completion.1", RecordPath("turn_4", "assistant.completion.1")),
    ("ar:plan.latest:plan_a1", PlanAliasPath("plan_a1")),
    ("tc:turn_4.c3.result", ToolCallPath("turn_4", "c3", "result")),
    ("tc:turn_4.c3.notice", ToolCallPath("turn_4", "c3", "notice")),
    ("fi:turn_4.files/app/main.py", FilePath("turn_4", "files", "app/main.py")),
    ("fi:turn_4.outputs/report.pdf", FilePath("turn_4", "outputs", "report.pdf")),
    ("fi:turn_4.attachments/photo 1.png", FilePath("turn_4", "attachments", "photo 1.png")),
    ("fi:turn_4.files", FilePath("turn_4", "files")),
    ("so:sources_pool[1-3,7]", SourcesPath(((1, 3), (7, 7)))),
    ("so:sources_pool", SourcesPath()),
    ("su:turn_9.conv.range.summary", RangeSummaryPath("turn_9")),
    ("ws:turn_9.conv.working.summary", WorkingSummaryPath("turn_9")),
    ("sk:pdf-report", SkillPath("pdf-report")),
    ("sk:pdf-report/templates/cover.html", SkillPath("pdf-report", "templates/cover.html")),
    ("ks:docs/architecture.md", KnowledgePath("docs", "architecture.md")),
]


@pytest.mark.parametrize(("text", "expected"), EXAMPLES, ids=[text for text, _ in EXAMPLES])
def test_every_family_parses_to_its_typed_path_and_formats_back(text: str, expected: LogicalPath) -> None:
    parsed = parse_path(text)
    assert parsed == expected
    assert format_path(parsed) == text


def test_sources_selector_expands_to_sorted_unique_sids() -> None:
    selector = parse_path("so:sources_pool[7,1-3,2]")
    assert isinstance(selector, SourcesPath)
    assert selector.sids() == (1, 2, 3, 7)
    assert format_path(selector) == "so:sources_pool[7,1-3,2]"


def test_turn_of_a_path_is_known_for_turn_scoped_families_only() -> None:
    assert path_turn_id(parse_path("fi:turn_2.files/a.txt")) == "turn_2"
    assert path_turn_id(parse_path("so:sources_pool[1]")) is None
    assert path_turn_id(parse_path("ar:plan.latest:p1")) is None


BAD_PATHS: list[tuple[str, str]] = [
    ("fi:turn_4.files/../../etc/passwd", "unsafe_path"),
    ("fi:turn_4.files/a/..", "unsafe_path"),
    ("ks:docs/../secrets.yaml", "unsafe_path"),
    ("sk:pdf/../../x", "unsafe_path"),
    ("fi:../turn_4.files/a", "unsafe_path"),
    ("/etc/passwd", "unsafe_path"),
    ("ks:/etc/passwd", "unsafe_path"),
    ("fi:turn_4.files//etc/passwd", "unsafe_path"),
    ("fi:turn_4.files/a\x00.txt", "unsafe_path"),
    ("ar:turn_4.user.prompt\n", "unsafe_path"),
    ("fi:turn_4.files/..\\..\\x", "unsafe_path"),
    ("fi:turn_4.files/a//b", "malformed_path"),
    ("fi:turn_4.files/./a", "malformed_path"),
    ("fi:turn_4.files/", "malformed_path"),
    ("fi:turn_4.logs/a", "malformed_path"),
    ("tc:turn_4.c3.output", "malformed_path"),
    ("tc:turn_4.c3", "malformed_path"),
    ("ar:turn_4", "malformed_path"),
    ("ar:4.user.prompt", "malformed_path"),
    ("ar:turn_4.user..prompt", "malformed_path"),
    ("so:sources_pool[]", "malformed_path"),
    ("so:sources_pool[3-1]", "malformed_path"),
    ("so:sources_pool[2-2]", "malformed_path"),
    ("so:sources_pool[0]", "malformed_path"),
    ("so:sources_pool[01]", "malformed_path"),
    ("so:sources_pool[1, 2]", "malformed_path"),
    ("so:sources_pool[1-100000]", "selector_too_large"),
    ("so:pool[1]", "malformed_path"),
    ("su:turn_9.conv.working.summary", "malformed_path"),
    ("ks:docs", "malformed_path"),
    ("", "malformed_path"),
    ("turn_4.user.prompt", "malformed_path"),
    ("http://example.com", "unknown_family"),
    ("xx:turn_4.a", "unknown_family"),
    ("AR:turn_4.user.prompt", "unknown_family"),
    ("ar:conv_other/turn_4.user.prompt", "foreign_conversation"),
    ("ks:docs/" + "a" * MAX_PATH_LENGTH, "path_too_long"),
]


@pytest.mark.parametrize(("text", "code"), BAD_PATHS, ids=[repr(text)[:40] for text, _ in BAD_PATHS])
def test_bad_path_is_refused_with_a_stable_code(text: str, code: str) -> None:
    with pytest.raises(LogicalPathError) as caught:
        parse_path(text, conversation_id="conv_mine")
    assert caught.value.code == code
    assert caught.value.path == text


def test_path_qualified_with_the_bound_conversation_is_accepted() -> None:
    parsed = parse_path("ar:conv_mine/turn_4.user.prompt", conversation_id="conv_mine")
    assert parsed == RecordPath("turn_4", "user.prompt", conversation_id="conv_mine")
    assert format_path(parsed) == "ar:conv_mine/turn_4.user.prompt"


def test_qualified_path_without_a_bound_conversation_is_refused() -> None:
    with pytest.raises(LogicalPathError) as caught:
        parse_path("tc:conv_mine/turn_4.c1.call")
    assert caught.value.code == "foreign_conversation"


def test_error_message_says_what_to_do_and_escapes_the_input() -> None:
    with pytest.raises(LogicalPathError) as caught:
        parse_path("fi:turn_4.files/a\x00b")
    assert "\x00" not in str(caught.value)
    assert "NUL" in caught.value.message


def test_constructing_an_invalid_path_object_raises_the_same_typed_error() -> None:
    with pytest.raises(LogicalPathError) as caught:
        FilePath("turn_4", "files", "../x")
    assert caught.value.code == "unsafe_path"


# --- properties ------------------------------------------------------------------------------

names = st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True)
turn_ids = st.from_regex(r"turn_[A-Za-z0-9_-]{1,8}", fullmatch=True)
conversations = st.sampled_from([None, "conv_mine"])
segments = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cc", "Cs", "Zl", "Zp"),
        blacklist_characters="/\\\x85",
    ),
    min_size=1,
    max_size=10,
).filter(lambda s: s not in (".", ".."))
relative = st.lists(segments, min_size=1, max_size=4).map("/".join)
ranges = st.lists(
    st.tuples(st.integers(1, 5000), st.integers(0, 3)).map(lambda t: (t[0], t[0] + t[1])),
    min_size=1,
    max_size=5,
)

valid_paths: st.SearchStrategy[LogicalPath] = st.one_of(
    st.builds(RecordPath, turn_ids, st.lists(names, min_size=1, max_size=4).map(".".join), conversations),
    st.builds(PlanAliasPath, names),
    st.builds(ToolCallPath, turn_ids, names, st.sampled_from(["call", "code", "result", "notice"]), conversations),
    st.builds(
        FilePath,
        turn_ids,
        st.sampled_from(["files", "outputs", "attachments"]),
        st.one_of(st.just(""), relative),
        conversations,
    ),
    st.builds(SourcesPath, ranges.map(tuple)),
    st.builds(RangeSummaryPath, turn_ids, conversations),
    st.builds(WorkingSummaryPath, turn_ids, conversations),
    st.builds(SkillPath, names, st.one_of(st.just(""), relative)),
    st.builds(KnowledgePath, names, relative),
)


@PROPERTY
@given(valid_paths)
def test_parse_after_format_is_the_identity_on_valid_paths(path: LogicalPath) -> None:
    text = format_path(path)
    parsed = parse_path(text, conversation_id="conv_mine")
    assert parsed == path
    assert format_path(parsed) == text


@PROPERTY
@given(valid_paths.filter(lambda path: getattr(path, "conversation_id", None) is None))
def test_a_path_just_formatted_parses_to_what_the_parser_makes_of_its_text(path: LogicalPath) -> None:
    text = format_path(path)  # remembered by record and tool-call paths: parse_path returns it
    remembered = parse_path(text)
    parsed = parse_path(text, conversation_id="conv_mine")  # a bound conversation: always parsed
    assert remembered == parsed == path


GRAMMAR_ALPHABET = "arctfisouwkl_:./[]-,0123456789 \\\x00%~"
grammar_like = st.builds(
    "".join,
    st.lists(
        st.one_of(
            st.sampled_from(["ar:", "tc:", "fi:", "so:", "su:", "ws:", "sk:", "ks:", "turn_4", "conv_mine/"]),
            st.sampled_from([".files/", ".outputs", "sources_pool[", "..", "/", ".conv.range.summary"]),
            st.text(alphabet=GRAMMAR_ALPHABET, max_size=6),
        ),
        max_size=8,
    ),
)


@PROPERTY
@given(st.one_of(st.text(max_size=80), grammar_like))
def test_parser_never_crashes_and_accepted_text_formats_back_unchanged(text: str) -> None:
    try:
        outcome = ("parsed", format_path(parse_path(text, conversation_id="conv_mine")))
    except LogicalPathError as error:
        outcome = ("refused", error.code)
    if outcome[0] == "parsed":
        assert outcome[1] == text
    else:
        assert outcome[1] in {
            "unsafe_path",
            "malformed_path",
            "unknown_family",
            "foreign_conversation",
            "selector_too_large",
            "path_too_long",
        }


@PROPERTY
@given(valid_paths, st.sampled_from(["/..", "/../x", "\x00", "\\"]))
def test_no_valid_path_survives_a_traversal_or_nul_suffix(path: LogicalPath, suffix: str) -> None:
    with pytest.raises(LogicalPathError) as caught:
        parse_path(format_path(path) + suffix, conversation_id="conv_mine")
    assert caught.value.code in {"unsafe_path", "malformed_path"}
