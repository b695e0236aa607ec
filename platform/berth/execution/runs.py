"""One isolated run end to end: folders, program, supervisor, backend, artifacts, envelope.

The host prepares the run folder (``work/`` and ``out/`` owned by the run's executor uid, the program read-only),
starts the supervisor on the folder's socket when the bundle has tools to serve, hands the request to the
profile's backend, then collects what the program left under ``out/``: regular files only (a symlink the program
planted is skipped, never followed), at most :data:`MAX_OUTPUT_FILES` files and :data:`MAX_OUTPUT_BYTES` in all.
The folder is removed afterwards; what matters is returned.
"""

from __future__ import annotations

import asyncio
import dataclasses
import mimetypes
import os
import secrets
import stat
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final

from berth.execution.envelope import ExecArtifact, ExecEnvelope, ExecError
from berth.execution.limits import ExecLimits, limit_from_outcome
from berth.execution.payload import LaunchPayload, SupervisorScope, filter_descriptors, payload_environment
from berth.execution.quota import disk_filled, mount_run_disk, unmount_run_folder
from berth.execution.reaping import claim_run_folder, reap_stale_run_folders, remove_run_folder
from berth.execution.sandbox import (
    SANDBOX_SOCKET_DIR,
    SOCKET_NAME,
    ExecBackend,
    RunFolder,
    SandboxOutcome,
    SandboxRequest,
    executor_options,
    runs_own_supervisor,
    writes_run_folder,
)
from berth.execution.supervisor import Supervisor, ToolDispatch
from berth.execution.uids import UidLease

MAX_OUTPUT_FILES: Final = 200
MAX_OUTPUT_BYTES: Final = 256 * 1024 * 1024
PROGRAMS_FOLDER: Final = "executed_programs"


@dataclass(frozen=True, slots=True)
class OutputFile:
    """A file the program produced under ``out/``."""

    relative: str
    data: bytes
    mime: str


@dataclass(frozen=True, slots=True)
class ExecRun:
    """What one run gave: the envelope, the produced files, and the supervisor's record of tool calls."""

    envelope: ExecEnvelope
    outputs: tuple[OutputFile, ...]
    tool_calls: int


