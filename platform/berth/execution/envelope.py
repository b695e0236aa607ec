"""The result of one isolated run, identical for every backend."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ExecArtifact:
    """A file the program left under ``out/``: its logical path once stored, its type and size."""

    path: str
    mime: str
    size: int


@dataclass(frozen=True, slots=True)
class ExecError:
    """Why a run did not succeed: a stable ``code`` (``timeout``, ``memory_limit``, ``cpu_limit``,
    ``file_size_limit``, ``process_limit``, ``nonzero_exit``, ``sandbox_failed`` …), a message, and the limit that
    ended it when one did."""

    code: str
    message: str
    limit: str | None = None


@dataclass(frozen=True, slots=True)
class ExecEnvelope:
    """``{ok, exit_code, error, report_text, artifacts, user_out_tail, runtime_err_tail, duration_s, backend}``."""

    ok: bool
    exit_code: int | None
    error: ExecError | None
    report_text: str
    artifacts: tuple[ExecArtifact, ...]
    user_out_tail: str
    runtime_err_tail: str
    duration_s: float
    backend: str
    exec_id: str = field(default="")

    def to_json(self) -> dict[str, Any]:
        """The envelope as plain JSON (what the tool returns and ``berth exec run`` prints)."""
        document = asdict(self)
        document["artifacts"] = [asdict(artifact) for artifact in self.artifacts]
        document["duration_s"] = round(self.duration_s, 3)
        return document
