"""The peer of ``bench/api_load.py``: a FastAPI + SSE service around a LangGraph agent, in its documented durable
single-process setup (``AsyncSqliteSaver``). A module the bench starts as a server process, not a bench script.

    python bench/_langgraph_peer.py PORT DATABASE {create_agent|create_react_agent}

``POST /threads/{thread_id}/turns`` with ``{"message": …}`` runs one turn of the agent on that thread and streams
it as Server-Sent Events (``sse-starlette``, as LangGraph's own server does): each token of the model's answer as
``event: channel.delta`` with ``{"marker": "answer", "text": …}`` (the frames the load generator reads for Berth),
the tool's result as ``event: tool.result``, and ``event: turn.done`` at the end.

The model is instant and scripted like Berth's in the same run: its first call in a turn asks for the tool
(``greet``: the ``hello`` bundle's ``hello.greet``, the same plain ``def``, so both frameworks run it on a worker
thread, as each runs a synchronous tool), its second streams the same answer text in chunks of the same size. It
decides from the messages (a tool result last → answer), so concurrent turns never take each other's responses.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from pydantic import BaseModel
from sse_starlette import EventSourceResponse

ANSWER_TEXT = "Berth answers with a streamed reply of moderate length. " * 6
CHUNK = 24
"""Characters per streamed answer chunk: the Berth arm's scripted model streams its text the same way."""


class ScriptedToolModel(BaseChatModel):
    """Instant: a ``greet`` tool call first, then the answer streamed in chunks (langchain-core's fakes lack
    ``bind_tools`` and tool-call streaming)."""

    @property
    def _llm_type(self) -> str:
        return "scripted-tool-turn"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedToolModel:
        return self

    def _chunks(self, messages: list[BaseMessage]) -> Iterator[AIMessageChunk]:
        if messages and isinstance(messages[-1], ToolMessage):
            for start in range(0, len(ANSWER_TEXT), CHUNK):
                yield AIMessageChunk(content=ANSWER_TEXT[start : start + CHUNK])
        else:
            call = {"name": "greet", "args": json.dumps({"name": "Ann"}), "id": f"call_{len(messages)}", "index": 0}
            yield AIMessageChunk(content="", tool_call_chunks=[call])  # type: ignore[list-item]

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        merged: AIMessageChunk | None = None
        for chunk in self._chunks(messages):
            merged = chunk if merged is None else merged + chunk
        assert merged is not None
        message = AIMessage(content=merged.content, tool_calls=merged.tool_calls)
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages):
            generation = ChatGenerationChunk(message=chunk)
            if run_manager is not None and isinstance(chunk.content, str) and chunk.content:
                await run_manager.on_llm_new_token(chunk.content, chunk=generation)
            yield generation


@tool
def greet(name: str, language: str = "en") -> str:
    """Greet someone by name (``language``: ISO 639-1 code of the greeting's language: en, fr, de, es)."""
    words = {"en": "Hello", "fr": "Bonjour", "de": "Hallo", "es": "Hola"}
    return f"{words.get(language, words['en'])}, {name}!"


def build_agent(builder: str, checkpointer: AsyncSqliteSaver) -> Any:
    """The agent under test: ``create_agent`` (LangChain 1.x) or ``create_react_agent`` (langgraph.prebuilt)."""
    instructions = "Greet with greet, then answer."
    if builder == "create_agent":
        from langchain.agents import create_agent

        return create_agent(ScriptedToolModel(), [greet], system_prompt=instructions, checkpointer=checkpointer)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

        return create_react_agent(ScriptedToolModel(), [greet], prompt=instructions, checkpointer=checkpointer)


class TurnRequest(BaseModel):
    message: str


def create_app(database: str, builder: str) -> FastAPI:
    """The service: one agent, its SQLite checkpointer opened for the app's lifetime."""
    agent: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with AsyncSqliteSaver.from_conn_string(database) as saver:
            agent["graph"] = build_agent(builder, saver)
            yield

    app = FastAPI(lifespan=lifespan)

    @app.get("/ready")
    async def ready() -> dict[str, bool]:
        return {"ready": "graph" in agent}

    @app.post("/threads/{thread_id}/turns")
    async def turn(thread_id: str, request: TurnRequest) -> EventSourceResponse:
        config = {"configurable": {"thread_id": thread_id}}

        async def events() -> AsyncIterator[dict[str, str]]:
            async for message, _meta in agent["graph"].astream(
                {"messages": [("user", request.message)]}, config, stream_mode="messages"
            ):
                if isinstance(message, AIMessageChunk) and message.content:
                    yield {"event": "channel.delta", "data": json.dumps({"marker": "answer", "text": message.content})}
                elif isinstance(message, ToolMessage):
                    yield {"event": "tool.result", "data": json.dumps({"tool": message.name, "ok": True})}
            yield {"event": "turn.done", "data": "{}"}

        return EventSourceResponse(events(), sep="\n")

    return app


def main() -> None:
    """``PORT DATABASE BUILDER``."""
    port, database, builder = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    uvicorn.run(create_app(database, builder), host="127.0.0.1", port=port, log_level="error")


if __name__ == "__main__":
    main()
