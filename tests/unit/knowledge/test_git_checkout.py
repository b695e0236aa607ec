"""Materializing a git repository at a ref (berth.knowledge.git), with real git on local repositories: refs of
every kind, one export per commit across processes, new commits in new trees, clear errors without credentials."""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from berth.knowledge.git import Checkout, GitError, cache_key, cached_commits, checkout, redact_url
from berth.testing.git import git


def commit_files(repo: Path, files: dict[str, str], message: str) -> str:
    """Write ``files`` into ``repo``, commit them all and return the commit."""
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@dataclass(frozen=True)
class Origin:
    """A local repository: ``first`` (tagged v1), ``second`` (main, the default branch), ``feature`` (a branch
    from ``first``)."""

    path: Path
    first: str
    second: str
    feature: str

    @property
    def url(self) -> str:
        """Its file:// URL."""
        return self.path.as_uri()


@pytest.fixture
def origin(tmp_path: Path) -> Origin:
    """A small repository with two commits on main, an annotated tag and a second branch."""
    path = tmp_path / "origin"
    path.mkdir()
    git(path, "init", "--quiet", "--initial-branch=main")
    first = commit_files(path, {"README.md": "# Demo\n", "src/app.py": "print('hi')\n"}, "first")
    git(path, "tag", "--annotate", "v1", "-m", "release 1")
    git(path, "switch", "--quiet", "--create", "feature")
    feature = commit_files(path, {"src/feature.py": "FEATURE = True\n"}, "feature")
    git(path, "switch", "--quiet", "main")
    second = commit_files(path, {"docs/guide.md": "## Guide\n"}, "second")
    return Origin(path=path, first=first, second=second, feature=feature)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """An empty cache folder."""
    return tmp_path / "cache"


def files_of(root: Path) -> set[str]:
    """Every file and link under ``root``, as '/'-separated relative paths."""
    return {path.relative_to(root).as_posix() for path in root.rglob("*") if not path.is_dir() or path.is_symlink()}


def identity(root: Path) -> list[tuple[int, int]]:
    """The inode and modification time of a tree and of a file in it: both change when the tree is exported
    again."""
    return [(path.stat().st_ino, path.stat().st_mtime_ns) for path in (root, root / "README.md")]


class Progress(list[str]):
    """A progress callback that keeps the lines."""

    def __call__(self, line: str) -> None:
        self.append(line)


# --- refs ---------------------------------------------------------------------------------------------------------


def test_a_branch_is_checked_out_as_a_plain_tree_in_the_cache(origin: Origin, cache: Path) -> None:
    result = checkout(origin.url, "main", cache)

    assert result == Checkout(
        url=origin.url, ref="main", commit=origin.second, root=cache / "trees" / cache_key(origin.url) / origin.second
    )
    assert files_of(result.root) == {"README.md", "src/app.py", "docs/guide.md"}
    assert (result.root / "docs" / "guide.md").read_text(encoding="utf-8") == "## Guide\n"
    assert not (result.root / ".git").exists()
    assert (cache / "repos" / f"{cache_key(origin.url)}.git" / "HEAD").is_file()
    assert cached_commits(origin.url, cache) == [origin.second]


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("main", "second"),
        ("feature", "feature"),
        ("v1", "first"),
        ("refs/tags/v1", "first"),
        ("HEAD", "second"),
        ("<first>", "first"),
        ("<first:8>", "first"),
        ("<FEATURE>", "feature"),
    ],
)
def test_every_kind_of_ref_resolves_to_its_commit(origin: Origin, cache: Path, ref: str, expected: str) -> None:
    commits = {"first": origin.first, "second": origin.second, "feature": origin.feature}
    if ref == "<first>":
        ref = origin.first
    elif ref == "<first:8>":
        ref = origin.first[:8]
    elif ref == "<FEATURE>":
        ref = origin.feature.upper()

    result = checkout(str(origin.path), ref, cache)

    assert (result.ref, result.commit) == (ref, commits[expected])
    assert result.root.name == commits[expected]
    assert ("src/feature.py" in files_of(result.root)) == (expected == "feature")
    assert ("docs/guide.md" in files_of(result.root)) == (expected == "second")


