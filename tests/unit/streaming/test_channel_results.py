"""Per-channel results: raw text, parsed JSON, instance counts, sources and timing."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pydantic import BaseModel

from berth.streaming import ChannelRenderer, ChannelSpec, StreamEvent, StreamResult, parse_json_channel

RenderRun = Callable[..., tuple[list[StreamEvent], StreamResult]]


class Action(BaseModel):
    action: str
    notes: str = ""


SPECS = [
    ChannelSpec(name="thinking", emit_marker="thinking"),
    ChannelSpec(name="action", format="json", json_model=Action),
    ChannelSpec(name="followups", format="json"),
    ChannelSpec(name="answer", emit_marker="answer"),
]


def test_json_channels_are_parsed_and_validated_against_their_model(render: RenderRun) -> None:
    _, result = render(SPECS, ['<channel:action>{"action": "complete", "notes": "done"}</channel:action>'])
    instance = result.channel("action").instances[0]
    assert instance.parsed == Action(action="complete", notes="done")
    assert instance.problem is None


def test_a_json_channel_without_a_model_keeps_the_plain_value(render: RenderRun) -> None:
    _, result = render(SPECS, ['<channel:followups>\n```json\n{"followups": ["a"]}\n```\n</channel:followups>'])
    assert result.channel("followups").instances[0].parsed == {"followups": ["a"]}


@pytest.mark.parametrize(
    ("raw", "code", "message"),
    [
        ('{"action": 1}', "json_schema_mismatch", "action: Input should be a valid string"),
        ('{"notes": "x"}', "json_schema_mismatch", "action: Field required"),
        ('{"action": "complete",}', "json_invalid", "line 1 column 23"),
        ("  ", "json_empty", "no JSON value"),
    ],
)
def test_a_json_channel_that_does_not_parse_reports_a_coded_problem(
    render: RenderRun, raw: str, code: str, message: str
) -> None:
    _, result = render(SPECS, [f"<channel:action>{raw}</channel:action>"])
    instance = result.channel("action").instances[0]
    assert instance.parsed is None
    assert instance.problem is not None
    assert instance.problem.code == code
    assert message in instance.problem.message


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [('```json\n{"a": 1}\n```', {"a": 1}), ('~~~\n{"a": 1}', {"a": 1}), ("```json", None)],
)
def test_parse_json_channel_tolerates_a_code_fence(raw: str, parsed: object) -> None:
    assert parse_json_channel(raw, None)[0] == parsed


def test_parse_json_channel_accepts_raw_newlines_inside_strings() -> None:
    assert parse_json_channel('{"notes": "two\nlines", "action": "exit"}', Action) == (
        Action(action="exit", notes="two\nlines"),
        None,
    )


def test_every_declared_channel_has_a_result_even_when_absent(render: RenderRun) -> None:
    _, result = render(SPECS, ["<channel:answer>a</channel:answer><channel:answer>b</channel:answer>"])
    assert result.channel("answer").instance_count == 2
    assert result.channel("answer").raw_text == "ab"
    assert [i.raw_text for i in result.channel("answer").instances] == ["a", "b"]
    assert result.channel("thinking").instance_count == 0
    assert result.channel("thinking").first_opened_at_s is None


def test_undeclared_channels_and_outside_text_are_in_the_results(render: RenderRun) -> None:
    _, result = render(SPECS, ["hi <channel:Mystery>m</channel:mystery> bye"])
    assert result.undeclared_channels == ("mystery",)
    assert result.channel("MYSTERY").raw_text == "m"
    assert not result.channel("mystery").declared
    assert result.outside_text == "hi  bye"
    assert result.chars_fed == len("hi <channel:Mystery>m</channel:mystery> bye")


def test_an_unterminated_instance_is_flagged_in_the_results(render: RenderRun) -> None:
    _, result = render(SPECS, ["<channel:answer>cut"])
    assert result.channel("answer").instances[0].unterminated


def test_timing_is_read_from_the_clock_relative_to_the_start(render: RenderRun, clock: Callable[[], float]) -> None:
    # the fake clock advances one second per reading: start=1, open=2, close=3, end=4
    _, result = render(SPECS, ["<channel:answer>x</channel:answer>"], clock=clock)
    instance = result.channel("answer").instances[0]
    assert (instance.opened_at_s, instance.closed_at_s, instance.duration_s) == (1.0, 2.0, 1.0)
    assert result.channel("answer").first_opened_at_s == 1.0
    assert result.channel("answer").last_closed_at_s == 2.0
    assert result.duration_s == 3.0


def test_asking_for_an_unknown_channel_names_the_known_ones(render: RenderRun) -> None:
    _, result = render(SPECS, [""])
    with pytest.raises(KeyError, match="channels: action, answer, followups, thinking"):
        result.channel("nope")


def test_results_are_only_available_after_finish() -> None:
    renderer = ChannelRenderer(SPECS)
    with pytest.raises(RuntimeError, match="before finish"):
        renderer.result()
    renderer.finish()
    assert renderer.finish() == []
    assert renderer.finished