@dataclass
class ExecService:
    """Runs programs with a backend, serving them a bundle's tools through a supervisor."""

    root: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "berth-exec")
    uids: UidLease = field(default_factory=UidLease)
    """Executor uids, leased machine-wide (:mod:`berth.execution.uids`)."""
    keep_folders: bool = False
    """Leave each run's folder after its run (for debugging); once the run ended, the exec sweep may remove it."""
    _swept: bool = field(default=False, init=False, repr=False)

    async def run(
        self,
        code: str,
        *,
        backend: ExecBackend,
        limits: ExecLimits,
        bundle_id: str,
        dispatch: ToolDispatch | None = None,
        inputs: Iterable[tuple[str, bytes]] = (),
        read_only_inputs: Iterable[tuple[str, bytes]] = (),
        exec_id: str | None = None,
        store: Callable[[str, bytes], str] | None = None,
        supervisor_scope: SupervisorScope | None = None,
    ) -> ExecRun:
        """Run ``code`` and return its envelope. ``inputs`` are written under ``work/``, ``read_only_inputs`` too
        but read-only (mode 0400, their folders 0500). ``store(relative, data)`` keeps an output file and returns its
        logical path (default: ``out/<relative>``); the program itself is stored as
        ``executed_programs/<exec_id>/main.py``.

        With a backend that runs the supervisor itself, the bundle's tools are served there, from the
        descriptors of ``supervisor_scope`` (filtered per its ``scope``); ``dispatch`` is then not used, and
        without a ``supervisor_scope`` the program gets no tools."""
        exec_id = exec_id or f"ex_{uuid.uuid4().hex[:12]}"
        if not self._swept:  # the first run of a process removes what dead hosts left (the sweep does it later)
            self._swept = True
            await asyncio.to_thread(reap_stale_run_folders, self.root)
        privileged = os.geteuid() == 0
        uid = await self.uids.acquire() if privileged else os.getuid()
        disk_mb = limits.disk_mb if privileged and writes_run_folder(backend) else None
        try:
            folder, owner = await asyncio.to_thread(
                self._prepare,
                exec_id,
                code,
                list(inputs),
                uid if privileged else None,
                list(read_only_inputs),
                disk_mb,
            )
        except BaseException:
            if privileged:
                self.uids.release(uid)
            raise
        token = secrets.token_urlsafe(32)
        supervisor = None
        remote = runs_own_supervisor(backend)
        environment: dict[str, str] = {}
        if remote and supervisor_scope is not None:
            environment = remote_supervisor_environment(
                supervisor_scope, exec_id, token, bundle_id, uid, limits, executor_options(backend)
            )
        elif dispatch is not None and not remote:
            supervisor = Supervisor(folder.socket, token, uid, dispatch, call_timeout_s=limits.timeout_s)
            await supervisor.start()
        try:
            served = supervisor is not None or bool(environment)
            request = SandboxRequest(exec_id, bundle_id, folder, token, limits, uid, uid, served, environment)
            outcome = await backend.run(request)
            if disk_mb is not None and await asyncio.to_thread(disk_filled, folder):
                outcome = dataclasses.replace(outcome, disk_full=True)
            outputs = await asyncio.to_thread(collect_outputs, folder.out)
            stdout_tail = tail(folder.logs / "stdout", limits.output_tail_bytes)
            stderr_tail = tail(folder.logs / "stderr", limits.output_tail_bytes)
        finally:
            if supervisor is not None:
                await supervisor.aclose()
            if privileged:
                self.uids.release(uid)
            if not self.keep_folders:  # its quota tmpfs is unmounted first, and its memory freed
                await asyncio.to_thread(remove_run_folder, folder.root)
            os.close(owner)  # the folder's owner lock: a kept folder is the sweep's once this is released
        keep = store or (lambda relative, _data: f"out/{relative}")
        artifacts = tuple(ExecArtifact(keep(f.relative, f.data), f.mime, len(f.data)) for f in outputs)
        program_path = keep(f"{PROGRAMS_FOLDER}/{exec_id}/main.py", code.encode("utf-8"))
        envelope = build_envelope(
            exec_id, backend.name, outcome, limits, artifacts, stdout_tail, stderr_tail, program_path
        )
        return ExecRun(envelope, outputs, len(supervisor.calls) if supervisor else 0)

    def _prepare(
        self,
        exec_id: str,
        code: str,
        inputs: Iterable[tuple[str, bytes]],
        uid: int | None,
        read_only_inputs: Iterable[tuple[str, bytes]] = (),
        disk_mb: int | None = None,
    ) -> tuple[RunFolder, int]:
        """Make the run's folder, locked by this process (:func:`~berth.execution.reaping.claim_run_folder`):
        the folder and the lock's descriptor. With ``disk_mb``, ``work/`` and ``out/`` share a tmpfs of that size
        (:mod:`berth.execution.quota`), where mounting is permitted."""
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)  # noqa: S103 - executors must traverse it; names inside are random
        folder = RunFolder(self.root / exec_id)
        folder.root.mkdir(mode=0o711)
        owner = claim_run_folder(folder.root)
        try:
            self._fill(folder, code, inputs, uid, read_only_inputs, disk_mb)
        except BaseException:
            unmount_run_folder(folder.root)  # the folder itself is the sweep's
            os.close(owner)
            raise
        return folder, owner

    def _fill(
        self,
        folder: RunFolder,
        code: str,
        inputs: Iterable[tuple[str, bytes]],
        uid: int | None,
        read_only_inputs: Iterable[tuple[str, bytes]],
        disk_mb: int | None,
    ) -> None:
        for path in (folder.work, folder.out, folder.program.parent, folder.socket_dir, folder.logs):
            path.mkdir(mode=0o755)
        os.chmod(folder.logs, 0o700)
        inputs, read_only_inputs = list(inputs), list(read_only_inputs)
        if disk_mb is not None:
            mount_run_disk(folder, disk_mb, [len(data) for _, data in [*inputs, *read_only_inputs]])
        for relative, data in inputs:
            target = folder.work / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        folder.program.write_text(code, encoding="utf-8")
        os.chmod(folder.program, 0o644)
        read_only_folders = set()
        for relative, data in read_only_inputs:
            target = folder.work / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            os.chmod(target, 0o400)
            read_only_folders.add(target.parent)
        if uid is not None:
            for path in (folder.work, folder.out):
                for inner, dirs, files in os.walk(path):
                    for name in [*dirs, *files]:
                        os.chown(os.path.join(inner, name), uid, uid)
                os.chown(path, uid, uid)
                os.chmod(path, 0o700)
        for path in read_only_folders:  # nothing added, removed or renamed in them
            os.chmod(path, 0o500)