def test_head_is_the_default_branch_of_the_remote(origin: Origin, cache: Path) -> None:
    git(origin.path, "symbolic-ref", "HEAD", "refs/heads/feature")

    assert checkout(origin.url, "HEAD", cache).commit == origin.feature


# --- the cache ----------------------------------------------------------------------------------------------------


def test_a_second_call_for_the_same_commit_reuses_the_tree(origin: Origin, cache: Path) -> None:
    first_progress, second_progress = Progress(), Progress()
    first = checkout(origin.url, "main", cache, progress=first_progress)
    before = identity(first.root)

    second = checkout(origin.url, "main", cache, progress=second_progress)

    assert second == first
    assert [
        (path.stat().st_ino, path.stat().st_mtime_ns) for path in (second.root, second.root / "README.md")
    ] == before
    assert first_progress == [f"fetching {origin.url}", f"checking out {origin.second[:12]}"]
    assert second_progress == [f"fetching {origin.url}"]


def test_a_full_sha_the_mirror_has_is_not_fetched(origin: Origin, cache: Path) -> None:
    checkout(origin.url, "main", cache)
    progress = Progress()

    result = checkout(origin.url, origin.first, cache, progress=progress)

    assert result.commit == origin.first
    assert progress == [f"checking out {origin.first[:12]}"]


def test_a_new_commit_on_the_branch_gets_a_new_tree_and_the_old_one_stays(origin: Origin, cache: Path) -> None:
    old = checkout(origin.url, "main", cache)
    third = commit_files(origin.path, {"docs/guide.md": "## Guide, revised\n"}, "third")

    new = checkout(origin.url, "main", cache)

    assert new.commit == third
    assert new.root != old.root
    assert (new.root / "docs" / "guide.md").read_text(encoding="utf-8") == "## Guide, revised\n"
    assert (old.root / "docs" / "guide.md").read_text(encoding="utf-8") == "## Guide\n"
    assert cached_commits(origin.url, cache) == sorted([origin.second, third])


def test_a_tree_without_its_marker_is_a_leftover_and_is_exported_again(origin: Origin, cache: Path) -> None:
    leftover = cache / "trees" / cache_key(origin.url) / origin.second
    leftover.mkdir(parents=True)
    (leftover / "half-written.txt").write_text("partial", encoding="utf-8")
    assert cached_commits(origin.url, cache) == []

    result = checkout(origin.url, "main", cache)

    assert result.root == leftover
    assert files_of(result.root) == {"README.md", "src/app.py", "docs/guide.md"}


def test_the_tree_is_read_only_and_keeps_no_link_out_of_it(tmp_path: Path, cache: Path) -> None:
    repo = tmp_path / "links"
    repo.mkdir()
    git(repo, "init", "--quiet", "--initial-branch=main")
    (repo / "docs").mkdir()
    (repo / "docs" / "guide.md").write_text("guide\n", encoding="utf-8")
    (repo / "docs" / "latest.md").symlink_to("guide.md")
    (repo / "docs" / "escape").symlink_to("../../../../../../etc/passwd")
    (repo / "absolute").symlink_to("/etc")
    commit_files(repo, {}, "links")

    root = checkout(str(repo), "main", cache).root

    assert files_of(root) == {"docs/guide.md", "docs/latest.md"}
    assert (root / "docs" / "latest.md").read_text(encoding="utf-8") == "guide\n"
    assert (root / "docs" / "guide.md").stat().st_mode & 0o222 == 0


def test_cached_commits_of_an_unknown_repository_is_empty(cache: Path) -> None:
    assert cached_commits("https://example.org/none.git", cache) == []


# --- failures -----------------------------------------------------------------------------------------------------


def test_a_missing_repository_is_a_git_error_naming_it(tmp_path: Path, cache: Path) -> None:
    url = (tmp_path / "nowhere").as_uri()

    with pytest.raises(GitError) as caught:
        checkout(url, "main", cache)

    assert caught.value.reason.startswith(f"git repository {url}: fetching ref 'main' failed: ")
    assert "does not appear to be a git repository" in caught.value.reason
    assert str(caught.value) == caught.value.reason
    assert cached_commits(url, cache) == []
    assert not (cache / "trees").exists()


