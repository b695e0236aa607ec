"""Channel specs: names, formats and the options each format allows."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from berth.streaming import ChannelParser, ChannelSetupError, ChannelSpec


class Action(BaseModel):
    action: str


def test_channel_name_is_stored_lower_case() -> None:
    assert ChannelSpec(name="Answer").name == "answer"


@pytest.mark.parametrize("name", ["", "has space", "dot.ted", "x" * 65, "ünïcode"])
def test_channel_name_outside_the_grammar_is_refused_with_the_rule(name: str) -> None:
    with pytest.raises(ValidationError, match="A-Z a-z 0-9 _ -"):
        ChannelSpec(name=name)


def test_defaults_are_an_internal_markdown_channel_without_citations() -> None:
    spec = ChannelSpec(name="notes")
    assert (spec.format, spec.replace_citations, spec.emit_marker, spec.composite) == (
        "markdown",
        False,
        None,
        False,
    )


def test_composite_needs_a_json_channel() -> None:
    with pytest.raises(ValidationError, match="need format 'json'"):
        ChannelSpec(name="answer", composite=True)


def test_json_model_needs_a_json_channel() -> None:
    with pytest.raises(ValidationError, match="need format 'json'"):
        ChannelSpec(name="answer", json_model=Action)


def test_code_channel_never_replaces_citations() -> None:
    with pytest.raises(ValidationError, match="never replaced in a 'code' channel"):
        ChannelSpec(name="code", format="code", replace_citations=True)


def test_citations_in_a_json_channel_need_composite_fields() -> None:
    with pytest.raises(ValidationError, match="set composite=True"):
        ChannelSpec(name="action", format="json", replace_citations=True)
    assert ChannelSpec(name="canvas", format="json", composite=True, replace_citations=True).composite


def test_blank_marker_is_refused() -> None:
    with pytest.raises(ValidationError, match="non-empty"):
        ChannelSpec(name="answer", emit_marker=" ")


def test_unknown_option_is_refused() -> None:
    with pytest.raises(ValidationError, match="extra"):
        ChannelSpec.model_validate({"name": "answer", "colour": "red"})


def test_only_markdown_and_text_channels_track_fences() -> None:
    tracking = {
        fmt: ChannelSpec(name="c", format=fmt).tracks_fences for fmt in ("markdown", "text", "html", "json", "code")
    }
    assert tracking == {"markdown": True, "text": True, "html": False, "json": False, "code": False}


def test_declaring_a_channel_twice_is_refused_with_a_code() -> None:
    with pytest.raises(ChannelSetupError, match="declared twice") as caught:
        ChannelParser([ChannelSpec(name="answer"), ChannelSpec(name="ANSWER")])
    assert caught.value.code == "duplicate_channel"