def remote_supervisor_environment(
    scope: SupervisorScope,
    exec_id: str,
    token: str,
    bundle_id: str,
    uid: int,
    limits: ExecLimits,
    options: Mapping[str, Any],
) -> dict[str, str]:
    """The launch payload and filtered descriptors for a supervisor that runs with the executor, away from here
    (``options``: :func:`~berth.execution.sandbox.executor_options` of the backend)."""
    payload = LaunchPayload(
        exec_id=exec_id,
        token=token,
        tenant=scope.tenant,
        project=scope.project,
        bundle_id=bundle_id,
        executor_uid=uid,
        socket_path=f"{SANDBOX_SOCKET_DIR}/{SOCKET_NAME}",
        call_timeout_s=limits.timeout_s,
        **options,
    )
    documents = filter_descriptors(
        scope.documents,
        tenant=scope.tenant,
        project=scope.project,
        bundle_id=bundle_id,
        scope=scope.scope,
        base_dir=scope.base_dir,
    )
    return payload_environment(payload, documents)


@contextmanager
def regular_file(path: str) -> Iterator[BinaryIO | None]:
    """``path`` open for reading if it is a regular file; None for a link (never followed), a folder, a FIFO
    or a device, or when it cannot be opened. What the program left in ``out/`` is read only this way."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        yield None
        return
    with os.fdopen(descriptor, "rb") as handle:
        yield handle if stat.S_ISREG(os.fstat(handle.fileno()).st_mode) else None


def collect_outputs(out: Path) -> tuple[OutputFile, ...]:
    """The regular files under ``out/`` (symlinks and special files skipped, never followed), within the caps."""
    found: list[OutputFile] = []
    total = 0
    for inner, dirs, files in os.walk(out, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d != PROGRAMS_FOLDER and not os.path.islink(os.path.join(inner, d)))
        for name in sorted(files):
            path = os.path.join(inner, name)
            with regular_file(path) as handle:
                if handle is None:
                    continue
                data = handle.read(MAX_OUTPUT_BYTES - total + 1)
            if total + len(data) > MAX_OUTPUT_BYTES or len(found) >= MAX_OUTPUT_FILES:
                return tuple(found)
            total += len(data)
            relative = os.path.relpath(path, out)
            found.append(OutputFile(relative, data, mimetypes.guess_type(name)[0] or "application/octet-stream"))
    return tuple(found)


def tail(path: Path, size: int) -> str:
    """The last ``size`` bytes of a file as text (missing file: empty)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            length = handle.tell()
            handle.seek(max(0, length - size))
            data = handle.read()
    except FileNotFoundError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return ("…" + text) if length > size else text


def build_envelope(
    exec_id: str,
    backend: str,
    outcome: SandboxOutcome,
    limits: ExecLimits,
    artifacts: tuple[ExecArtifact, ...],
    stdout_tail: str,
    stderr_tail: str,
    program_path: str,
) -> ExecEnvelope:
    """The envelope for a finished run: which error (if any), and a report the model can read."""
    error: ExecError | None = None
    if outcome.failure:
        error = ExecError("sandbox_failed", f"the sandbox did not start: {outcome.failure}")
    elif outcome.stopped:
        error = ExecError("sandbox_stopped", f"the sandbox was stopped before the program ended: {outcome.stopped}")
    else:
        hit = limit_from_outcome(
            limits,
            timed_out=outcome.timed_out,
            exit_code=outcome.exit_code,
            killed_by=outcome.killed_by,
            stderr_tail=stderr_tail,
            out_of_memory=outcome.out_of_memory,
            process_limit_hit=outcome.process_limit_hit,
            disk_full=outcome.disk_full,
        )
        if hit is not None:
            error = ExecError(hit.code, hit.message, hit.limit)
        elif outcome.exit_code != 0:
            error = ExecError("nonzero_exit", f"the program exited with status {outcome.exit_code}")
    status = "ok" if error is None else f"failed ({error.code}: {error.message})"
    lines = [f"exec {exec_id} on {backend} ({outcome.isolation}): {status} in {outcome.duration_s:.2f} s"]
    lines += [f"produced {a.path} ({a.mime}, {a.size} bytes)" for a in artifacts] or ["produced no files in out/"]
    lines.append(f"program kept at {program_path}")
    if error is not None and stderr_tail:
        lines.append("stderr (end):\n" + stderr_tail[-1500:])
    return ExecEnvelope(
        ok=error is None,
        exit_code=outcome.exit_code,
        error=error,
        report_text="\n".join(lines),
        artifacts=artifacts,
        user_out_tail=stdout_tail,
        runtime_err_tail=stderr_tail,
        duration_s=outcome.duration_s,
        backend=backend,
        exec_id=exec_id,
    )
