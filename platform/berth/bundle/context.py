"""``BundleContext``: everything bundle code gets from the host, bound to one scope and generation."""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from berth.config.secrets import Secret
from berth.config.settings import PlatformSettings


class BundleLogger(logging.LoggerAdapter[logging.Logger]):
    """A logger that adds ``tenant``, ``project``, ``bundle`` and ``generation`` to every record."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        """Merge the bound fields into the record's ``extra``."""
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return msg, kwargs


@dataclass(frozen=True)
class BundleContext:
    """What a bundle hook receives.

    ``tenant``/``project`` are None while the host validates a generation outside any scope (then
    ``props`` are the bundle-wide props). ``secret("name")`` reads a platform secret and
    ``secret("b:name")`` this bundle's own secret. ``root`` is the folder of the bundle's package, for
    resolving its relative paths.
    """

    bundle_id: str
    generation: int
    tenant: str | None
    project: str | None
    props: BaseModel
    settings: PlatformSettings
    secret: Callable[[str], Secret] = field(repr=False)
    root: Path
    logger: logging.LoggerAdapter[logging.Logger] = field(repr=False)
    storage: Any = field(default=None, repr=False)

    def path(self, relative: str | Path) -> Path:
        """``relative`` resolved against the bundle's folder (absolute paths are returned as they are)."""
        candidate = Path(relative)
        return candidate if candidate.is_absolute() else (self.root / candidate).resolve()


def bundle_logger(bundle_id: str, generation: int, tenant: str | None, project: str | None) -> BundleLogger:
    """A :class:`BundleLogger` on ``berth.bundles.<id>``."""
    return BundleLogger(
        logging.getLogger(f"berth.bundles.{bundle_id}"),
        {"bundle": bundle_id, "generation": generation, "tenant": tenant, "project": project},
    )
