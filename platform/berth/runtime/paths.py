"""The logical path grammar: one parser and one formatter for every path family.

A logical path is a stable handle for a block or an artifact of one conversation. It is a locator,
never an authority: tenant, project, user and conversation always come from the bound context.

=========  ===============================================  ======================================
family     form                                             example
=========  ===============================================  ======================================
``ar:``    ``ar:<turn>.<record>``                           ``ar:turn_4.user.prompt``
``ar:``    ``ar:plan.latest:<plan_id>``                     ``ar:plan.latest:plan_a1``
``tc:``    ``tc:<turn>.<call_id>.call|code|result|notice``  ``tc:turn_4.c3.result``
``fi:``    ``fi:<turn>.files|outputs|attachments[/<rel>]``  ``fi:turn_4.files/app/main.py``
``so:``    ``so:sources_pool[<ranges>]``                    ``so:sources_pool[1-3,7]``
``su:``    ``su:<turn>.conv.range.summary``                 ``su:turn_9.conv.range.summary``
``ws:``    ``ws:<turn>.conv.working.summary``               ``ws:turn_9.conv.working.summary``
``sk:``    ``sk:<skill_id>[/<file>]``                       ``sk:pdf-report/SKILL.md``
``ks:``    ``ks:<space>/<path>``                            ``ks:docs/architecture.md``
=========  ===============================================  ======================================

``<turn>`` is ``turn_<id>``, optionally qualified by the conversation it belongs to:
``conv_42/turn_4``. A qualified path is accepted only when it names the bound conversation.

The grammar is canonical: every accepted string has exactly one parse and formats back to itself
(``format_path(parse_path(s)) == s``). Parsing is total: any string either parses or raises
:class:`LogicalPathError` with a stable ``code``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, Final, Literal, TypeAlias

__all__ = [
    "MAX_PATH_LENGTH",
    "MAX_SELECTOR_SIDS",
    "TURN_ID_PATTERN",
    "FileArea",
    "FilePath",
    "KnowledgePath",
    "LogicalPath",
    "LogicalPathError",
    "PathErrorCode",
    "PathFamily",
    "PlanAliasPath",
    "RangeSummaryPath",
    "RecordPath",
    "SkillPath",
    "SourcesPath",
    "ToolCallPart",
    "ToolCallPath",
    "WorkingSummaryPath",
    "format_path",
    "parse_path",
    "path_turn_id",
]

PathErrorCode: TypeAlias = Literal[
    "unsafe_path",
    "malformed_path",
    "unknown_family",
    "foreign_conversation",
    "selector_too_large",
    "path_too_long",
]
PathFamily: TypeAlias = Literal["ar", "tc", "fi", "so", "su", "ws", "sk", "ks"]
ToolCallPart: TypeAlias = Literal["call", "code", "result", "notice"]
FileArea: TypeAlias = Literal["files", "outputs", "attachments"]

MAX_PATH_LENGTH: Final = 4096
"""Longest accepted logical path, in characters."""
MAX_SELECTOR_SIDS: Final = 10_000
"""Most source ids one ``so:`` selector may name (bounds what a single read can expand to)."""
_MAX_SID: Final = 1_000_000_000

TURN_ID_PATTERN: Final = r"turn_[A-Za-z0-9_-]{1,64}"
"""Regular expression every turn id matches (no dots: the dot separates a turn from its record)."""

_TURN_RE: Final = re.compile(TURN_ID_PATTERN)
_NAME_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,128}")
_SID_RE: Final = re.compile(r"[1-9][0-9]{0,9}")
_CONTROL_RE: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")

_FAMILIES: Final[frozenset[str]] = frozenset({"ar", "tc", "fi", "so", "su", "ws", "sk", "ks"})
_TOOL_CALL_PARTS: Final[frozenset[str]] = frozenset({"call", "code", "result", "notice"})
_FILE_AREAS: Final[frozenset[str]] = frozenset({"files", "outputs", "attachments"})
_PLAN_ALIAS_PREFIX: Final = "plan.latest:"
_POOL_NAME: Final = "sources_pool"
_RANGE_SUMMARY: Final = "conv.range.summary"
_WORKING_SUMMARY: Final = "conv.working.summary"


class LogicalPathError(ValueError):
    """A string that is not a valid logical path, with a stable ``code`` the model and users see.

    ``code`` is one of ``unsafe_path`` (traversal, absolute path, NUL or control characters),
    ``malformed_path``, ``unknown_family``, ``foreign_conversation``, ``selector_too_large`` and
    ``path_too_long``. ``message`` says what was wrong and what to write instead.
    """

    def __init__(self, code: PathErrorCode, message: str, *, path: str) -> None:
        self.code: PathErrorCode = code
        self.message = message
        self.path = path
        super().__init__(f"{code}: {message} (path {_shown(path)})")


def _shown(path: str) -> str:
    """Return a bounded, escaped rendering of ``path`` that is safe to put in an error message."""
    return repr(path if len(path) <= 120 else path[:117] + "...")


def _fail(code: PathErrorCode, message: str, path: str) -> LogicalPathError:
    return LogicalPathError(code, message, path=path)


def _check_name(value: str, what: str, path: str) -> None:
    if not _NAME_RE.fullmatch(value):
        raise _fail(
            "malformed_path",
            f"{what} {value!r} must be 1-128 characters of letters, digits, '_' or '-'",
            path,
        )


def _check_turn(value: str, path: str) -> None:
    if not _TURN_RE.fullmatch(value):
        raise _fail(
            "malformed_path",
            f"turn id {value!r} must look like 'turn_<id>' (letters, digits, '_' or '-')",
            path,
        )


def _check_relative(value: str, what: str, path: str, *, allow_empty: bool) -> None:
    """Validate a '/'-separated relative path: no empty, '.' or '..' segments, no leading '/'."""
    if value == "":
        if allow_empty:
            return
        raise _fail("malformed_path", f"{what} must not be empty", path)
    if value.startswith("/"):
        raise _fail("unsafe_path", f"{what} must be relative, not absolute", path)
    for segment in value.split("/"):
        if segment == "..":
            raise _fail("unsafe_path", f"{what} must not climb out with '..'", path)
        if segment in ("", "."):
            raise _fail(
                "malformed_path",
                f"{what} has an empty or '.' segment; write each folder once, without '//' or '/./'",
                path,
            )


def _validate_turn(turn_id: str, conversation_id: str | None) -> None:
    where = f"{conversation_id}/{turn_id}" if conversation_id else turn_id
    _check_turn(turn_id, where)
    if conversation_id is not None:
        _check_name(conversation_id, "conversation id", where)


_RECENTLY_FORMATTED: dict[str, RecordPath | ToolCallPath] = {}
_RECENTLY_FORMATTED_LIMIT: Final = 512


def _remember_formatted(text: str, path: RecordPath | ToolCallPath) -> None:
    """Remember that ``text`` is the form of ``path``, which validated itself when it was made.

    The runtime formats a typed path and then makes a block of the text, which parses it again;
    :func:`parse_path` returns the remembered path instead of parsing the text a second time (the
    hypothesis tests check that parsing a formatted path gives the path back, so both agree).
    """
    if len(_RECENTLY_FORMATTED) >= _RECENTLY_FORMATTED_LIMIT:
        _RECENTLY_FORMATTED.clear()
    _RECENTLY_FORMATTED[text] = path


def _turn_ref(turn_id: str, conversation_id: str | None) -> str:
    return turn_id if conversation_id is None else f"{conversation_id}/{turn_id}"


@dataclass(frozen=True, slots=True)
class RecordPath:
    """``ar:<turn>.<record>``: a record of a turn, such as ``user.prompt`` or ``assistant.completion``."""

    turn_id: str
    record: str
    conversation_id: str | None = None
    family: ClassVar[PathFamily] = "ar"

    def __post_init__(self) -> None:
        _validate_turn(self.turn_id, self.conversation_id)
        for segment in self.record.split("."):
            _check_name(segment, "record segment", self.record)

    def __str__(self) -> str:
        text = f"ar:{_turn_ref(self.turn_id, self.conversation_id)}.{self.record}"
        if self.conversation_id is None:
            _remember_formatted(text, self)
        return text


@dataclass(frozen=True, slots=True)
class PlanAliasPath:
    """``ar:plan.latest:<plan_id>``: always the newest snapshot of a plan lineage."""

    plan_id: str
    family: ClassVar[PathFamily] = "ar"

    def __post_init__(self) -> None:
        _check_name(self.plan_id, "plan id", self.plan_id)

    def __str__(self) -> str:
        return f"ar:{_PLAN_ALIAS_PREFIX}{self.plan_id}"


@dataclass(frozen=True, slots=True)
class ToolCallPath:
    """``tc:<turn>.<call_id>.<part>``: the call, code, result or notice of one tool call."""

    turn_id: str
    call_id: str
    part: ToolCallPart
    conversation_id: str | None = None
    family: ClassVar[PathFamily] = "tc"

    def __post_init__(self) -> None:
        _validate_turn(self.turn_id, self.conversation_id)
        _check_name(self.call_id, "call id", self.call_id)
        if self.part not in _TOOL_CALL_PARTS:
            raise _fail("malformed_path", f"tool call part {self.part!r} must be call|code|result|notice", self.part)

    def __str__(self) -> str:
        text = f"tc:{_turn_ref(self.turn_id, self.conversation_id)}.{self.call_id}.{self.part}"
        if self.conversation_id is None:
            _remember_formatted(text, self)
        return text


@dataclass(frozen=True, slots=True)
class FilePath:
    """``fi:<turn>.<area>[/<rel>]``: a file (or, with an empty ``rel``, the whole area) of a turn."""

    turn_id: str
    area: FileArea
    rel: str = ""
    conversation_id: str | None = None
    family: ClassVar[PathFamily] = "fi"

    def __post_init__(self) -> None:
        _validate_turn(self.turn_id, self.conversation_id)
        if self.area not in _FILE_AREAS:
            raise _fail("malformed_path", f"file area {self.area!r} must be files|outputs|attachments", self.area)
        _check_relative(self.rel, "file path", self.rel, allow_empty=True)

    def __str__(self) -> str:
        suffix = f"/{self.rel}" if self.rel else ""
        return f"fi:{_turn_ref(self.turn_id, self.conversation_id)}.{self.area}{suffix}"


@dataclass(frozen=True, slots=True)
class SourcesPath:
    """``so:sources_pool[<ranges>]``: rows of the sources pool by SID; no ranges means the whole pool.

    ``ranges`` keeps the written order: ``((1, 3), (7, 7))`` is ``[1-3,7]``. A range is ascending
    (``1-3``); a single SID is written alone (``7``), so every selector has one spelling.
    """

    ranges: tuple[tuple[int, int], ...] = ()
    family: ClassVar[PathFamily] = "so"

    def __post_init__(self) -> None:
        total = 0
        for start, end in self.ranges:
            if not (1 <= start <= end <= _MAX_SID):
                raise _fail("malformed_path", f"SID range {start}-{end} must be ascending SIDs >= 1", _POOL_NAME)
            total += end - start + 1
        if total > MAX_SELECTOR_SIDS:
            raise _fail(
                "selector_too_large",
                f"the selector names {total} SIDs; read at most {MAX_SELECTOR_SIDS} at once",
                _POOL_NAME,
            )

    def sids(self) -> tuple[int, ...]:
        """Return the selected SIDs, ascending and without duplicates (empty for the whole pool)."""
        return tuple(sorted({sid for start, end in self.ranges for sid in range(start, end + 1)}))

    def __str__(self) -> str:
        if not self.ranges:
            return f"so:{_POOL_NAME}"
        items = ",".join(str(a) if a == b else f"{a}-{b}" for a, b in self.ranges)
        return f"so:{_POOL_NAME}[{items}]"


@dataclass(frozen=True, slots=True)
class RangeSummaryPath:
    """``su:<turn>.conv.range.summary``: the compaction summary written in a turn."""

    turn_id: str
    conversation_id: str | None = None
    family: ClassVar[PathFamily] = "su"

    def __post_init__(self) -> None:
        _validate_turn(self.turn_id, self.conversation_id)

    def __str__(self) -> str:
        return f"su:{_turn_ref(self.turn_id, self.conversation_id)}.{_RANGE_SUMMARY}"


@dataclass(frozen=True, slots=True)
class WorkingSummaryPath:
    """``ws:<turn>.conv.working.summary``: the working summary of a turn."""

    turn_id: str
    conversation_id: str | None = None
    family: ClassVar[PathFamily] = "ws"

    def __post_init__(self) -> None:
        _validate_turn(self.turn_id, self.conversation_id)

    def __str__(self) -> str:
        return f"ws:{_turn_ref(self.turn_id, self.conversation_id)}.{_WORKING_SUMMARY}"


@dataclass(frozen=True, slots=True)
class SkillPath:
    """``sk:<skill_id>[/<file>]``: a skill, or one file inside it."""

    skill_id: str
    file: str = ""
    family: ClassVar[PathFamily] = "sk"

    def __post_init__(self) -> None:
        _check_name(self.skill_id, "skill id", self.skill_id)
        _check_relative(self.file, "skill file", self.file, allow_empty=True)

    def __str__(self) -> str:
        return f"sk:{self.skill_id}/{self.file}" if self.file else f"sk:{self.skill_id}"


@dataclass(frozen=True, slots=True)
class KnowledgePath:
    """``ks:<space>/<path>``: a document of a bundle's knowledge space (read-only)."""

    space: str
    rel: str
    family: ClassVar[PathFamily] = "ks"

    def __post_init__(self) -> None:
        _check_name(self.space, "knowledge space", self.space)
        _check_relative(self.rel, "knowledge path", self.rel, allow_empty=False)

    def __str__(self) -> str:
        return f"ks:{self.space}/{self.rel}"


