"""Materialize a git repository at a ref, as a plain read-only folder to index.

:func:`checkout` resolves a ref (branch, tag, full or abbreviated commit sha, ``HEAD`` for the default branch) to
a commit and returns a :class:`Checkout` whose ``root`` holds the repository's files at that commit, without a
``.git`` folder. Everything lives under one cache folder, shared by every process of the host::

    <cache_dir>/repos/<key>.git            a bare mirror of the repository (refs/heads/*, refs/tags/*)
    <cache_dir>/repos/<key>.lock           flock: held while the mirror is created or fetched and the ref resolved
    <cache_dir>/trees/<key>/<commit>/      the working tree of one commit, created once and never changed
    <cache_dir>/trees/<key>/<commit>.done  marker, written after the tree is complete
    <cache_dir>/trees/<key>/<commit>.lock  flock: held while the tree is exported

``<key>`` is :func:`cache_key` of the URL. The tree is exported into a temporary sibling folder and renamed into
place, then the marker is written: a tree without its marker is a leftover of a crash, removed before the next
export. A garbage collector removes the marker first, under the commit's lock, then the tree.

Git runs as a subprocess with an argument list (never a shell), ``GIT_TERMINAL_PROMPT=0``, no controlling terminal,
and a deadline for the whole call. Credentials in a URL (``https://user:token@host/…``) reach git and nothing else:
messages, progress lines and cache keys use :func:`redact_url`, and the mirror stores no URL (each fetch names it).

Limits: only what ``refs/heads/*`` and ``refs/tags/*`` reach can be checked out (a commit of a pull-request ref
cannot); submodules stay empty folders; git LFS files stay pointer files (no filters run); symbolic links that
point outside the tree are dropped.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from berth.config.environment import process_environ

__all__ = ["Checkout", "GitError", "cache_key", "cached_commits", "checkout", "redact_url"]

DONE_SUFFIX: Final = ".done"
"""The suffix of a complete tree's marker file, a sibling of the tree: ``<commit>.done``."""

_FULL_SHA: Final = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_USERINFO: Final = re.compile(r"\b([a-z][a-z0-9+.-]*://)[^/?#\s]*@", re.IGNORECASE)
_REMOTE_HEAD: Final = "refs/berth/HEAD"
"""Where the mirror keeps the remote's ``HEAD`` (its default branch) when ``HEAD`` is asked for."""

_REPOSITORY_VARIABLES: Final = frozenset(
    {
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_COMMON_DIR",
        "GIT_DIR",
        "GIT_GRAFT_FILE",
        "GIT_IMPLICIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_INTERNAL_SUPER_PREFIX",
        "GIT_NO_REPLACE_OBJECTS",
        "GIT_OBJECT_DIRECTORY",
        "GIT_PREFIX",
        "GIT_REPLACE_REF_BASE",
        "GIT_SHALLOW_FILE",
        "GIT_WORK_TREE",
    }
)
"""Variables that point git at another repository (``git rev-parse --local-env-vars``): set when the host runs
inside a git hook, they would redirect every command here."""

_MAX_DETAIL_CHARS: Final = 300
_LOCK_POLL_MAX_S: Final = 0.1


class GitError(Exception):
    """A repository could not be materialized; ``reason`` names the URL (without credentials), the ref and what
    failed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, repr=False)
class Checkout:
    """A read-only working tree of the repository at ``url`` at ``commit`` (what ``ref`` resolved to).

    ``url`` is the URL as given (it may carry credentials: show it with :func:`redact_url`, as ``repr`` does). The
    files under ``root`` are shared by every caller and process: never write there.
    """

    url: str
    ref: str
    commit: str
    root: Path

    def __repr__(self) -> str:
        """The fields, with the URL's credentials removed."""
        return f"Checkout(url={redact_url(self.url)!r}, ref={self.ref!r}, commit={self.commit!r}, root={self.root!r})"


