"""Timeline blocks: the typed, immutable records a conversation's timeline is made of.

A :class:`Block` is a frozen pydantic model. Its ``ts`` is always a timezone-aware UTC instant and
serializes as ISO-8601 with a ``Z`` suffix; naive timestamps are refused. Every block names the turn it
belongs to in one field, ``turn_id``, and carries a logical path (:mod:`berth.runtime.paths`) that is
consistent with it: ``tc:turn_4.c3.result`` can only be the path of a block of ``turn_4`` whose
``call_id`` is ``c3``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Annotated, Any, Final, Literal, Self, TypeAlias, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationInfo,
    model_validator,
)

from berth.runtime.paths import (
    TURN_ID_PATTERN,
    LogicalPathError,
    RecordPath,
    ToolCallPath,
    parse_path,
    path_turn_id,
)
from berth.runtime.unvalidated import unvalidated

__all__ = [
    "FINAL_ANSWER_TYPES",
    "STORED_BLOCKS",
    "Author",
    "Block",
    "BlockType",
    "UtcTimestamp",
    "format_utc",
    "make_block",
]


def _require_utc(value: datetime) -> datetime:
    """Refuse naive datetimes and convert aware ones to UTC."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("timestamps must carry a timezone (UTC ISO-8601, e.g. '2026-03-01T10:00:00Z')")
    return value.astimezone(UTC)


def format_utc(value: datetime) -> str:
    """Format an aware datetime as UTC ISO-8601 with a ``Z`` suffix (microseconds only when non-zero)."""
    if type(value) is datetime and value.tzinfo is UTC:
        # Already UTC (every block's ts): isoformat leaves zero microseconds out as well; only "+00:00" changes.
        return value.isoformat()[:-6] + "Z"
    utc = _require_utc(value)
    spec = "microseconds" if utc.microsecond else "seconds"
    return utc.replace(tzinfo=None).isoformat(timespec=spec) + "Z"


UtcTimestamp: TypeAlias = Annotated[datetime, AfterValidator(_require_utc)]
"""A timezone-aware instant, normalized to UTC, serialized as ISO-8601 ``...Z`` in JSON.

Pydantic's own JSON form of a UTC datetime is exactly :func:`format_utc`'s (a property test checks
it), so serializing needs no call back into Python.
"""


class BlockType(StrEnum):
    """The block types the runtime knows (SPEC §4.3), plus the live-event blocks of §4.1."""

    TURN_HEADER = "turn.header"
    USER_PROMPT = "user.prompt"
    USER_ATTACHMENT = "user.attachment"
    USER_FOLLOWUP = "user.followup"
    USER_STEER = "user.steer"
    REACT_THINKING = "react.thinking"
    REACT_NOTES = "react.notes"
    REACT_TOOL_CALL = "react.tool.call"
    REACT_TOOL_CODE = "react.tool.code"
    REACT_TOOL_RESULT = "react.tool.result"
    REACT_NOTICE = "react.notice"
    REACT_PLAN = "react.plan"
    REACT_PLAN_ACK = "react.plan.ack"
    ASSISTANT_COMPLETION = "assistant.completion"
    ASSISTANT_FOLLOWUPS = "assistant.followups"
    CONV_RANGE_SUMMARY = "conv.range.summary"
    CONV_WORKING_SUMMARY = "conv.working.summary"
    SYSTEM_MESSAGE = "system.message"
    TURN_STATUS = "turn.status"


FINAL_ANSWER_TYPES: Final[frozenset[BlockType]] = frozenset(
    {BlockType.ASSISTANT_COMPLETION, BlockType.ASSISTANT_FOLLOWUPS, BlockType.TURN_STATUS}
)
"""The final-answer family: these blocks form the last round of a turn, apart from tool rounds."""

Author: TypeAlias = Literal["user", "assistant", "runtime", "tool"]

STORED_BLOCKS: Final[Mapping[str, bool]] = MappingProxyType({"stored_blocks": True})
"""The validation context for blocks read back from what Berth stored.

Every stored block passed the path and consistency checks when it was made, and those checks (Python,
per block) are most of what validating a long timeline costs; with this context they are skipped.
Field types, patterns and timestamps are still validated.
"""


def _is_stored(info: ValidationInfo) -> bool:
    return isinstance(info.context, Mapping) and bool(info.context.get("stored_blocks"))