LogicalPath: TypeAlias = (
    RecordPath
    | PlanAliasPath
    | ToolCallPath
    | FilePath
    | SourcesPath
    | RangeSummaryPath
    | WorkingSummaryPath
    | SkillPath
    | KnowledgePath
)


def format_path(path: LogicalPath) -> str:
    """Return the canonical string form of a parsed logical path (the inverse of :func:`parse_path`)."""
    return str(path)


def path_turn_id(path: LogicalPath) -> str | None:
    """Return the turn a path belongs to, or ``None`` for turn-less families (``so: sk: ks:``, plan alias)."""
    if isinstance(path, RecordPath | ToolCallPath | FilePath | RangeSummaryPath | WorkingSummaryPath):
        return path.turn_id
    return None


def parse_path(text: str, *, conversation_id: str | None = None) -> LogicalPath:
    """Parse ``text`` into a typed logical path.

    :param text: the string to parse, e.g. ``"tc:turn_4.c3.result"``.
    :param conversation_id: the conversation bound to the caller; a path qualified with another
        conversation's id (``conv_x/turn_4``), or qualified while none is bound, is refused.
    :raises LogicalPathError: for every string that is not a valid path; nothing else is raised.
    """
    if conversation_id is None:
        formatted = _RECENTLY_FORMATTED.get(text)
        if formatted is not None:
            return formatted
    if len(text) > MAX_PATH_LENGTH:
        raise _fail("path_too_long", f"logical paths are at most {MAX_PATH_LENGTH} characters", text)
    if "\x00" in text:
        raise _fail("unsafe_path", "NUL bytes are not allowed in a path", text)
    if _CONTROL_RE.search(text) or "\\" in text:
        raise _fail("unsafe_path", "control characters and backslashes are not allowed in a path", text)
    if text.startswith("/"):
        raise _fail(
            "unsafe_path",
            "absolute file system paths are not logical paths; use e.g. 'fi:turn_4.files/app/main.py'",
            text,
        )
    family, colon, body = text.partition(":")
    if not colon:
        raise _fail("malformed_path", "a logical path starts with its family, e.g. 'ar:', 'tc:', 'fi:', 'so:'", text)
    if family not in _FAMILIES:
        raise _fail("unknown_family", f"unknown path family {family!r}; use one of ar tc fi so su ws sk ks", text)
    if body.startswith("/"):
        raise _fail("unsafe_path", "the path after the family must be relative, not absolute", text)
    if ".." in body.split("/"):
        raise _fail("unsafe_path", "'..' segments are not allowed; name the artifact directly", text)
    try:
        path = _PARSERS[family](body)
    except LogicalPathError as error:
        # Component validators see only their own component; report the whole path.
        raise LogicalPathError(error.code, error.message, path=text) from None
    bound = getattr(path, "conversation_id", None)
    if bound is not None and bound != conversation_id:
        reason = (
            "no conversation is bound to check it against"
            if conversation_id is None
            else "it belongs to another conversation"
        )
        raise _fail(
            "foreign_conversation",
            f"the path names conversation {bound!r} but {reason}; drop the conversation prefix",
            text,
        )
    return path


