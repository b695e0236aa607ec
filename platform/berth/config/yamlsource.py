"""Reading descriptor YAML while keeping the line of every key.

Descriptors are parsed with a safe loader that differs from PyYAML's defaults in three ways an
operator would expect from a configuration format:

* only ``true``/``false`` are booleans (YAML 1.2): ``multi_action: off`` stays the string ``"off"``
  and ``country: NO`` stays ``"NO"``;
* a key given twice in one mapping is an error, not a silent overwrite;
* a file over :data:`MAX_DESCRIPTOR_BYTES`, or one whose aliases expand past
  :data:`MAX_EXPANDED_VALUES` values (a "billion laughs" document), is refused before validation.

Every mapping key and sequence item is recorded in a :class:`LineMap` so that validation errors can
name the line they refer to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from berth.config.errors import DescriptorError, DescriptorProblem

MAX_DESCRIPTOR_BYTES = 1024 * 1024
MAX_EXPANDED_VALUES = 100_000

PathKey = tuple[str | int, ...]


class _DescriptorLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans (see module docstring)."""


_DescriptorLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_DescriptorLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)


@dataclass
class LineMap:
    """Maps a path inside a document (mapping keys and list indices) to its 1-based line."""

    lines: dict[PathKey, int] = field(default_factory=dict)

    def locate(self, loc: tuple[Any, ...]) -> tuple[int | None, PathKey]:
        """Return the line of the deepest known prefix of ``loc`` and the path that was matched.

        Elements of ``loc`` that are not part of the document (such as the tag pydantic adds for a
        discriminated union) are skipped, so the returned path is a real path in the file.
        """
        matched: PathKey = ()
        line = self.lines.get(())
        for element in loc:
            for candidate in (element, str(element)):
                probe = (*matched, candidate)
                if probe in self.lines:
                    matched = probe
                    line = self.lines[probe]
                    break
        return line, matched


@dataclass(frozen=True)
class YamlDocument:
    """One parsed descriptor file: its display name, its data and its line map."""

    file: str
    data: Any = field(repr=False)  # may hold secret literals
    lines: LineMap = field(repr=False)


def format_field_path(path: tuple[Any, ...]) -> str:
    """Render a path as ``a.b[0].c`` (list indices in brackets, keys joined by dots)."""
    rendered = ""
    for element in path:
        if isinstance(element, int):
            rendered += f"[{element}]"
        else:
            rendered += f".{element}" if rendered else str(element)
    return rendered


def read_yaml_file(path: Path, display_name: str | None = None) -> YamlDocument:
    """Read and parse one descriptor file; raise :class:`DescriptorError` on any problem."""
    name = display_name or path.name
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise DescriptorError([DescriptorProblem(name, None, "", f"cannot read file: {exc.strerror}")]) from None
    if size > MAX_DESCRIPTOR_BYTES:
        raise DescriptorError(
            [
                DescriptorProblem(
                    name,
                    None,
                    "",
                    f"file is {size / 1_000_000:.1f} MB; a descriptor may be at most "
                    f"{MAX_DESCRIPTOR_BYTES // 1024} KiB (put bulk data elsewhere and reference it)",
                )
            ]
        )
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DescriptorError([DescriptorProblem(name, line, "", "file is not valid UTF-8")]) from None
    return parse_yaml_text(text, name)


def parse_yaml_text(text: str, file: str) -> YamlDocument:
    """Parse descriptor YAML text; raise :class:`DescriptorError` naming ``file`` on any problem."""
    if len(text.encode("utf-8")) > MAX_DESCRIPTOR_BYTES:
        raise DescriptorError([DescriptorProblem(file, None, "", f"text exceeds {MAX_DESCRIPTOR_BYTES // 1024} KiB")])
    try:
        loader = _DescriptorLoader(text)
    except yaml.reader.ReaderError as exc:
        return _raise_reader_error(exc, text, file)
    try:
        node = loader.get_single_node()
        if node is None:
            return YamlDocument(file, {}, LineMap({(): 1}))
        lines = LineMap()
        problems: list[DescriptorProblem] = []
        _walk(node, (), lines, problems, file, set())
        if problems:
            raise DescriptorError(problems)
        expanded = _expanded_size(node, {})
        if expanded > MAX_EXPANDED_VALUES:
            raise DescriptorError(
                [
                    DescriptorProblem(
                        file,
                        node.start_mark.line + 1,
                        "",
                        f"document expands to {expanded} values through YAML aliases (limit {MAX_EXPANDED_VALUES})",
                    )
                ]
            )
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        raise DescriptorError([_syntax_problem(exc, text, file)]) from None
    except yaml.reader.ReaderError as exc:
        _raise_reader_error(exc, text, file)
    except yaml.YAMLError as exc:
        raise DescriptorError([DescriptorProblem(file, None, "", f"YAML error: {type(exc).__name__}")]) from None
    finally:
        loader.dispose()
    return YamlDocument(file, data, lines)


def _walk(
    node: yaml.Node,
    path: PathKey,
    lines: LineMap,
    problems: list[DescriptorProblem],
    file: str,
    seen: set[int],
) -> None:
    """Record the line of every key/item under ``node``; report duplicate keys."""
    lines.lines.setdefault(path, node.start_mark.line + 1)
    if id(node) in seen:  # an alias of a node already walked: its lines are known
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first_seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                _walk(value_node, path, lines, problems, file, seen)
                continue
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else repr(key_node.value)
            key_line = key_node.start_mark.line + 1
            if key in first_seen:
                problems.append(
                    DescriptorProblem(
                        file,
                        key_line,
                        format_field_path((*path, key)),
                        f"duplicate key '{key}' (first given on line {first_seen[key]})",
                    )
                )
                continue
            first_seen[key] = key_line
            lines.lines[(*path, key)] = key_line
            _walk(value_node, (*path, key), lines, problems, file, seen)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*path, index), lines, problems, file, seen)


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """Count the values ``node`` stands for once every alias is expanded (memoized per node)."""
    known = memo.get(id(node))
    if known is not None:
        return known
    memo[id(node)] = 1  # a recursive alias counts once instead of looping
    size = 1
    if isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(item, memo) for item in node.value)
    memo[id(node)] = size
    return size


def _raise_reader_error(exc: yaml.reader.ReaderError, text: str, file: str) -> NoReturn:
    """A character YAML does not allow (control characters): name it and its line."""
    line = text[: exc.position].count("\n") + 1
    raise DescriptorError(
        [DescriptorProblem(file, line, "", f"character #x{_code_point(exc.character):04x} is not allowed in YAML")]
    ) from None


def _code_point(character: object) -> int:
    return character if isinstance(character, int) else ord(str(character)[:1] or "\0")


def _syntax_problem(exc: yaml.MarkedYAMLError, text: str, file: str) -> DescriptorProblem:
    """Turn a PyYAML error into one problem with a line and a plain-language message."""
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark is not None else None
    source_lines = text.splitlines()
    if line is not None and 0 < line <= len(source_lines):
        indent = source_lines[line - 1][: len(source_lines[line - 1]) - len(source_lines[line - 1].lstrip())]
        if "\t" in indent or "'\\t'" in str(exc.problem):
            return DescriptorProblem(file, line, "", "a tab is used for indentation; YAML indents with spaces only")
    problem = exc.problem or "malformed YAML"
    context = f" ({exc.context})" if exc.context else ""
    return DescriptorProblem(file, line, "", f"YAML syntax error: {problem}{context}")