_CALL_ID_PATTERN: Final = r"^[A-Za-z0-9_-]{1,128}$"

_FIELDS_SETS: dict[frozenset[str], set[str]] = {}
"""One fields-set per combination of set fields, shared by the blocks that have it (:meth:`Block._share_fields_set`)."""
_FIELDS_SETS_LIMIT: Final = 1024


def _shared_fields_set(fields_set: set[str]) -> set[str]:
    """The shared set equal to ``fields_set`` (``fields_set`` itself the first time)."""
    key = frozenset(fields_set)
    shared = _FIELDS_SETS.get(key)
    if shared is None:
        if len(_FIELDS_SETS) >= _FIELDS_SETS_LIMIT:
            return fields_set
        shared = _FIELDS_SETS[key] = fields_set
    return shared


class Block(BaseModel):
    """One immutable record on a conversation's timeline.

    Exactly the fields of SPEC §4.3, plus ``call_id``, which ties the blocks of one round (the
    decision notes, the call, its code and every part of its result) together. At most one of
    ``text``, ``data`` and ``blob_ref`` is set. A hidden block keeps its content (``react.read``
    re-opens it) and renders as its ``replacement``. To change a block, make a new one with
    :meth:`pydantic.BaseModel.model_copy`; the timeline swaps it in.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: BlockType
    path: str
    turn_id: Annotated[str, Field(pattern=f"^{TURN_ID_PATTERN}$")]
    ts: datetime
    """Timezone-aware; normalized to UTC (:data:`UtcTimestamp`'s rules, checked by the model's validator)."""
    author: Author
    mime: str = "text/plain"
    text: str | None = None
    data: JsonValue = None
    blob_ref: str | None = None
    meta: dict[str, JsonValue] = Field(default_factory=dict)
    call_id: Annotated[str | None, Field(pattern=_CALL_ID_PATTERN)] = None
    hidden: bool = False
    replacement: str | None = None

    @model_validator(mode="after")
    def _check_consistency(self, info: ValidationInfo) -> Self:
        # One validator does all the Python-side work (a validator call per field costs more than the
        # checks). A frozen model's fields are normalized through __dict__, during validation only.
        ts = self.ts
        if ts.tzinfo is not UTC:
            self.__dict__["ts"] = _require_utc(ts)
        if _is_stored(info):
            self._share_fields_set()
            return self
        try:
            parsed = parse_path(self.path)
        except LogicalPathError as error:
            raise ValueError(f"path: {error}") from None
        owner = path_turn_id(parsed)
        if owner is not None and owner != self.turn_id:
            raise ValueError(f"path {self.path!r} belongs to {owner!r}, not to turn_id {self.turn_id!r}")
        if isinstance(parsed, ToolCallPath):
            if self.call_id is None:  # a tc: path names its call; the caller may leave call_id out
                self.__dict__["call_id"] = parsed.call_id
                self.__pydantic_fields_set__.add("call_id")
            elif parsed.call_id != self.call_id:
                raise ValueError(f"path {self.path!r} names call {parsed.call_id!r}, not call_id {self.call_id!r}")
        if (self.text is not None) + (self.data is not None) + (self.blob_ref is not None) > 1:
            raise ValueError("a block carries at most one of text, data and blob_ref")
        if self.hidden and not self.replacement:
            raise ValueError("a hidden block needs a replacement text saying what was hidden")
        if not self.hidden and self.replacement is not None:
            raise ValueError("only a hidden block has a replacement")
        self._share_fields_set()
        return self

    def _share_fields_set(self) -> None:
        """Share the set of the fields given with the blocks given the same ones.

        Pydantic gives every instance a set of its own (about 730 bytes for a block's five to eight fields: as much
        as its ``__dict__``), and a resident conversation keeps thousands of blocks. A block is frozen, so nothing
        adds to the set after validation; :meth:`~pydantic.BaseModel.model_copy` copies it before adding to it.
        """
        object.__setattr__(self, "__pydantic_fields_set__", _shared_fields_set(self.__pydantic_fields_set__))


_AUTHORS: Final[frozenset[str]] = frozenset(get_args(Author))
_CALL_ID_RE: Final = re.compile(_CALL_ID_PATTERN.removeprefix("^").removesuffix("$"))  # used with fullmatch
_UNSET: Final[Any] = object()
_SCALARS: Final = (str, int, float, bool)


class _NotPlainJsonError(Exception):
    """A value :func:`_json_copy` leaves to pydantic (not built of exactly dict, list, str, int, float, bool, None)."""


def _json_copy(value: object) -> JsonValue:
    """A copy of ``value`` with new dicts and lists, as pydantic's ``JsonValue`` validation makes it.

    Only exact JSON types are copied; anything else (a tuple, a subclass, a dict with a key that is not a
    ``str``) raises :class:`_NotPlainJsonError`, and the block is validated by pydantic instead.
    """
    kind = type(value)
    if value is None or kind in _SCALARS:
        return value  # type: ignore[return-value]
    if kind is dict:
        copied: dict[str, JsonValue] = {}
        for key, item in value.items():  # type: ignore[attr-defined]
            if type(key) is not str:
                raise _NotPlainJsonError
            copied[key] = _json_copy(item)
        return copied
    if kind is list:
        return [_json_copy(item) for item in value]  # type: ignore[attr-defined]
    raise _NotPlainJsonError


def make_block(
    block_type: BlockType,
    path: RecordPath | ToolCallPath,
    ts: datetime,
    author: Author,
    *,
    mime: str = _UNSET,
    text: str | None = _UNSET,
    data: JsonValue = _UNSET,
    meta: dict[str, JsonValue] = _UNSET,
    call_id: str | None = _UNSET,
) -> Block:
    """The block at the typed ``path`` (its ``turn_id`` is the path's): what ``Block(...)`` makes of these fields.

    The runtime makes several blocks a round from values it built itself; validating each through pydantic
    and the model validator cost about 45,000 instructions, most of it generic work on values that are
    plainly valid. When every value is of its exact type (an aware UTC ``ts``, JSON made of dicts, lists
    and scalars, a ``call_id`` matching the pattern, at most one of ``text`` and ``data``), the block is
    built here with the same fields, the same fields-set and copies of ``data`` and ``meta``, as
    validation would; any other value goes through ``Block(...)``, which normalizes or refuses it as
    always. The typed path validated itself when it was made, so it is not parsed again.
    """
    given: dict[str, Any] = {}
    if mime is not _UNSET:
        given["mime"] = mime
    if text is not _UNSET:
        given["text"] = text
    if data is not _UNSET:
        given["data"] = data
    if meta is not _UNSET:
        given["meta"] = meta
    if call_id is not _UNSET:
        given["call_id"] = call_id
    turn_id = path.turn_id
    block = _plain_block(block_type, path, turn_id, ts, author, given)
    if block is None:
        return Block(type=block_type, path=str(path), turn_id=turn_id, ts=ts, author=author, **given)
    return block


def _plain_block(
    block_type: BlockType,
    path: RecordPath | ToolCallPath,
    turn_id: str,
    ts: datetime,
    author: str,
    given: dict[str, Any],
) -> Block | None:
    """The block :func:`make_block` describes, or None when a value needs pydantic's validation."""
    if (
        type(block_type) is not BlockType
        or type(path) not in (RecordPath, ToolCallPath)
        or path.conversation_id is not None
        or type(ts) is not datetime
        or ts.tzinfo is not UTC
        or type(author) is not str
        or author not in _AUTHORS
    ):
        return None
    mime = given.get("mime", "text/plain")
    text = given.get("text")
    call_id = given.get("call_id")
    if type(mime) is not str or (text is not None and type(text) is not str):
        return None
    try:
        data = _json_copy(given.get("data"))
        meta = given.get("meta", _UNSET)
        meta = {} if meta is _UNSET else _json_copy(meta)
    except _NotPlainJsonError:
        return None
    if type(meta) is not dict or (text is not None and data is not None):
        return None
    fields_set = {"type", "path", "turn_id", "ts", "author", *given}
    if type(path) is ToolCallPath:
        if call_id is None:
            call_id = path.call_id
            fields_set.add("call_id")
        elif call_id != path.call_id:
            return None
    if call_id is not None and (type(call_id) is not str or _CALL_ID_RE.fullmatch(call_id) is None):
        return None
    return unvalidated(
        Block,
        {
            "type": block_type,
            "path": str(path),
            "turn_id": turn_id,
            "ts": ts,
            "author": author,
            "mime": mime,
            "text": text,
            "data": data,
            "blob_ref": None,
            "meta": meta,
            "call_id": call_id,
            "hidden": False,
            "replacement": None,
        },
        _shared_fields_set(fields_set),
    )