def redact_url(url: str) -> str:
    """``url`` without the userinfo of any ``scheme://user:password@host`` in it (``https://host/…``).

    Works on any text (a git message quoting the URL); a path or an scp-like ``git@host:repo`` is unchanged.
    """
    return _USERINFO.sub(r"\1", url)


def cache_key(url: str) -> str:
    """The cache folder name of the repository at ``url``: 16 hex digits of the SHA-256 of the URL without its
    credentials (a rotated token keeps the cache)."""
    return hashlib.sha256(redact_url(url).encode("utf-8")).hexdigest()[:16]


def cached_commits(url: str, cache_dir: Path) -> list[str]:
    """The commits of ``url`` whose trees are complete in ``cache_dir`` (sorted), for status and garbage
    collection."""
    trees = cache_dir / "trees" / cache_key(url)
    if not trees.is_dir():
        return []
    commits = (marker.name.removesuffix(DONE_SUFFIX) for marker in trees.glob(f"*{DONE_SUFFIX}"))
    return sorted(commit for commit in commits if _FULL_SHA.fullmatch(commit) and (trees / commit).is_dir())


def checkout(
    url: str,
    ref: str,
    cache_dir: Path,
    *,
    timeout_s: float = 300.0,
    progress: Callable[[str], None] | None = None,
) -> Checkout:
    """Resolve ``ref`` in the repository at ``url`` to a commit and return that commit's working tree.

    ``ref`` is a branch, a tag, a full or abbreviated commit sha, or ``HEAD`` (the default branch). The mirror is
    fetched at most once per call, and not at all when ``ref`` is a full sha the mirror already has. The tree of
    a commit is exported once across processes and reused afterwards. ``timeout_s`` bounds the whole call,
    waiting for another process's lock included. ``progress`` receives short lines ("fetching <url>", "checking
    out <commit>") for the caller to log.

    Raises :class:`GitError` when the repository cannot be read, the ref does not exist, git is missing or the
    call times out; nothing half-written is left at a tree's path then.
    """
    call = _Call(url=url, ref=ref, timeout_s=timeout_s, deadline=time.monotonic() + timeout_s, progress=progress)
    _check_ref(call)
    key = cache_key(url)
    mirror = cache_dir / "repos" / f"{key}.git"
    commit = _resolve(call, mirror)
    root = _materialize(call, mirror, cache_dir / "trees" / key, commit)
    return Checkout(url=url, ref=ref, commit=commit, root=root)


