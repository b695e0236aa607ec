"""``berth exec build-image``: the exec image, built from ``exec/Dockerfile`` by the engine's classic builder.

The build context is the folder that holds ``exec/Dockerfile`` and the ``berth_exec`` package (a checkout's
``exec/``, or any folder given with ``--context``). The classic builder runs offline against local images, so
``FROM`` may name an image that was imported, never pulled (``berth-exec-base:offline``); BuildKit is not needed.
Progress is each build step's output, streamed as the engine reports it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import berth_exec
from berth_docker.engine import EngineError

DEFAULT_BASE = "berth-exec-base:offline"


@dataclass(frozen=True, slots=True)
class BuiltImage:
    """The image a build made."""

    tag: str
    image_id: str
    size_bytes: int


def default_context() -> Path:
    """The folder of ``exec/Dockerfile`` beside the installed ``berth_exec`` package (checkout or editable)."""
    return Path(berth_exec.__file__).resolve().parent.parent


def check_context(context: Path) -> None:
    """Raise :class:`EngineError` unless ``context`` holds a ``Dockerfile`` and the ``berth_exec`` package."""
    missing = [name for name in ("Dockerfile", "berth_exec/runner.py") if not (context / name).is_file()]
    if missing:
        raise EngineError(
            f"{context} is not an exec image context (missing {', '.join(missing)}): pass --context with the "
            "folder that holds exec/Dockerfile and berth_exec/"
        )


def build_exec_image(client: Any, *, tag: str, base: str, context: Path, progress: Callable[[str], None]) -> BuiltImage:
    """Build ``context``'s Dockerfile as ``tag`` on ``base``, reporting each line of output to ``progress``."""
    from docker.errors import APIError, DockerException

    check_context(context)
    try:
        client.images.get(base)
    except DockerException:
        raise EngineError(
            f"the base image '{base}' is not on this engine: import one (see exec/Dockerfile) or pass --base"
        ) from None
    try:
        stream: Iterator[dict[str, Any]] = client.api.build(
            path=str(context), tag=tag, buildargs={"BASE": base}, rm=True, forcerm=True, decode=True, pull=False
        )
        for chunk in stream:
            if "error" in chunk:
                raise EngineError(f"the build of {tag} failed: {chunk['error'].strip()}")
            line = str(chunk.get("stream") or chunk.get("status") or "").rstrip()
            if line:
                progress(line)
        image = client.images.get(tag)
    except (APIError, DockerException) as error:
        raise EngineError(f"the build of {tag} failed: {error}") from None
    return BuiltImage(tag, image.id, int(image.attrs.get("Size", 0)))
