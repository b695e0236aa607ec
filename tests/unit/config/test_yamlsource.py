"""Reading descriptor YAML: lines, YAML 1.2 booleans, duplicates, tabs, size and alias limits."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.config.errors import DescriptorError
from berth.config.yamlsource import (
    MAX_DESCRIPTOR_BYTES,
    format_field_path,
    parse_yaml_text,
    read_yaml_file,
)


def problems_of(text: str) -> list[str]:
    with pytest.raises(DescriptorError) as caught:
        parse_yaml_text(text, "f.yaml")
    return [str(p) for p in caught.value.problems]


def test_only_true_and_false_are_booleans() -> None:
    document = parse_yaml_text("a: off\nb: yes\nc: NO\nd: true\ne: False\n", "f.yaml")
    assert document.data == {"a": "off", "b": "yes", "c": "NO", "d": True, "e": False}


def test_every_key_and_item_knows_its_line() -> None:
    document = parse_yaml_text("top:\n  inner:\n    - x\n    - y\nother: 1\n", "f.yaml")
    assert document.lines.locate(("top", "inner", 1)) == (4, ("top", "inner", 1))
    assert document.lines.locate(("other",))[0] == 5


def test_locate_skips_elements_that_are_not_in_the_document() -> None:
    document = parse_yaml_text("storage:\n  kind: distributed\n  postgres: {}\n", "f.yaml")
    line, matched = document.lines.locate(("storage", "distributed", "postgres", "dsn"))
    assert (line, matched) == (3, ("storage", "postgres"))


def test_a_duplicate_key_is_an_error_naming_both_lines() -> None:
    assert problems_of("a: 1\nb: 2\na: 3\n") == ["f.yaml:3 a: duplicate key 'a' (first given on line 1)"]


def test_merge_keys_are_not_duplicates() -> None:
    document = parse_yaml_text("base: &b {x: 1, y: 2}\nderived:\n  <<: *b\n  y: 3\n", "f.yaml")
    assert document.data["derived"] == {"x": 1, "y": 3}


def test_tab_indentation_gets_a_plain_explanation() -> None:
    assert problems_of("platform:\n\treact: {}\n") == [
        "f.yaml:2: a tab is used for indentation; YAML indents with spaces only"
    ]


def test_syntax_error_names_the_line() -> None:
    (problem,) = problems_of("a:\n  b: [1, 2\n")
    assert problem.startswith("f.yaml:3: YAML syntax error:")


def test_alias_bomb_is_refused_before_expansion() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 9):
        refs = ", ".join([f"*a{level - 1}"] * 10)
        lines.append(f"a{level}: &a{level} [{refs}]")
    (problem,) = problems_of("\n".join(lines) + "\n")
    assert "expands to" in problem
    assert "YAML aliases" in problem


def test_file_over_the_limit_is_refused_with_its_size(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("a: " + "x" * (5 * 1_000_000) + "\n")
    with pytest.raises(DescriptorError) as caught:
        read_yaml_file(path)
    (problem,) = caught.value.problems
    assert problem.file == "gateway.yaml"
    assert "5.0 MB" in problem.message
    assert str(MAX_DESCRIPTOR_BYTES // 1024) in problem.message


def test_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "assembly.yaml"
    path.write_bytes(b"a: 1\nb: \xff\xfe\n")
    with pytest.raises(DescriptorError) as caught:
        read_yaml_file(path)
    assert str(caught.value) == "assembly.yaml:2: file is not valid UTF-8"


def test_empty_file_is_an_empty_mapping() -> None:
    assert parse_yaml_text("# only a comment\n", "f.yaml").data == {}


def test_field_paths_render_keys_with_dots_and_indices_in_brackets() -> None:
    assert format_field_path(("auth", "keys", 0, "sha256")) == "auth.keys[0].sha256"
    assert format_field_path(("tenants", "acme/support", "default_bundle")) == "tenants.acme/support.default_bundle"


keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)
scalars = st.one_of(
    st.integers(-(10**6), 10**6), st.text(max_size=20), st.booleans(), st.none(), st.floats(allow_nan=False)
)
documents = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(keys, documents, max_size=5))
def test_parsing_what_pyyaml_dumps_gives_the_same_data(data: dict[str, object]) -> None:
    assert parse_yaml_text(yaml.safe_dump(data), "f.yaml").data == data


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_no_text_crashes_the_parser(text: str) -> None:
    problems: tuple[object, ...] = ()
    try:
        parse_yaml_text(text, "f.yaml")
    except DescriptorError as exc:
        problems = exc.problems
        assert problems
    assert all(getattr(p, "file", None) == "f.yaml" for p in problems)