def test_a_missing_ref_is_a_git_error_naming_it(origin: Origin, cache: Path) -> None:
    with pytest.raises(GitError) as caught:
        checkout(origin.url, "nope", cache)

    assert caught.value.reason == f"git repository {origin.url}: ref 'nope' not found"
    assert not (cache / "trees").exists()


def test_head_of_an_empty_repository_is_not_found(tmp_path: Path, cache: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "--quiet")

    with pytest.raises(GitError, match=r"ref 'HEAD' not found"):
        checkout(str(empty), "HEAD", cache)


@pytest.mark.parametrize("ref", ["", "--upload-pack=touch pwned", "main branch", "main\n"])
def test_a_ref_that_cannot_name_anything_is_refused(origin: Origin, cache: Path, ref: str) -> None:
    with pytest.raises(GitError, match=r"invalid ref"):
        checkout(origin.url, ref, cache)

    assert not cache.exists()


def test_a_failed_export_leaves_nothing_at_the_trees_path(origin: Origin, cache: Path) -> None:
    first = checkout(origin.url, "v1", cache)
    trees = first.root.parent
    # Forget the tree (as a garbage collector would) and damage the mirror: a blob of the commit is gone.
    (trees / f"{origin.first}.done").unlink()
    shutil.rmtree(first.root)
    blob = git(origin.path, "rev-parse", f"{origin.first}:README.md")
    loose = cache / "repos" / f"{cache_key(origin.url)}.git" / "objects" / blob[:2] / blob[2:]
    assert loose.is_file()  # a small fetch keeps its objects loose
    loose.unlink()

    with pytest.raises(GitError) as caught:
        checkout(origin.url, origin.first, cache)

    assert caught.value.reason.startswith(
        f"git repository {origin.url}: checking out ref {origin.first!r} (commit {origin.first[:12]}) failed: "
    )
    assert not first.root.exists()
    assert sorted(path.name for path in trees.iterdir()) == [f"{origin.first}.lock"]
    assert cached_commits(origin.url, cache) == []


def test_waiting_for_another_process_ends_at_the_timeout(origin: Origin, cache: Path) -> None:
    lock = cache / "repos" / f"{cache_key(origin.url)}.lock"
    lock.parent.mkdir(parents=True)
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(GitError) as caught:
            checkout(origin.url, "main", cache, timeout_s=0.2)

    assert caught.value.reason == (
        f"git repository {origin.url}: waiting for another process using the cache timed out after 0.2s"
    )


# --- credentials --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("https://alice:s3cr3t@git.example.org/team/repo.git", "https://git.example.org/team/repo.git"),
        ("https://ghp_token123@github.com/o/r.git", "https://github.com/o/r.git"),
        ("https://user:p@ss@host:8443/r?x=1#y", "https://host:8443/r?x=1#y"),
        ("ssh://git@host.example/r.git", "ssh://host.example/r.git"),
        ("git+https://u:t@host/r", "git+https://host/r"),
        ("https://git.example.org/team/repo.git", "https://git.example.org/team/repo.git"),
        ("https://host/path/with@at", "https://host/path/with@at"),
        ("git@github.com:o/r.git", "git@github.com:o/r.git"),
        ("/srv/repos/r.git", "/srv/repos/r.git"),
        (
            "fatal: unable to access 'https://u:tok@h/r/': Failed to connect",
            "fatal: unable to access 'https://h/r/': Failed to connect",
        ),
    ],
)
def test_redact_url_strips_userinfo(url: str, redacted: str) -> None:
    assert redact_url(url) == redacted


def test_a_checkout_shows_no_credentials() -> None:
    result = Checkout(url="https://alice:s3cr3t@host/r.git", ref="main", commit="0" * 40, root=Path("/cache/t"))

    assert repr(result) == (
        f"Checkout(url='https://host/r.git', ref='main', commit='{'0' * 40}', root={Path('/cache/t')!r})"
    )
    assert result.url == "https://alice:s3cr3t@host/r.git"


