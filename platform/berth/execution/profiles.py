"""Exec profiles (``platform.exec.profiles`` of ``assembly.yaml``) turned into a backend and limits."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from berth.config.models.assembly import ExecConfig
from berth.config.models.bundles import BundleExec
from berth.execution.limits import ExecLimits
from berth.execution.payload import SupervisorScope, supervisor_scope_of
from berth.execution.runs import ExecService
from berth.execution.sandbox import ExecBackend, runs_own_supervisor
from berth.execution.uids import UidLease

if TYPE_CHECKING:
    from berth.config import Configuration

logger = logging.getLogger(__name__)

ExecBackendFactory = Callable[[Mapping[str, Any]], ExecBackend]
"""What a plugin's ``berth_exec_backends()`` maps each backend name to: profile options → backend."""


class ExecProfileError(Exception):
    """A profile that cannot be used here: unknown, not allowed to the bundle, or its backend is not installed."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class Execution:
    """The host's isolated execution: the run service and the installed backends, by name."""

    backends: Mapping[str, ExecBackendFactory]
    service: ExecService = field(default_factory=ExecService)
    bundle_exec: Callable[[str], BundleExec | None] = field(default=lambda _bundle_id: None, repr=False)
    """The operator's choice of profiles per bundle (``bundles.<id>.exec`` of ``bundles.yaml``)."""
    configuration: Callable[[], Configuration | None] = field(default=lambda: None, repr=False)
    """The descriptors in force, for backends that run the supervisor themselves (docker combined, fargate)."""
    _built: dict[str, ExecBackend] = field(default_factory=dict, repr=False)

    def configure(self, config: ExecConfig) -> None:
        """Apply the platform's ``exec`` settings read at start: the runs root and the uids' lock folder."""
        if config.runs_root is not None:
            self.service.root = Path(config.runs_root)
        self.service.uids = UidLease(Path(config.uid_lock_dir))

    def options_for(self, bundle_id: str, author_options: Mapping[str, Any]) -> dict[str, Any]:
        """The bundle's exec options: ``bundles.yaml``'s ``exec`` (the operator's) over its ``ToolPack`` options."""
        options = dict(author_options)
        chosen = self.bundle_exec(bundle_id)
        if chosen is not None:
            if chosen.profile:
                options["profile"] = chosen.profile
            if chosen.profiles:
                options["profiles"] = list(chosen.profiles)
        return options

    def supervisor_scope(self, backend: ExecBackend, tenant: str, project: str) -> SupervisorScope | None:
        """What ``backend`` needs to serve a bundle's tools itself in ``tenant/project`` (None: the host serves
        them, or no descriptors are known)."""
        config = self.configuration()
        if config is None or not runs_own_supervisor(backend):
            return None
        return supervisor_scope_of(config, tenant, project)

    def backend(self, config: ExecConfig, profile: str) -> tuple[ExecBackend, ExecLimits]:
        """The backend and limits of ``profile`` in ``config`` (one backend object per distinct profile)."""
        if profile not in config.profiles:
            known = ", ".join(sorted(config.profiles)) or "none"
            raise ExecProfileError(
                "exec_profile_unknown", f"exec profile '{profile}' is not configured (known: {known})"
            )
        options = config.profiles[profile].model_dump()
        name = options["backend"]
        factory = self.backends.get(name)
        if factory is None:
            installed = ", ".join(sorted(self.backends)) or "none"
            raise ExecProfileError(
                "exec_backend_missing",
                f"exec backend '{name}' of profile '{profile}' is not installed (installed: {installed})",
            )
        key = f"{profile}:{sorted(options.items())!r}"
        if key not in self._built:
            self._built[key] = factory(options)
        return self._built[key], limits_of(options)


def unisolated_profiles(config: ExecConfig) -> list[str]:
    """The profiles that run programs without a sandbox (``backend: local`` with ``isolation: none``)."""
    return sorted(
        name
        for name, profile in config.profiles.items()
        if profile.backend == "local" and getattr(profile, "isolation", "auto") == "none"
    )


def warn_unisolated(scopes: Iterable[tuple[str, ExecConfig]]) -> list[str]:
    """Log one WARNING per profile that runs model-written code without isolation (in any scope); return them."""
    found: dict[str, str] = {}
    for where, config in scopes:
        for name in unisolated_profiles(config):
            found.setdefault(name, where)
    for name, where in found.items():
        logger.warning(
            "exec profile '%s' (%s) has isolation: none: exec.python runs model-written code as a plain "
            "subprocess of this host, with no sandbox",
            name,
            where,
        )
    return sorted(found)


def limits_of(options: Mapping[str, Any]) -> ExecLimits:
    """The limits a profile's options set (defaults for the ones it leaves out)."""
    defaults = ExecLimits()
    return ExecLimits(
        timeout_s=float(options.get("timeout_s", defaults.timeout_s)),
        memory_mb=int(options.get("memory_mb", defaults.memory_mb)),
        cpu_s=int(options.get("cpu_s", defaults.cpu_s)),
        processes=int(options.get("pids", defaults.processes)),
        file_size_mb=int(options.get("file_size_mb", defaults.file_size_mb)),
        disk_mb=int(options.get("disk_mb", defaults.disk_mb)),
    )
