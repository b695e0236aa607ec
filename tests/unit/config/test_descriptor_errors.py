"""Bad descriptors, tried as a new user would: one clear problem each, with file:line field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from berth.cli import cli
from berth.cli.errors import run_guarded
from berth.config import Configuration, DescriptorError


def edit(folder: Path, file: str, old: str, new: str) -> None:
    path = folder / file
    text = path.read_text()
    assert old in text, f"{old!r} not in {file}"
    path.write_text(text.replace(old, new, 1))


def check_output(folder: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = run_guarded(cli, ["descriptors", "check", str(folder)])
    captured = capsys.readouterr()
    return code, captured.err


CASES = {
    "typo'd key": (
        "assembly.yaml",
        "react: {max_iterations: 15,",
        "react: {max_iteratons: 15,",
        r"assembly\.yaml:11 platform\.react\.max_iteratons: unknown key 'max_iteratons'; "
        r"did you mean 'max_iterations'\?",
    ),
    "wrong type": (
        "assembly.yaml",
        "max_iterations: 15,",
        "max_iterations: many,",
        r"assembly\.yaml:11 platform\.react\.max_iterations: expected a whole number, got the text 'many'",
    ),
    "unknown bundle in a tenant": (
        "bundles.yaml",
        "bundles: [hello, docs, ops-copilot]",
        "bundles: [hello, docs, ops-copilt]",
        r"bundles\.yaml:20 tenants\.acme/internal\.bundles\[2\]: unknown bundle 'ops-copilt' "
        r"\(known: docs, hello, ops-copilot\)",
    ),
    "missing secret": (
        "bundles.secrets.yaml",
        'search_api_key: "env:DOCS_SEARCH_KEY"',
        'search_api_key: "secrets-manager:docs/key"',
        r"bundles\.secrets\.yaml:5 bundles\.docs\.search_api_key: unknown secret provider 'secrets-manager'",
    ),
    "undeclared secret reference": (
        "assembly.yaml",
        'summarizer: {provider: anthropic, model: claude-haiku-5-5, api_key: "secret:anthropic_api_key"}',
        'summarizer: {provider: anthropic, model: claude-haiku-5-5, api_key: "secret:antropic_key"}',
        r"assembly\.yaml:10 platform\.models\.roles\.summarizer\.api_key: secret 'antropic_key' is not declared "
        r"in secrets\.yaml",
    ),
    "malformed YAML": (
        "gateway.yaml",
        "backpressure: {max_inflight_turns_per_worker: 64,",
        "backpressure: {max_inflight_turns_per_worker: 64,,",
        r"gateway\.yaml:\d+: YAML syntax error: ",
    ),
    "tab-indented file": (
        "bundles.secrets.yaml",
        "  docs:\n    search_api_key",
        "  docs:\n\tsearch_api_key",
        r"bundles\.secrets\.yaml:5: a tab is used for indentation; YAML indents with spaces only",
    ),
    "a list where a mapping belongs": (
        "assembly.yaml",
        "react: {max_iterations: 18}",
        "react: [max_iterations, 18]",
        r"assembly\.yaml:24 tenants\.acme\.react: expected a mapping, got a list",
    ),
    "default bundle outside the scope": (
        "bundles.yaml",
        "default_bundle: ops-copilot",
        "default_bundle: helo",
        r"bundles\.yaml:21 tenants\.acme/internal\.default_bundle: unknown bundle 'helo'",
    ),
    "undeclared project": (
        "bundles.yaml",
        "  globex/research:",
        "  globex/reserch:",
        r"bundles\.yaml:\d+ tenants\.globex/reserch: project 'reserch' is not declared for tenant 'globex'",
    ),
    "invalid bundle id": (
        "bundles.yaml",
        "  hello: {source: {entry_point: hello}}",
        "  Hello_World: {source: {entry_point: hello}}",
        r"bundles\.yaml:4 bundles\.Hello_World: invalid value 'Hello_World': it must match",
    ),
    "project override of an unknown exec profile": (
        "assembly.yaml",
        "exec: {default_profile: docker}",
        "exec: {default_profile: dokker}",
        r"assembly\.yaml:27 tenants\.acme\.projects\.internal\.exec: default_profile 'dokker' is not a profile",
    ),
    "tool threads degraded past their size": (
        "assembly.yaml",
        "  embedder: {provider: builtin}\n",
        "  embedder: {provider: builtin}\n  tool_threads: {size: 2, degraded_at: 3}\n",
        r"assembly\.yaml:20 platform\.tool_threads: degraded_at \(3\) must not exceed size \(2\)",
    ),
    "resident conversations budget given in bytes": (
        "assembly.yaml",
        "  embedder: {provider: builtin}\n",
        "  embedder: {provider: builtin}\n  resident_conversations: {max_mb: 268435456}\n",
        r"assembly\.yaml:20 platform\.resident_conversations\.max_mb: max_mb is in MiB: 268435456 MiB is more than "
        r"1 TiB \(give 256 for 256 MiB, not a number of bytes\)",
    ),
    "negative resident conversations budget": (
        "assembly.yaml",
        "  embedder: {provider: builtin}\n",
        "  embedder: {provider: builtin}\n  resident_conversations: {max_mb: -1}\n",
        r"assembly\.yaml:20 platform\.resident_conversations\.max_mb: .*greater than or equal to 0",
    ),
    "resident conversations budget that is not a number": (
        "assembly.yaml",
        "  embedder: {provider: builtin}\n",
        "  embedder: {provider: builtin}\n  resident_conversations: {max_mb: 256MB}\n",
        r"assembly\.yaml:20 platform\.resident_conversations\.max_mb: .*'256MB'",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_bad_descriptor_gives_one_clear_problem_and_exit_2(
    case: str, example_descriptors: Path, capsys: pytest.CaptureFixture[str], clean_berth_env: None
) -> None:
    file, old, new, expected = CASES[case]
    edit(example_descriptors, file, old, new)
    code, err = check_output(example_descriptors, capsys)
    assert code == 2
    problem_lines = [line for line in err.splitlines() if not re.match(r"\d+ problems? in", line)]
    assert len(problem_lines) == 1, err
    assert re.search(expected, problem_lines[0].replace(str(example_descriptors) + "/", "")), err
    assert "Traceback" not in err


def test_a_5mb_descriptor_is_refused_without_a_traceback(
    example_descriptors: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (example_descriptors / "gateway.yaml").write_text("cors:\n  allow_origins: [" + "x" * 5_000_000 + "]\n")
    code, err = check_output(example_descriptors, capsys)
    assert code == 2
    assert "gateway.yaml: file is 5.0 MB; a descriptor may be at most 1024 KiB" in err
    assert "Traceback" not in err


def test_problems_of_several_files_are_reported_together(example_descriptors: Path) -> None:
    edit(example_descriptors, "assembly.yaml", "max_iterations: 15,", "max_iterations: 0,")
    edit(example_descriptors, "gateway.yaml", "retry_after_s: 2", "retry_after_s: -1")
    edit(example_descriptors, "bundles.yaml", "watch: true", "watch: sometimes")
    with pytest.raises(DescriptorError) as caught:
        Configuration.load(example_descriptors)
    files = sorted({Path(p.file).name for p in caught.value.problems})
    assert files == ["assembly.yaml", "bundles.yaml", "gateway.yaml"]


def test_top_level_list_is_refused(example_descriptors: Path) -> None:
    (example_descriptors / "secrets.yaml").write_text("- anthropic_api_key\n")
    with pytest.raises(DescriptorError) as caught:
        Configuration.load(example_descriptors)
    assert [p.message for p in caught.value.problems] == ["expected a mapping at the top of the file, got a list"]


def test_misspelt_descriptor_file_name_is_reported(example_descriptors: Path) -> None:
    (example_descriptors / "bundles.yaml").rename(example_descriptors / "bundle.yaml")
    with pytest.raises(DescriptorError) as caught:
        Configuration.load(example_descriptors)
    messages = [p.message for p in caught.value.problems]
    assert "not a descriptor name; did you mean 'bundles.yaml'?" in messages


def test_open_auth_may_not_listen_off_loopback(example_descriptors: Path) -> None:
    edit(example_descriptors, "gateway.yaml", "mode: api_keys", "mode: none")
    edit(example_descriptors, "gateway.yaml", "host: 127.0.0.1", "host: 0.0.0.0")
    with pytest.raises(DescriptorError) as caught:
        Configuration.load(example_descriptors)
    (problem,) = caught.value.problems
    assert "auth mode 'none' may only listen on loopback, not '0.0.0.0'" in problem.message


def test_gateway_key_for_an_undeclared_tenant_is_an_error(example_descriptors: Path) -> None:
    edit(example_descriptors, "gateway.yaml", "tenant: globex,", "tenant: initech,")
    with pytest.raises(DescriptorError) as caught:
        Configuration.load(example_descriptors)
    (problem,) = caught.value.problems
    assert problem.field == "auth.keys[1].tenant"
    assert "tenant 'initech' is not declared in assembly.yaml" in problem.message


def test_a_failed_check_changes_nothing_on_disk(example_descriptors: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edit(example_descriptors, "bundles.yaml", "watch: true", "watch: [true]")
    before = {p.name: p.read_bytes() for p in example_descriptors.iterdir() if p.is_file()}
    code, _ = check_output(example_descriptors, capsys)
    assert code == 2
    assert {p.name: p.read_bytes() for p in example_descriptors.iterdir() if p.is_file()} == before


def test_missing_descriptors_folder_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["descriptors", "check", str(tmp_path / "nope")])
    assert result.exit_code != 0
    assert isinstance(result.exception, DescriptorError)
    assert "descriptors folder does not exist" in str(result.exception)