def test_the_cache_key_ignores_credentials() -> None:
    assert cache_key("https://alice:old@host/r.git") == cache_key("https://host/r.git")
    assert cache_key("https://host/r.git") != cache_key("https://host/other.git")
    assert len(cache_key("https://host/r.git")) == 16


@pytest.mark.parametrize(
    "url",
    [
        "https://alice:s3cr3t-token@127.0.0.1:9/team/repo.git",  # nothing listens on the discard port
        "file://alice:s3cr3t-token@/nonexistent/repo.git",
    ],
)
def test_credentials_appear_in_no_error_or_progress_line(cache: Path, url: str) -> None:
    progress = Progress()

    with pytest.raises(GitError) as caught:
        checkout(url, "main", cache, timeout_s=30, progress=progress)

    assert caught.value.reason.startswith(f"git repository {redact_url(url)}: fetching ref 'main' failed: ")
    for text in (caught.value.reason, str(caught.value), *progress):
        assert "s3cr3t" not in text
        assert "alice" not in text
    assert progress == [f"fetching {redact_url(url)}"]


# --- processes ----------------------------------------------------------------------------------------------------

CHILD = """
import json, sys
from pathlib import Path
from berth.testing.git import git
from berth.knowledge.git import checkout

url, ref, cache = sys.argv[1:4]
lines = []
print("ready", flush=True)
sys.stdin.readline()  # the start signal, written to both processes at once
result = checkout(url, ref, Path(cache), timeout_s=60, progress=lines.append)
print(json.dumps({"commit": result.commit, "root": str(result.root), "lines": lines}), flush=True)
"""


def run_together(url: str, ref: str, cache: Path) -> list[dict[str, Any]]:
    """Start two processes that each check out ``ref``, release them at once and return what each reports."""
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, url, ref, str(cache)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for child in children:  # both have imported berth and wait on their stdin
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        outputs = [child.communicate(timeout=60)[0] for child in children]
    finally:
        for child in children:
            child.kill()
            child.wait()
    assert [child.returncode for child in children] == [0, 0]
    return [json.loads(output) for output in outputs]


@dataclass(frozen=True)
class ManyFiles:
    """A repository whose main has 2001 files, one commit after its ``start`` tag (a README only)."""

    url: str
    start: str
    main: str


@pytest.fixture(scope="module")
def many_files(tmp_path_factory: pytest.TempPathFactory) -> ManyFiles:
    """The repository with many files, made once for the module (the tests do not change it)."""
    repo = tmp_path_factory.mktemp("many")
    git(repo, "init", "--quiet", "--initial-branch=main")
    start = commit_files(repo, {"README.md": "many files, soon\n"}, "start")
    git(repo, "tag", "start")
    main = commit_files(repo, {f"files/file{number:04}.txt": f"file {number}\n" for number in range(2000)}, "many")
    return ManyFiles(url=repo.as_uri(), start=start, main=main)


@pytest.mark.parametrize(
    "warm",
    [
        pytest.param(False, id="by-branch-in-an-empty-cache"),  # both fetch, one after the other, then race to export
        pytest.param(True, id="by-sha-in-a-fetched-mirror"),  # no fetch: both go straight for the commit's lock
    ],
)
def test_two_processes_export_a_commit_once(many_files: ManyFiles, cache: Path, warm: bool) -> None:
    url, commit = many_files.url, many_files.main
    if warm:
        checkout(url, "start", cache)

    results = run_together(url, commit if warm else "main", cache)

    root = cache / "trees" / cache_key(url) / commit
    assert {(result["commit"], result["root"]) for result in results} == {(commit, str(root))}
    exports = [sum(line.startswith("checking out") for line in result["lines"]) for result in results]
    assert sorted(exports) == [0, 1]
    fetches = [sum(line.startswith("fetching") for line in result["lines"]) for result in results]
    assert fetches == ([0, 0] if warm else [1, 1])
    assert len(files_of(root)) == 2001
    assert (root / "files" / "file1999.txt").read_text(encoding="utf-8") == "file 1999\n"
    assert cached_commits(url, cache) == sorted([commit, *([many_files.start] if warm else [])])
