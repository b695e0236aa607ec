"""Streaming problems and errors: each carries a stable ``code`` and says what to do next."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StreamProblem(BaseModel):
    """One problem found while streaming, kept as a value in the results.

    ``code`` is stable (``json_invalid``, ``json_schema_mismatch``, ``policy_stop``, …); ``message`` says
    what was wrong and where.
    """

    model_config = ConfigDict(frozen=True)

    code: str
    message: str


class ChannelSetupError(Exception):
    """A channel stream was set up wrongly: a duplicate channel, a subscriber for an unknown channel.

    Raised when the stream is built or a subscriber is registered, never while text is streaming.
    ``code`` is stable (``duplicate_channel``, ``unknown_channel``).
    """

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


class StreamPolicyError(Exception):
    """Raised by a subscriber to stop the stream (a policy was violated, e.g. a forbidden import in code).

    Unlike any other exception a subscriber raises — which is logged and detaches only that
    subscriber — this one stops the whole stream: nothing more is emitted and
    :meth:`berth.streaming.ChannelStream.feed` re-raises it so the caller can cancel the model stream.
    ``code`` is a stable identifier the runtime can show the model.
    """

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(message)

    def as_problem(self) -> StreamProblem:
        """Return this error as a :class:`StreamProblem` value for the stream's results."""
        return StreamProblem(code=self.code, message=self.message)
