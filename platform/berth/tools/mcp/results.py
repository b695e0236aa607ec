"""MCP ``tools/call`` results as :class:`~berth.tools.results.ToolOutput`, and bounded previews of big ones.

The mapping:

* text blocks → ``value`` (joined by blank lines); ``structuredContent``, when the server sends it, is the
  ``value`` instead (servers repeat it as JSON text for old clients, so the text is then left out);
* image blocks, and embedded blob resources with an ``image/*`` type → ``images`` (shown to the user,
  non-citable rows in the sources pool);
* embedded text resources → ``sources`` (``file`` rows for ``file:`` URIs, ``web`` rows otherwise) so the
  model can cite them;
* resource links, audio and non-image blobs → one line each in ``value`` naming what was left out;
* ``isError`` → ``is_error=True``: a tool error the model sees.

A result is never cut here: :func:`tool_output_from_result` keeps it whole (the runtime stores the full one),
and :func:`preview_tool_output` makes the bounded copy that goes into the model's context.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import TYPE_CHECKING, Any

from berth.tools.results import ImageContent, SourceCandidate, SourceType, ToolOutput

DEFAULT_PREVIEW_CHARS = 32_000
"""Default bound of :func:`preview_tool_output`: the preview's JSON is at most this many characters."""

if TYPE_CHECKING:
    import mcp_types as types

_ELISION = "\n[… {omitted} more characters not shown; the full result is stored]"
_RESERVED_CHARS = 400  # room for the JSON envelope, field names and the notes the preview adds


def tool_output_from_result(result: types.CallToolResult) -> ToolOutput:
    """Map an MCP ``CallToolResult`` onto a :class:`ToolOutput`, keeping every byte of it."""
    import mcp_types as types  # the SDK's types load with the first result (a session imported them already)

    texts: list[str] = []
    notes: list[str] = []
    images: list[ImageContent] = []
    sources: list[SourceCandidate] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            texts.append(block.text)
        elif isinstance(block, types.ImageContent):
            images.append(ImageContent(mime=block.mime_type, data_base64=block.data))
        elif isinstance(block, types.AudioContent):
            notes.append(f"[audio ({block.mime_type}, {_decoded_size(block.data)} bytes) not shown]")
        elif isinstance(block, types.ResourceLink):
            title = block.title or block.name
            about = f" — {block.description}" if block.description else ""
            notes.append(f"[resource link: {title} <{block.uri}>{about}]")
        elif isinstance(block, types.EmbeddedResource):
            _map_embedded(block.resource, sources, images, notes)
    value: Any
    if result.structured_content is not None and not result.is_error:
        value = result.structured_content
        if notes:
            value = {"result": value, "notes": notes}
    else:
        value = "\n\n".join(texts + notes)
    if not value and value != 0 and (images or sources):
        value = _describe_attachments(images, sources)
    return ToolOutput(value=value, images=images, sources=sources, is_error=bool(result.is_error))


def tool_output_size(output: ToolOutput) -> int:
    """The size of ``output`` as the runtime stores it: characters of its JSON form."""
    return len(output.model_dump_json())


def preview_tool_output(output: ToolOutput, max_chars: int = DEFAULT_PREVIEW_CHARS) -> ToolOutput:
    """A copy of ``output`` whose JSON form is at most ``max_chars`` characters (``output`` itself if it fits).

    The value keeps its head (a structured value becomes its JSON text, cut); each source keeps the head of
    its text; images are kept while they fit and named in ``summary`` when dropped. ``summary`` says that
    the preview is partial, so the model knows there is more.
    """
    if max_chars < _RESERVED_CHARS * 2:
        raise ValueError(f"max_chars must be at least {_RESERVED_CHARS * 2}, got {max_chars}")
    total = tool_output_size(output)
    if total <= max_chars:
        return output
    budget = max_chars - _RESERVED_CHARS
    value_text = output.value if isinstance(output.value, str) else json.dumps(output.value, ensure_ascii=False)
    # The value gets at least half the budget; sources share what the value does not need.
    value_budget = max(budget // 2, budget - _sources_size(output.sources))
    value = _cut(value_text, value_budget)
    remaining = budget - _json_len(value)
    sources: list[SourceCandidate] = []
    if output.sources:
        per_source = max(0, remaining // len(output.sources))
        for source in output.sources:
            envelope = _json_len(source.model_copy(update={"text": ""}).model_dump_json())
            if per_source - envelope < 64:
                break
            sources.append(source.model_copy(update={"text": _cut(source.text, per_source - envelope)}))
        remaining -= sum(_json_len(source.model_dump_json()) for source in sources)
    images: list[ImageContent] = []
    for image in output.images:
        size = _json_len(image.model_dump_json())
        if size > remaining:
            continue
        images.append(image)
        remaining -= size
    dropped_images = len(output.images) - len(images)
    dropped_sources = len(output.sources) - len(sources)
    parts = [f"preview of a {total:,}-character result; the full result is stored"]
    if dropped_images:
        parts.append(f"{dropped_images} image(s) not shown")
    if dropped_sources:
        parts.append(f"{dropped_sources} source(s) not shown")
    preview = ToolOutput(
        value=value, sources=sources, images=images, is_error=output.is_error, summary="; ".join(parts)
    )
    if tool_output_size(preview) > max_chars:  # JSON escaping made the text longer than counted
        return _shrink_until_fits(preview, max_chars)
    return preview


def _map_embedded(
    resource: types.TextResourceContents | types.BlobResourceContents,
    sources: list[SourceCandidate],
    images: list[ImageContent],
    notes: list[str],
) -> None:
    from mcp_types import TextResourceContents

    uri = str(resource.uri)
    mime = resource.mime_type or ""
    if isinstance(resource, TextResourceContents):
        sources.append(
            SourceCandidate(url=uri, title=uri, text=resource.text, mime=mime or "text/plain", source_type=_kind(uri))
        )
    elif mime.startswith("image/"):
        images.append(ImageContent(mime=mime, data_base64=resource.blob, title=uri))
    else:
        notes.append(f"[resource {uri} ({mime or 'binary'}, {_decoded_size(resource.blob)} bytes) not shown]")


def _kind(uri: str) -> SourceType:
    return "web" if uri.startswith(("http://", "https://")) else "file"


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data) * 3 // 4


def _describe_attachments(images: list[ImageContent], sources: list[SourceCandidate]) -> str:
    parts = []
    if images:
        parts.append(f"{len(images)} image(s)")
    if sources:
        parts.append(f"{len(sources)} resource(s)")
    return "The tool returned " + " and ".join(parts) + "."


def _sources_size(sources: list[SourceCandidate]) -> int:
    return sum(_json_len(source.model_dump_json()) for source in sources)


def _json_len(value: Any) -> int:
    return len(value) if isinstance(value, str) else len(json.dumps(value, ensure_ascii=False))


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    keep = max(0, limit - len(_ELISION.format(omitted=len(text))))
    return text[:keep] + _ELISION.format(omitted=len(text) - keep)


def _shrink_until_fits(preview: ToolOutput, max_chars: int) -> ToolOutput:
    value = preview.value if isinstance(preview.value, str) else json.dumps(preview.value, ensure_ascii=False)
    bare = preview.model_copy(update={"sources": [], "images": [], "value": ""})
    room = max_chars - tool_output_size(bare)
    summary = (preview.summary or "") + "; sources and images not shown"
    while True:
        candidate = bare.model_copy(update={"value": _cut(value, room), "summary": summary})
        overflow = tool_output_size(candidate) - max_chars
        if overflow <= 0:
            return candidate
        room -= overflow
