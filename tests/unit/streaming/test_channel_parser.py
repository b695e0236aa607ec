"""The incremental tag parser: channel boundaries, instances, outside text, formats and fences."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from berth.streaming import (
    ChannelClosed,
    ChannelOpened,
    ChannelParser,
    ChannelSpec,
    ChannelText,
    OutsideText,
    ParserEvent,
)

SPECS = [
    ChannelSpec(name="thinking", emit_marker="thinking"),
    ChannelSpec(name="answer", emit_marker="answer"),
    ChannelSpec(name="notes", format="text"),
    ChannelSpec(name="code", format="code"),
    ChannelSpec(name="action", format="json"),
    ChannelSpec(name="page", format="html"),
]


def parse(text: str | Iterable[str], specs: list[ChannelSpec] = SPECS) -> list[ParserEvent]:
    """All events for ``text`` (one chunk) or for the given chunks, with adjacent text merged."""
    parser = ChannelParser(specs)
    events: list[ParserEvent] = []
    for chunk in [text] if isinstance(text, str) else text:
        events.extend(parser.feed(chunk))
    events.extend(parser.finish())
    return merged(events)


def merged(events: list[ParserEvent]) -> list[ParserEvent]:
    """Adjacent text events of the same instance joined, so chunkings can be compared."""
    out: list[ParserEvent] = []
    for event in events:
        last = out[-1] if out else None
        if (
            isinstance(event, ChannelText)
            and isinstance(last, ChannelText)
            and (last.channel, last.instance) == (event.channel, event.instance)
        ):
            out[-1] = ChannelText(event.channel, event.instance, last.text + event.text)
            continue
        if isinstance(event, OutsideText) and isinstance(last, OutsideText):
            out[-1] = OutsideText(last.text + event.text)
            continue
        out.append(event)
    return out


def channel_text(events: list[ParserEvent], channel: str, instance: int = 0) -> str:
    return "".join(
        event.text
        for event in events
        if isinstance(event, ChannelText) and (event.channel, event.instance) == (channel, instance)
    )


def test_tags_split_the_stream_into_channel_events() -> None:
    assert parse("<channel:thinking>hm</channel:thinking><channel:answer>Hi</channel:answer>") == [
        ChannelOpened("thinking", 0, "thinking"),
        ChannelText("thinking", 0, "hm"),
        ChannelClosed("thinking", 0, "thinking"),
        ChannelOpened("answer", 0, "answer"),
        ChannelText("answer", 0, "Hi"),
        ChannelClosed("answer", 0, "answer"),
    ]


def test_tags_are_case_insensitive_and_names_are_reported_lower_case() -> None:
    events = parse("<CHANNEL:Answer>Hi</Channel:ANSWER>")
    assert events == [
        ChannelOpened("answer", 0, "answer"),
        ChannelText("answer", 0, "Hi"),
        ChannelClosed("answer", 0, "answer"),
    ]


def test_a_repeated_channel_becomes_numbered_instances() -> None:
    events = parse("<channel:action>{}</channel:action><channel:thinking>t</channel:thinking>" * 2)
    opened = [(e.channel, e.instance) for e in events if isinstance(e, ChannelOpened)]
    assert opened == [("action", 0), ("thinking", 0), ("action", 1), ("thinking", 1)]


def test_text_outside_channels_is_reported_and_never_lost() -> None:
    events = parse("before <channel:answer>in</channel:answer>\nbetween<channel:notes>n</channel:notes> after")
    outside = [e.text for e in events if isinstance(e, OutsideText)]
    assert outside == ["before ", "\nbetween", " after"]


def test_a_stray_closing_tag_outside_any_channel_is_outside_text() -> None:
    assert parse("x</channel:answer>y") == [OutsideText("x</channel:answer>y")]


def test_an_undeclared_channel_is_reported_as_an_internal_instance_not_a_crash() -> None:
    events = parse("<channel:final_answer>oops</channel:final_answer>")
    assert events == [
        ChannelOpened("final_answer", 0, None, declared=False),
        ChannelText("final_answer", 0, "oops"),
        ChannelClosed("final_answer", 0, None),
    ]


def test_an_unclosed_channel_is_closed_at_end_of_stream_with_the_unterminated_flag() -> None:
    assert parse("<channel:answer>cut off")[-1] == ChannelClosed("answer", 0, "answer", unterminated=True)


def test_a_partial_tag_at_end_of_stream_is_flushed_as_text() -> None:
    events = parse("<channel:answer>almost</channel:answ")
    assert channel_text(events, "answer") == "almost</channel:answ"
    assert events[-1] == ChannelClosed("answer", 0, "answer", unterminated=True)
    assert parse("tail <chann") == [OutsideText("tail <chann")]


def test_nested_looking_tags_are_content_of_the_open_channel() -> None:
    text = "<channel:answer>a<channel:thinking>b</channel:thinking>c<channel:answer>d</channel:answer>e"
    events = parse(text)
    assert channel_text(events, "answer") == "a<channel:thinking>b</channel:thinking>c<channel:answer>d"
    assert [e for e in events if isinstance(e, ChannelOpened)] == [ChannelOpened("answer", 0, "answer")]
    assert events[-1] == OutsideText("e")


@pytest.mark.parametrize(
    "not_a_tag",
    ["<channel:>", "<channel:two words>", "<channel:dot.ted>", "<channel :answer>", "<channelx:answer>"],
)
def test_malformed_tags_are_plain_text(not_a_tag: str) -> None:
    assert parse(f"a{not_a_tag}b") == [OutsideText(f"a{not_a_tag}b")]


def test_a_name_longer_than_64_characters_is_not_a_tag_even_when_fed_one_character_at_a_time() -> None:
    text = "<channel:" + "x" * 65 + ">body"
    assert parse(text) == parse(list(text)) == [OutsideText(text)]


def test_a_tag_split_at_every_position_is_reassembled() -> None:
    text = "pre<channel:answer>body</channel:answer>post"
    expected = parse(text)
    for cut in range(1, len(text)):
        assert parse([text[:cut], text[cut:]]) == expected, cut
    assert parse(list(text)) == expected


def test_a_code_channel_closes_inside_backticks() -> None:
    inline = parse("<channel:code>x = `</channel:code>`")
    assert channel_text(inline, "code") == "x = `"
    assert inline[-1] == OutsideText("`")
    fenced = parse("<channel:code>```python\nprint(1)\n</channel:code>\n```")
    assert channel_text(fenced, "code") == "```python\nprint(1)\n"
    assert fenced[-1] == OutsideText("\n```")


def test_a_json_channel_closes_even_inside_a_string() -> None:
    events = parse('<channel:action>{"notes": "</channel:action>"}')
    assert channel_text(events, "action") == '{"notes": "'


def test_an_html_channel_closes_inside_a_pre_block() -> None:
    events = parse("<channel:page><pre>\n```\n</channel:page>\n```</pre>")
    assert channel_text(events, "page") == "<pre>\n```\n"


@pytest.mark.parametrize("fence", ["```", "~~~", "````", "  ```"])
def test_a_tag_inside_a_fenced_block_in_markdown_is_text(fence: str) -> None:
    body = f"See:\n{fence}xml\n<channel:answer>hi</channel:answer>\n{fence.strip()}\nDone."
    events = parse(f"<channel:answer>{body}</channel:answer>")
    assert channel_text(events, "answer") == body
    assert events[-1] == ChannelClosed("answer", 0, "answer")


def test_a_tag_inside_a_fenced_block_in_a_text_channel_is_text() -> None:
    body = "```\n</channel:notes>\n```\n"
    assert channel_text(parse(f"<channel:notes>{body}</channel:notes>"), "notes") == body


def test_an_unclosed_fence_keeps_the_channel_open_to_the_end() -> None:
    events = parse("<channel:answer>```\ncode</channel:answer>more")
    assert channel_text(events, "answer") == "```\ncode</channel:answer>more"
    assert events[-1] == ChannelClosed("answer", 0, "answer", unterminated=True)


def test_a_closing_fence_directly_followed_by_the_tag_ends_the_channel() -> None:
    events = parse("<channel:answer>```py\nx = 1\n```</channel:answer>after")
    assert channel_text(events, "answer") == "```py\nx = 1\n```"
    assert events[-1] == OutsideText("after")


def test_a_tag_on_the_line_that_opens_a_fence_ends_the_channel() -> None:
    events = parse("<channel:answer>```</channel:answer>after")
    assert channel_text(events, "answer") == "```"
    assert events[-1] == OutsideText("after")


def test_inline_code_does_not_protect_a_tag_in_markdown() -> None:
    events = parse("<channel:answer>use `</channel:answer>` to close")
    assert channel_text(events, "answer") == "use `"


def test_a_backtick_in_the_info_string_means_inline_code_not_a_fence() -> None:
    events = parse("<channel:answer>```a`b```\n</channel:answer>after")
    assert channel_text(events, "answer") == "```a`b```\n"


def test_a_fence_indented_four_spaces_is_indented_code_not_a_fence() -> None:
    events = parse("<channel:answer>    ```\n</channel:answer>after")
    assert channel_text(events, "answer") == "    ```\n"


def test_a_shorter_or_different_run_does_not_close_a_fence() -> None:
    body = "````\n```\n~~~~\n</channel:answer>\n````\n"
    assert channel_text(parse(f"<channel:answer>{body}</channel:answer>"), "answer") == body


def test_a_fence_line_with_trailing_text_does_not_close_the_fence() -> None:
    body = "```\n``` not a closer\n</channel:answer>\n```\n"
    assert channel_text(parse(f"<channel:answer>{body}</channel:answer>"), "answer") == body


def test_fence_state_does_not_leak_into_the_next_instance() -> None:
    events = parse("<channel:answer>```\n</channel:answer>\n```\n</channel:answer><channel:answer>b</channel:answer>")
    assert channel_text(events, "answer", 1) == "b"
    assert events[-1] == ChannelClosed("answer", 1, "answer")


def test_a_two_megabyte_channel_streams_with_a_bounded_lag() -> None:
    body = ("Lorem ipsum <b>dolor</b> sit [amet] `x < y` \n" * 50_000)[: 2 * 1024 * 1024]
    text = f"<channel:answer>{body}</channel:answer>"
    parser = ChannelParser(SPECS)
    fed = emitted = 0
    pieces: list[str] = []
    for start in range(0, len(text), 1000):
        chunk = text[start : start + 1000]
        fed += len(chunk)
        for event in parser.feed(chunk):
            if isinstance(event, ChannelText):
                pieces.append(event.text)
                emitted += len(event.text)
        # only a possible tag is ever held back: the parser never waits for more than that
        assert fed - len("<channel:answer>") - emitted < 75 or fed == len(text)
    parser.finish()
    assert "".join(pieces) == body


def test_ten_thousand_instances_are_numbered_in_order() -> None:
    text = "".join(f'<channel:action>{{"i": {i}}}</channel:action>' for i in range(10_000))
    parser = ChannelParser(SPECS)
    events: list[ParserEvent] = []
    for start in range(0, len(text), 16):
        events.extend(parser.feed(text[start : start + 16]))
    events.extend(parser.finish())
    opened = [e.instance for e in events if isinstance(e, ChannelOpened)]
    closed = [e for e in events if isinstance(e, ChannelClosed)]
    assert opened == list(range(10_000))
    assert len(closed) == 10_000 and not any(e.unterminated for e in closed)
    assert channel_text(merged(events), "action", 9_999) == '{"i": 9999}'


def test_spec_of_an_undeclared_channel_is_plain_text() -> None:
    parser = ChannelParser(SPECS)
    assert parser.spec("Mystery").format == "text"
    assert parser.spec("ANSWER") is parser.channels["answer"]


def test_feeding_after_finish_is_a_programming_error() -> None:
    parser = ChannelParser(SPECS)
    parser.finish()
    assert parser.finish() == []
    with pytest.raises(RuntimeError, match="after finish"):
        parser.feed("x")