@dataclass(frozen=True)
class _Call:
    """One :func:`checkout` call: what it asks for, its deadline and where its progress goes."""

    url: str
    ref: str
    timeout_s: float
    deadline: float
    progress: Callable[[str], None] | None

    def fail(self, what: str) -> GitError:
        """A :class:`GitError` for this call's repository."""
        return GitError(f"git repository {redact_url(self.url)}: {what}")

    def remaining(self, what: str) -> float:
        """The seconds left before the deadline; raises :class:`GitError` once it has passed."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self.fail(f"{what} timed out after {self.timeout_s:g}s")
        return left

    def say(self, line: str) -> None:
        """Report a progress line, if anyone listens."""
        if self.progress is not None:
            self.progress(line)


def _check_ref(call: _Call) -> None:
    """Refuse a ref git would read as an option, or one that cannot name anything."""
    ref = call.ref
    if not ref or ref.startswith("-") or any(ch.isspace() or not ch.isprintable() for ch in ref):
        raise call.fail(f"invalid ref {ref!r}")


# --- resolving the ref in the mirror ------------------------------------------------------------------------------


def _resolve(call: _Call, mirror: Path) -> str:
    """The commit ``call.ref`` names, fetching the mirror first unless the ref is a full sha it already has."""
    with _locked(mirror.with_suffix(".lock"), call):
        _ensure_mirror(call, mirror)
        ref = call.ref.lower()
        if _FULL_SHA.fullmatch(ref) and _has_commit(call, mirror, ref):
            return ref
        _fetch(call, mirror)
        commit = _rev_parse(call, mirror, _REMOTE_HEAD if call.ref == "HEAD" else call.ref)
    if commit is None:
        raise call.fail(f"ref {call.ref!r} not found")
    return commit


def _ensure_mirror(call: _Call, mirror: Path) -> None:
    """Create the bare mirror unless it exists (in a temporary sibling, renamed into place). Under the mirror's
    lock."""
    if (mirror / "HEAD").is_file() and (mirror / "objects").is_dir():
        return
    shutil.rmtree(mirror, ignore_errors=True)  # a crash's leftover
    staging = Path(tempfile.mkdtemp(dir=mirror.parent, prefix=f".{mirror.name}.tmp-"))
    try:
        _git_checked(call, ["init", "--quiet", "--bare", str(staging)], "creating the mirror")
        staging.rename(mirror)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _has_commit(call: _Call, mirror: Path, sha: str) -> bool:
    """Whether the mirror holds the commit ``sha``."""
    done = _git(call, [_git_dir(mirror), "cat-file", "-e", f"{sha}^{{commit}}"], "reading the mirror")
    return done.returncode == 0


def _fetch(call: _Call, mirror: Path) -> None:
    """Bring the mirror's branches and tags (and the remote's ``HEAD`` when asked for) up to date."""
    call.say(f"fetching {redact_url(call.url)}")
    refspecs = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"]
    if call.ref == "HEAD":
        refspecs.append(f"+HEAD:{_REMOTE_HEAD}")
    args = [
        *("-c", "gc.autoDetach=false"),  # an automatic gc finishes before the mirror's lock is released
        _git_dir(mirror),
        *("fetch", "--quiet", "--prune", "--no-tags", "--no-write-fetch-head", "--no-recurse-submodules"),
        *("--", call.url, *refspecs),
    ]
    done = _git(call, args, f"fetching ref {call.ref!r}")
    if done.returncode == 0:
        return
    if call.ref == "HEAD" and "couldn't find remote ref HEAD" in done.stderr:
        raise call.fail("ref 'HEAD' not found (the repository has no default branch)")
    raise call.fail(f"fetching ref {call.ref!r} failed: {_detail(done.stderr)}")


def _rev_parse(call: _Call, mirror: Path, name: str) -> str | None:
    """The commit ``name`` resolves to in the mirror, or None."""
    args = [_git_dir(mirror), "rev-parse", "--verify", "--quiet", "--end-of-options", f"{name}^{{commit}}"]
    done = _git(call, args, f"resolving ref {call.ref!r}")
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and _FULL_SHA.fullmatch(commit) else None


# --- exporting the tree of a commit -------------------------------------------------------------------------------


def _materialize(call: _Call, mirror: Path, trees: Path, commit: str) -> Path:
    """The complete tree of ``commit`` under ``trees``, exported by whichever process gets its lock first."""
    root, marker = trees / commit, trees / f"{commit}{DONE_SUFFIX}"
    if marker.is_file() and root.is_dir():
        return root
    with _locked(trees / f"{commit}.lock", call):
        if marker.is_file() and root.is_dir():
            return root
        _remove_leftovers(trees, commit)
        call.say(f"checking out {commit[:12]}")
        # Without the mirror's lock: git reads objects safely while another process fetches into the mirror.
        _export(call, mirror, trees, commit).rename(root)
        marker.write_text(f"{commit}\n", encoding="utf-8")
    return root


def _remove_leftovers(trees: Path, commit: str) -> None:
    """Remove what a crashed export of ``commit`` left: a tree without its marker, staging folders, an index.
    Under the commit's lock."""
    shutil.rmtree(trees / commit, ignore_errors=True)
    for leftover in trees.glob(f".{commit}.tmp-*"):
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)


