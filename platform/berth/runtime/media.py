"""Images and PDFs in the prompt: the bytes behind ``user.attachment`` blocks whose ``meta.media`` says the
turn's model reads them as themselves (:func:`berth.runtime.attachments.choose_media`).

A block holds text only; the bytes wait on a *shelf* (``fi:`` path → bytes) that the renderer of the
conversation keeps. The turn that brings a file puts it there before its first render; a conversation rendered
again in another process, or after the renderer was dropped, has the visible blocks' files read back from the
store first (:func:`stock_shelf`). The renderer then puts a :class:`PromptMedia` on the part of the block's turn
head, after its text and before the part's cache checkpoint, so a long conversation reads a turn-1 screenshot from
the cache in turn 40. A pruned turn renders as its card and a hidden block as its replacement: neither carries
its bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Literal

from berth.runtime.blocks import Block
from berth.runtime.paths import FilePath, LogicalPathError, parse_path
from berth.runtime.workspace import artifact_path
from berth.storage.conversations import ConversationHandle, StorageError

__all__ = ["PromptMedia", "media_of", "stock_shelf"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PromptMedia:
    """An image or a PDF that follows the text of its prompt part: what a provider sends as an image or a
    document block."""

    kind: Literal["image", "pdf"]
    mime: str
    data: bytes
    path: str
    """The attachment's ``fi:`` path (the block it belongs to)."""


def _wants_media(block: Block) -> bool:
    return bool(block.meta.get("media")) and not block.hidden


def _media_path(block: Block) -> str:
    """The ``fi:`` path of the file a block shows: its own (an attachment), or ``meta.media_path`` (a
    ``react.read`` result that shows an image again)."""
    return str(block.meta.get("media_path") or block.path)


def media_of(blocks: Sequence[Block], shelf: Mapping[str, bytes]) -> tuple[PromptMedia, ...]:
    """The media of ``blocks`` whose bytes are on the shelf, in block order."""
    found = []
    for block in blocks:
        if _wants_media(block):
            path = _media_path(block)
            data = shelf.get(path)
            if data is not None:
                kind: Literal["image", "pdf"] = "pdf" if block.meta.get("media") == "pdf" else "image"
                found.append(PromptMedia(kind, str(block.meta.get("media_mime") or block.mime), data, path))
    return tuple(found)


async def stock_shelf(shelf: MutableMapping[str, bytes], blocks: Sequence[Block], handle: ConversationHandle) -> bool:
    """Read from the store the files of ``blocks`` (the visible ones) that the shelf lacks, and drop the files no
    visible block names any more. Returns whether anything was added (rendered parts then lack it)."""
    wanted = {_media_path(block) for block in blocks if _wants_media(block)}
    for path in [path for path in shelf if path not in wanted]:
        del shelf[path]
    added = False
    for path in sorted(wanted - shelf.keys()):
        try:
            parsed = parse_path(path)
        except LogicalPathError:
            continue
        if not isinstance(parsed, FilePath):
            continue
        try:
            shelf[path] = await handle.read_artifact(artifact_path(parsed.turn_id, parsed.area, parsed.rel))
        except StorageError as error:  # shown by its text alone, as for a model that does not read it
            log.warning("attachment %s is not stored (%s): the model reads its text only", path, error)
            continue
        added = True
    return added