def _split_turn(body: str, text: str) -> tuple[str | None, str, str]:
    """Split ``[<conv>/]turn_<id>.<rest>`` into its conversation, turn and non-empty rest."""
    head, dot, rest = body.partition(".")
    if not dot or not rest:
        raise _fail("malformed_path", "expected '<turn>.<what>' after the family, e.g. 'turn_4.…'", text)
    conversation, slash, turn = head.rpartition("/")
    return (conversation if slash else None), turn, rest


def _parse_record(body: str) -> LogicalPath:
    if body.startswith(_PLAN_ALIAS_PREFIX):
        return PlanAliasPath(body[len(_PLAN_ALIAS_PREFIX) :])
    conversation, turn, rest = _split_turn(body, "ar:" + body)
    return RecordPath(turn, rest, conversation)


def _parse_tool_call(body: str) -> LogicalPath:
    conversation, turn, rest = _split_turn(body, "tc:" + body)
    call_id, dot, part = rest.partition(".")
    if not dot or part not in _TOOL_CALL_PARTS:
        raise _fail("malformed_path", "expected 'tc:<turn>.<call_id>.call|code|result|notice'", body)
    return ToolCallPath(turn, call_id, part, conversation)  # type: ignore[arg-type]  # checked above


def _parse_file(body: str) -> LogicalPath:
    conversation, turn, rest = _split_turn(body, "fi:" + body)
    area, slash, rel = rest.partition("/")
    if area not in _FILE_AREAS:
        raise _fail("malformed_path", "expected 'fi:<turn>.files|outputs|attachments/<path>'", body)
    if slash and not rel:
        raise _fail("malformed_path", "a file path must not end with '/'", body)
    return FilePath(turn, area, rel, conversation)  # type: ignore[arg-type]  # checked above


