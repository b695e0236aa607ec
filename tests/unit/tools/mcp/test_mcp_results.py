"""MCP tool results as ToolOutput, and bounded previews of big ones."""

from __future__ import annotations

import base64

import mcp_types as types
import pytest

from berth.tools.mcp.results import preview_tool_output, tool_output_from_result, tool_output_size
from berth.tools.results import ImageContent, SourceCandidate, ToolOutput

PNG = base64.b64encode(b"\x89PNG fake").decode()


def result(
    *content: types.ContentBlock, structured: dict[str, object] | None = None, error: bool = False
) -> types.CallToolResult:
    return types.CallToolResult(content=list(content), structured_content=structured, is_error=error)


def test_text_blocks_join_into_the_value() -> None:
    output = tool_output_from_result(result(types.TextContent(text="one"), types.TextContent(text="two")))
    assert output == ToolOutput(value="one\n\ntwo")


def test_structured_content_is_the_value_instead_of_its_json_text() -> None:
    output = tool_output_from_result(result(types.TextContent(text='{"a": 1}'), structured={"a": 1}))
    assert output.value == {"a": 1}


def test_images_become_non_text_images_and_the_value_still_describes_the_result() -> None:
    output = tool_output_from_result(result(types.ImageContent(data=PNG, mime_type="image/png")))
    assert output.images == [ImageContent(mime="image/png", data_base64=PNG)]
    assert output.value == "The tool returned 1 image(s)."


def test_embedded_text_resources_become_citable_sources() -> None:
    resource = types.TextResourceContents(uri="file:///docs/a.md", mime_type="text/markdown", text="# A")
    web = types.TextResourceContents(uri="https://example.org/b", text="B")
    output = tool_output_from_result(
        result(types.EmbeddedResource(resource=resource), types.EmbeddedResource(resource=web))
    )
    assert output.sources == [
        SourceCandidate(
            url="file:///docs/a.md", title="file:///docs/a.md", text="# A", mime="text/markdown", source_type="file"
        ),
        SourceCandidate(url="https://example.org/b", title="https://example.org/b", text="B", source_type="web"),
    ]


def test_embedded_image_blobs_join_the_images_and_other_blobs_are_named_in_the_value() -> None:
    image = types.BlobResourceContents(uri="demo://logo", mime_type="image/png", blob=PNG)
    archive = types.BlobResourceContents(uri="demo://data.gz", mime_type="application/gzip", blob=PNG)
    output = tool_output_from_result(
        result(types.EmbeddedResource(resource=image), types.EmbeddedResource(resource=archive))
    )
    assert output.images == [ImageContent(mime="image/png", data_base64=PNG, title="demo://logo")]
    assert output.value == "[resource demo://data.gz (application/gzip, 9 bytes) not shown]"


def test_resource_links_and_audio_are_named_in_the_value() -> None:
    link = types.ResourceLink(name="report", uri="demo://report", description="the weekly report")
    audio = types.AudioContent(data=PNG, mime_type="audio/wav")
    output = tool_output_from_result(result(types.TextContent(text="see"), link, audio))
    assert output.value == (
        "see\n\n[resource link: report <demo://report> — the weekly report]\n\n[audio (audio/wav, 9 bytes) not shown]"
    )


def test_is_error_results_become_tool_errors_with_their_text() -> None:
    output = tool_output_from_result(result(types.TextContent(text="no such city"), error=True))
    assert output.is_error
    assert output.value == "no such city"


def test_a_result_that_fits_is_its_own_preview() -> None:
    output = ToolOutput(value="small")
    assert preview_tool_output(output, 1_000) is output


@pytest.mark.parametrize("cap", [800, 4_000, 32_000])
def test_the_preview_of_a_big_result_is_bounded_and_says_it_is_partial(cap: int) -> None:
    big = ToolOutput(
        value="é" * 100_000,
        sources=[SourceCandidate(url=f"file:///{n}", text='"quoted"' * 5_000) for n in range(5)],
        images=[ImageContent(mime="image/png", data_base64=PNG * 2_000)],
    )
    preview = preview_tool_output(big, cap)
    assert tool_output_size(preview) <= cap
    assert isinstance(preview.value, str)
    assert preview.value.startswith("é")
    assert "the full result is stored" in (preview.summary or "")
    assert len(big.value) == 100_000  # the original is untouched


def test_a_structured_value_is_previewed_as_its_json_head() -> None:
    big = ToolOutput(value={"rows": list(range(50_000))})
    preview = preview_tool_output(big, 2_000)
    assert tool_output_size(preview) <= 2_000
    assert preview.value.startswith('{"rows": [0, 1, 2')


def test_a_preview_bound_too_small_to_say_anything_is_refused() -> None:
    with pytest.raises(ValueError, match="at least"):
        preview_tool_output(ToolOutput(value="x" * 10_000), 100)
