"""The model's output protocol (SPEC §4.2): tagged channels, the action JSON, and protocol notices.

The runtime does not depend on provider-native tool calling. Each response carries ``thinking``, one
``action`` (``call_tool | complete | exit``), optionally ``code`` for the exec tool, and on completion
``answer`` and ``followups``. :func:`interpret_response` turns a parsed stream into a
:class:`Decision`; every problem becomes a :class:`ProtocolNotice` with a stable code, which the model
sees next round — a protocol error never crashes a turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal, Self, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, model_validator

from berth.streaming import ChannelSpec, StreamResult

NoticeCode: TypeAlias = Literal[
    "no_action",
    "action_invalid",
    "unknown_tool",
    "tool_inactive",
    "tool_not_allowed",
    "tool_params_invalid",
    "tool_failed",
    "tool_timeout",
    "text_outside_channels",
    "unknown_channel",
    "multi_action_refused",
    "answer_missing",
    "stream_unterminated",
    "iteration_limit",
    "budget_exhausted",
    "model_error",
    "compaction_failed",
]


class ToolCall(BaseModel):
    """The ``tool_call`` of a ``call_tool`` action."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_id: str = Field(min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)


class Action(BaseModel):
    """The JSON of the ``action`` channel."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    action: Literal["call_tool", "complete", "exit"]
    notes: str = ""
    tool_call: ToolCall | None = None

    @model_validator(mode="after")
    def _call_has_a_tool(self) -> Self:
        if self.action == "call_tool" and self.tool_call is None:
            raise ValueError("a call_tool action needs a tool_call {tool_id, params}")
        if self.action != "call_tool" and self.tool_call is not None:
            raise ValueError(f"a {self.action} action has no tool_call")
        return self


class Followups(BaseModel):
    """The JSON of the ``followups`` channel."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    followups: list[str] = Field(default_factory=list, max_length=10)


DECISION_CHANNELS: Final[tuple[ChannelSpec, ...]] = (
    ChannelSpec(name="thinking", format="markdown", emit_marker="thinking"),
    ChannelSpec(name="action", format="json", json_model=Action),
    ChannelSpec(name="code", format="code", emit_marker="code"),
    ChannelSpec(name="answer", format="markdown", replace_citations=True, emit_marker="answer"),
    ChannelSpec(name="followups", format="json", json_model=Followups),
)
"""The channels of a decision; ``thinking``, ``code`` and ``answer`` stream to clients."""

PROTOCOL_TEXT: Final = """\
# How you answer

Reply with tagged channels only; nothing outside them.

To act, write:
<channel:thinking>your reasoning (shown to the user as reasoning)</channel:thinking>
<channel:action>{"action": "call_tool", "notes": "why, and plan progress lines such as ✓ [1]", \
"tool_call": {"tool_id": "<tool id>", "params": {...}}}</channel:action>
(and <channel:code>…</channel:code> only when the tool runs code)

To finish, write:
<channel:thinking>…</channel:thinking>
<channel:action>{"action": "complete", "notes": "…"}</channel:action>
<channel:answer>the answer in markdown; cite sources as [[S:1]], [[S:1,3]] or [[S:2-4]]</channel:answer>
<channel:followups>{"followups": ["a short next question", "…"]}</channel:followups>

To show the user an image of this conversation (an attachment, or a file a tool or program wrote), put
![caption](fi:<its path>) in the answer: images are shown, not cited.
Use {"action": "exit"} only when you cannot continue at all. One action per response. Tool results,
notices (problems with your last response) and the SOURCES POOL appear below; ANNOUNCE at the very end
shows the iteration, your budget, the time, open plans and notices. Read earlier content again with
react.read(path) when it is hidden or shown as a card. The user may send a follow-up or a steer while
you work: they arrive as user.followup / user.steer blocks and under [LIVE EVENTS] in ANNOUNCE; take
them into account at your next decision (a steer overrides the earlier request where they conflict).
"""


@dataclass(frozen=True)
class ProtocolNotice:
    """A problem the model should see next round."""

    code: NoticeCode
    message: str


@dataclass(frozen=True)
class Decision:
    """What one response asked for, and what was wrong with it."""

    actions: tuple[Action, ...] = ()
    thinking: str = ""
    code: str | None = None
    answer: str | None = None
    followups: tuple[str, ...] = ()
    notices: tuple[ProtocolNotice, ...] = field(default_factory=tuple)

    @property
    def action(self) -> Action | None:
        """The first valid action, if any."""
        return self.actions[0] if self.actions else None


def interpret_response(result: StreamResult, *, max_actions: int = 1) -> Decision:
    """Read a parsed response: validated actions (up to ``max_actions``), thinking, code, answer, notices."""
    notices: list[ProtocolNotice] = []
    if result.outside_text.strip():
        shown = result.outside_text.strip()[:200]
        notices.append(ProtocolNotice("text_outside_channels", f"text outside any channel was ignored: {shown!r}"))
    for name in result.undeclared_channels:
        notices.append(
            ProtocolNotice("unknown_channel", f"channel '{name}' is not part of the protocol; use thinking/action/…")
        )
    action_channel = result.channel("action")
    actions: list[Action] = []
    for instance in action_channel.instances:
        if instance.unterminated:
            notices.append(ProtocolNotice("stream_unterminated", "the action channel was not closed"))
        if instance.parsed is None:
            problem = instance.problem.message if instance.problem else "not valid JSON"
            notices.append(ProtocolNotice("action_invalid", f"the action is invalid: {problem}"))
            continue
        actions.append(instance.parsed)
    if not action_channel.instances:
        notices.append(ProtocolNotice("no_action", "the response had no <channel:action>; every response needs one"))
    if len(actions) > max_actions:
        notices.append(
            ProtocolNotice(
                "multi_action_refused",
                f"{len(actions)} actions in one response; only the first {max_actions} ran",
            )
        )
        actions = actions[:max_actions]
    answer_channel = result.channel("answer")
    answer = answer_channel.raw_text if answer_channel.instances else None
    followups: tuple[str, ...] = ()
    for instance in result.channel("followups").instances:
        if isinstance(instance.parsed, Followups):
            followups = tuple(instance.parsed.followups)
    code_channel = result.channel("code")
    return Decision(
        actions=tuple(actions),
        thinking=result.channel("thinking").raw_text,
        code=code_channel.raw_text if code_channel.instances else None,
        answer=answer,
        followups=followups,
        notices=tuple(notices),
    )