def _parse_sources(body: str) -> LogicalPath:
    if body == _POOL_NAME:
        return SourcesPath()
    if not (body.startswith(_POOL_NAME + "[") and body.endswith("]")):
        raise _fail("malformed_path", "expected 'so:sources_pool[<ranges>]', e.g. 'so:sources_pool[1-3,7]'", body)
    inner = body[len(_POOL_NAME) + 1 : -1]
    ranges: list[tuple[int, int]] = []
    for item in inner.split(","):
        first, dash, last = item.partition("-")
        if not _SID_RE.fullmatch(first) or (dash and not _SID_RE.fullmatch(last)):
            raise _fail(
                "malformed_path",
                f"selector item {item!r} must be a SID ('7') or an ascending range ('1-3'), no spaces",
                body,
            )
        start = int(first)
        end = int(last) if dash else start
        if dash and start >= end:
            raise _fail("malformed_path", f"range {item!r} must ascend; write a single SID alone", body)
        ranges.append((start, end))
    return SourcesPath(tuple(ranges))


def _parse_range_summary(body: str) -> LogicalPath:
    conversation, turn, rest = _split_turn(body, "su:" + body)
    if rest != _RANGE_SUMMARY:
        raise _fail("malformed_path", f"expected 'su:<turn>.{_RANGE_SUMMARY}'", body)
    return RangeSummaryPath(turn, conversation)


def _parse_working_summary(body: str) -> LogicalPath:
    conversation, turn, rest = _split_turn(body, "ws:" + body)
    if rest != _WORKING_SUMMARY:
        raise _fail("malformed_path", f"expected 'ws:<turn>.{_WORKING_SUMMARY}'", body)
    return WorkingSummaryPath(turn, conversation)


def _parse_skill(body: str) -> LogicalPath:
    skill_id, _, file = body.partition("/")
    if not file and body.endswith("/"):
        raise _fail("malformed_path", "a skill path must not end with '/'", body)
    return SkillPath(skill_id, file)


def _parse_knowledge(body: str) -> LogicalPath:
    space, slash, rel = body.partition("/")
    if not slash:
        raise _fail("malformed_path", "expected 'ks:<space>/<path>', e.g. 'ks:docs/architecture.md'", body)
    return KnowledgePath(space, rel)


_PARSERS: Final = {
    "ar": _parse_record,
    "tc": _parse_tool_call,
    "fi": _parse_file,
    "so": _parse_sources,
    "su": _parse_range_summary,
    "ws": _parse_working_summary,
    "sk": _parse_skill,
    "ks": _parse_knowledge,
}
