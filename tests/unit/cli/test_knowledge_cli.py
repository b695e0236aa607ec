"""``berth knowledge status|reindex|search`` over a folder bundle's spaces: progress and counts, only changed
files re-indexed, skipped files with reasons, search hits with ks: paths, and clear errors for unknown names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from berth.cli import cli
from berth.cli.errors import run_guarded

pytestmark = pytest.mark.usefixtures("clean_berth_env")

BUNDLE = """
from pathlib import Path
from berth import BundleInfo, KnowledgeSpace, MarkdownFolder, SourceTree, hookimpl

HERE = Path(__file__).parent

@hookimpl
def berth_bundle():
    return BundleInfo(id="kb", version="1.0.0")

@hookimpl
def berth_knowledge(ctx):
    return [
        KnowledgeSpace(name="guide", indexer=MarkdownFolder(HERE / "guide")),
        KnowledgeSpace(name="code", indexer=SourceTree(HERE / "code")),
    ]
"""


def setup_descriptors(tmp_path: Path) -> Path:
    """Descriptors with one folder bundle ``kb`` (a markdown guide and a small code tree), visible to acme/support."""
    bundle = tmp_path / "kb_bundle"
    (bundle / "guide").mkdir(parents=True)
    (bundle / "code").mkdir()
    (bundle / "__init__.py").write_text(BUNDLE)
    (bundle / "guide" / "install.md").write_text("# Install\n\nRun pip install.\n\n## Upgrade\n\nStop, then pip.\n")
    (bundle / "code" / "store.py").write_text("class Store:\n    def save(self, item):\n        return item\n")
    (bundle / "code" / "store_copy.py").write_text("class Store:\n    def save(self, item):\n        return item\n")
    (bundle / "code" / "logo.png").write_bytes(b"\x89PNG\x00\x00binary")
    (bundle / "code" / "build").mkdir()
    (bundle / "code" / "build" / "out.py").write_text("x = 1\n")
    (bundle / "code" / "build" / "more.py").write_text("y = 2\n")
    folder = tmp_path / "descriptors"
    folder.mkdir()
    assembly = {
        "platform": {"storage": {"kind": "embedded", "root": "./state"}},
        "tenants": {"acme": {"projects": {"support": {}}}},
    }
    (folder / "assembly.yaml").write_text(yaml.safe_dump(assembly))
    (folder / "bundles.yaml").write_text(yaml.safe_dump({"bundles": {"kb": {"source": {"path": str(bundle)}}}}))
    return folder


def invoke(*args: str) -> tuple[int, str, str]:
    """Run ``berth knowledge …``; (exit code, stdout, stderr)."""
    result = CliRunner().invoke(cli, ["knowledge", *args])
    return result.exit_code, result.stdout, result.stderr


def test_reindex_status_and_search(tmp_path: Path) -> None:
    descriptors = setup_descriptors(tmp_path)
    code, out, err = invoke("status", "--descriptors", str(descriptors), "--format", "json")
    assert code == 0, err
    assert [(s["space"], s["version"]) for s in json.loads(out)] == [
        ("code", 0),
        ("guide", 0),
    ]  # status indexes nothing

    code, out, err = invoke("reindex", "--descriptors", str(descriptors))
    assert code == 0, err
    assert "kb/code: version 1 — 3 files, 3 re-indexed (2 chunks), 0 removed, 1 skipped" in out  # the copy: 0
    assert "kb/guide: version 1 — 1 files, 1 re-indexed (2 chunks)" in out
    assert "guide: chunking — files 1/1" in err
    assert (descriptors / "state" / "knowledge" / "spaces" / "kb" / "guide.sqlite3").is_file()

    (descriptors.parent / "kb_bundle" / "guide" / "upgrade.md").write_text("# Downgrade\n\nNot supported.\n")
    code, out, _ = invoke("reindex", "--descriptors", str(descriptors), "--bundle", "kb", "--space", "guide")
    assert code == 0 and "kb/guide: version 2 — 2 files, 1 re-indexed (1 chunks)" in out

    code, out, _ = invoke("status", "--descriptors", str(descriptors), "--tenant", "acme", "--project", "support")
    assert code == 0
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith("kb ")}
    assert "2 indexed, 1 skipped" in rows["code"] and rows["code"].rstrip().endswith("ready")
    assert "2 indexed" in rows["guide"]
    assert "kb/code: logo.png: skipped: binary file (NUL bytes)" in out
    assert "kb/code: 2 duplicate chunk(s) dropped (the same text as an earlier chunk of the space)" in out
    assert "kb/code: excluded build/: build output at the space root: 2 file(s)" in out

    code, out, _ = invoke(
        "search", "--descriptors", str(descriptors), "--bundle", "kb", "stop before upgrading", "--format", "json"
    )
    assert code == 0
    hits = json.loads(out)
    assert hits[0]["path"] == "ks:guide/install.md#upgrade" and hits[0]["title"] == "Install > Upgrade"


def test_unknown_bundle_or_space_is_a_usage_error(tmp_path: Path) -> None:
    descriptors = setup_descriptors(tmp_path)
    assert run_guarded(cli, ["knowledge", "status", "--descriptors", str(descriptors), "--bundle", "nope"]) == 2
    code = run_guarded(
        cli, ["knowledge", "reindex", "--descriptors", str(descriptors), "--bundle", "kb", "--space", "x"]
    )
    assert code == 2


def test_search_filters_by_path_language_symbol_and_kind(tmp_path: Path) -> None:
    descriptors = setup_descriptors(tmp_path)
    search = ("search", "--descriptors", str(descriptors), "--bundle", "kb", "--format", "json")
    code, out, err = invoke(*search, "--symbol", "save", "item")
    assert code == 0, err
    assert [(hit["path"], hit["title"]) for hit in json.loads(out)] == [("ks:code/store.py#Store.save", "Store.save")]
    code, out, _ = invoke(*search, "--path", "*.md", "--kind", "section", "pip")
    assert code == 0
    assert {hit["path"].split("#")[0] for hit in json.loads(out)} == {"ks:guide/install.md"}
    code, out, _ = invoke(*search, "--language", "go", "item")
    assert code == 0 and json.loads(out) == []
    code, _, err = invoke(*search, "--language", "cobol", "item")
    assert code == 2 and "unknown language 'cobol'" in err