def _export(call: _Call, mirror: Path, trees: Path, commit: str) -> Path:
    """Write the files of ``commit`` into a new staging folder under ``trees`` and return it; on failure nothing
    is left behind."""
    staging = Path(tempfile.mkdtemp(dir=trees, prefix=f".{commit}.tmp-"))
    index = staging.with_name(f"{staging.name}.index")  # outside the tree, so it is not part of it
    what = f"checking out ref {call.ref!r} (commit {commit[:12]})"
    # Only the mirror's own configuration: no user or system filters (git LFS), no line-ending conversion.
    isolated = {"GIT_INDEX_FILE": str(index), "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    work = [_git_dir(mirror), f"--work-tree={staging}"]
    try:
        _git_checked(call, [*work, "read-tree", commit], what, isolated)
        _git_checked(call, [*work, "checkout-index", "--all", "--force", "--quiet"], what, isolated)
        _seal(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        index.unlink(missing_ok=True)
    return staging


def _seal(root: Path) -> None:
    """Drop symbolic links that lead outside ``root`` (an indexer must not read the host's files through them)
    and take the write permission off every file."""
    inside = os.path.realpath(root)
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = os.path.join(folder, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                if os.path.commonpath([inside, os.path.realpath(path)]) != inside:
                    os.unlink(path)
            elif stat.S_ISREG(mode):
                os.chmod(path, stat.S_IMODE(mode) & ~0o222)


# --- running git and locking --------------------------------------------------------------------------------------


def _git_dir(mirror: Path) -> str:
    """The ``--git-dir`` option naming the mirror."""
    return f"--git-dir={mirror}"


def _git_checked(call: _Call, args: list[str], what: str, env: Mapping[str, str] | None = None) -> None:
    """Run git; a non-zero exit raises :class:`GitError` with git's message."""
    done = _git(call, args, what, env)
    if done.returncode != 0:
        raise call.fail(f"{what} failed: {_detail(done.stderr)}")


def _git(
    call: _Call, args: list[str], what: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``git *args`` without a terminal until the call's deadline, and return what it did. A timeout kills
    git's whole process group and raises :class:`GitError`."""
    timeout = call.remaining(what)
    argv = [_git_executable(call), *args]
    with subprocess.Popen(  # noqa: S603 - an argument list, the program is git
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        env=_environment(env),
        start_new_session=True,  # no controlling terminal (ssh cannot prompt), and a process group to kill
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise call.fail(f"{what} timed out after {call.timeout_s:g}s") from None
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def _git_executable(call: _Call) -> str:
    """The path of the git command-line tool."""
    found = shutil.which("git")
    if found is None:
        raise call.fail("the git command-line tool is not installed")
    return found


def _environment(extra: Mapping[str, str] | None) -> dict[str, str]:
    """The process environment for git: never prompting, never pointed at another repository."""
    env = {name: value for name, value in process_environ().items() if name not in _REPOSITORY_VARIABLES}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["GCM_INTERACTIVE"] = "never"  # Git Credential Manager
    env.update(extra or {})
    return env


def _kill_group(process: subprocess.Popen[str]) -> None:
    """Kill git and its helpers (remote helpers, ssh, upload-pack of a local repository)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()


def _detail(stderr: str) -> str:
    """The gist of git's error output, credentials removed: its ``fatal:``/``error:`` lines, else its last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("fatal:", "error:"))]
    text = "; ".join(errors or lines[-1:]) or "no message"
    text = redact_url(text)
    return text if len(text) <= _MAX_DETAIL_CHARS else f"{text[: _MAX_DETAIL_CHARS - 1]}…"


@contextmanager
def _locked(path: Path, call: _Call) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` (created if missing) until the block ends, waiting at most until the
    deadline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _acquire(fd, call)
        yield
    finally:
        os.close(fd)  # releases the lock


def _acquire(fd: int, call: _Call) -> None:
    """Take the flock, polling so the wait ends at the call's deadline (a blocking flock cannot time out)."""
    delay = 0.002
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            left = call.remaining("waiting for another process using the cache")
            time.sleep(min(delay, left))
            delay = min(delay * 2, _LOCK_POLL_MAX_S)
