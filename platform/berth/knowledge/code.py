"""Source code chunked by definitions (tree-sitter), and line windows for everything else.

:func:`chunk_code` parses a source file with the tree-sitter grammar of its language (:data:`LANGUAGES`,
picked by the file's extension) and makes:

* one ``definition`` chunk per function, class, method, type and the like, anchored by its qualified name
  (``Store.search``, ``outer.inner``; a repeated name gets ``~2``, ``~3``). Its text is the definition's lines,
  with the decorators, attributes and comments written immediately above it, *less the lines of the
  definitions nested in it*, which are chunks of their own: a class chunk holds the class's signature,
  docstring and fields, and each method is a chunk. Its line range is the whole definition's.
* ``window`` chunks (anchor ``L<first>-<last>``) of at most ``window_lines`` lines over the runs of lines
  outside any definition: imports, constants, top-level statements.

Any chunk longer than :data:`~berth.knowledge.chunks.MAX_CHUNK_CHARS` is split into parts at line
boundaries (:func:`~berth.knowledge.chunks.part_anchor`); a single longer line is cut.

A file whose extension no grammar knows is indexed as line windows; so is a file whose parser fails (with a
note saying so). Tree-sitter is error-tolerant: a file with syntax errors still yields its definitions, with
a note. The grammars are the official per-language wheels, which bundle compiled parsers: nothing is
downloaded at run time. Languages are loaded on first use and cached; each thread gets its own parsers.
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from berth.knowledge.chunks import MAX_CHUNK_CHARS, Chunk, dedupe_anchor, part_anchor

if TYPE_CHECKING:
    from tree_sitter import Language, Node, Parser

__all__ = ["LANGUAGES", "chunk_code", "language_of"]

LANGUAGES: Final[Mapping[str, str]] = MappingProxyType(
    {
        ".py": "python",
        ".pyi": "python",
        ".pyw": "python",
        ".js": "javascript",
        ".jsx": "javascript",
        ".mjs": "javascript",
        ".cjs": "javascript",
        ".ts": "typescript",
        ".mts": "typescript",
        ".cts": "typescript",
        ".tsx": "tsx",
        ".go": "go",
        ".rs": "rust",
        ".java": "java",
    }
)
"""File extension (lower-case, with its dot) → the language :func:`chunk_code` parses it as."""

_GRAMMARS: Final[Mapping[str, tuple[str, str]]] = MappingProxyType(
    {
        "python": ("tree_sitter_python", "language"),
        "javascript": ("tree_sitter_javascript", "language"),
        "typescript": ("tree_sitter_typescript", "language_typescript"),
        "tsx": ("tree_sitter_typescript", "language_tsx"),
        "go": ("tree_sitter_go", "language"),
        "rust": ("tree_sitter_rust", "language"),
        "java": ("tree_sitter_java", "language"),
    }
)
"""Language → (module of its grammar wheel, the function returning its compiled grammar)."""

_WHITESPACE: Final = re.compile(r"\s+")

_languages: dict[str, Language] = {}
_languages_lock: Final = threading.Lock()
_thread_state: Final = threading.local()


# --------------------------------------------------------------------------------------------------------------
# public API


def language_of(path: str) -> str | None:
    """The language :func:`chunk_code` parses ``path`` as (by its extension, case-insensitive), or None."""
    name = path.rsplit("/", 1)[-1]
    dot = name.rfind(".")
    if dot <= 0:
        return None
    return LANGUAGES.get(name[dot:].lower())


def chunk_code(path: str, text: str, *, window_lines: int = 60) -> tuple[list[Chunk], str | None]:
    """Chunk one source file into definitions and line windows; never raises.

    :param path: the file's path in the space ('/'-separated); its extension picks the language.
    :param text: the file's text.
    :param window_lines: the most lines in one window chunk (code outside definitions, unknown languages).
    :return: the chunks, in the order of their first lines, and a note when the result is degraded: the
        parser failed or the grammar is missing (the whole file became line windows), or the file has syntax
        errors (its definitions may be incomplete). None otherwise.
    """
    lines = _split_lines(text)
    if not any(line.strip() for line in lines):
        return [], None
    window_lines = max(1, window_lines)
    language = language_of(path)
    if language is None:
        return _windows(path, lines, range(len(lines)), window_lines), None
    try:
        parser = _parser(language)
    except Exception as exc:  # an absent or broken grammar wheel: the file is still indexed
        note = f"{language} grammar unavailable ({_describe(exc)}); indexed as line windows"
        return _windows(path, lines, range(len(lines)), window_lines), note
    try:
        chunks, has_errors = _parsed_chunks(path, text, lines, parser, language, window_lines)
    except Exception as exc:  # a parser or grammar bug must not lose the file
        note = f"{language} parser failed: {_describe(exc)}; indexed as line windows"
        return _windows(path, lines, range(len(lines)), window_lines), note
    return chunks, f"{language} source has syntax errors; definitions may be incomplete" if has_errors else None


def _parsed_chunks(
    path: str, text: str, lines: list[str], parser: Parser, language: str, window_lines: int
) -> tuple[list[Chunk], bool]:
    """The definition and window chunks of a parsed file, and whether its syntax tree holds errors."""
    tree = parser.parse(text.encode("utf-8", errors="replace"))
    definitions = _collect(tree.root_node, _SPECS[language])
    chunks = _definition_chunks(path, lines, definitions)
    covered = _covered_rows(definitions)
    chunks += _windows(path, lines, (row for row in range(len(lines)) if row not in covered), window_lines)
    chunks.sort(key=lambda chunk: chunk.first_line)
    return _unique_anchors(chunks), tree.root_node.has_error


# --------------------------------------------------------------------------------------------------------------
# grammars and parsers


def _parser(language: str) -> Parser:
    """This thread's parser for ``language`` (tree-sitter parsers must not be shared between threads)."""
    parsers: dict[str, Parser] | None = getattr(_thread_state, "parsers", None)
    if parsers is None:
        parsers = _thread_state.parsers = {}
    parser = parsers.get(language)
    if parser is None:
        from tree_sitter import Parser

        parser = parsers[language] = Parser(_language(language))
    return parser


def _language(language: str) -> Language:
    """The compiled grammar of ``language``, loaded from its wheel once per process."""
    with _languages_lock:
        loaded = _languages.get(language)
        if loaded is None:
            from tree_sitter import Language

            module_name, function = _GRAMMARS[language]
            factory: Callable[[], object] = getattr(importlib.import_module(module_name), function)
            loaded = _languages[language] = Language(factory())
        return loaded


def _describe(exc: BaseException) -> str:
    """``Type: message`` of an exception, on one line."""
    message = _WHITESPACE.sub(" ", str(exc)).strip()
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


# --------------------------------------------------------------------------------------------------------------
# definitions in a syntax tree


@dataclass(slots=True)
class _Definition:
    """A definition found in the tree.

    Rows are 0-based: ``head`` is its first own row (a decorator's, the keyword's), ``start`` the first row
    of the comments and attributes above it, ``end`` its last row.
    """

    name: str
    head: int
    start: int
    end: int
    children: list[_Definition] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Spec:
    """How to find definitions in one language's syntax tree.

    :ivar name: a node's own (unqualified) definition name, or None when it is not a definition.
    :ivar wrappers: parent node types that belong to the definition they hold (``export``, decorators).
    :ivar leading: sibling node types above a definition that belong to it (comments, attributes).
    """

    name: Callable[[Node], str | None]
    wrappers: frozenset[str]
    leading: frozenset[str]


def _collect(root: Node, spec: _Spec) -> list[_Definition]:
    """The top-level definitions under ``root``, each holding its nested ones, in source order."""
    roots: list[_Definition] = []
    stack: list[tuple[Node, _Definition | None]] = [(root, None)]
    while stack:  # iterative: deeply nested code must not exhaust the interpreter's stack
        node, parent = stack.pop()
        definition = _definition_at(node, parent, spec)
        if definition is not None:
            (parent.children if parent is not None else roots).append(definition)
            parent = definition
        stack.extend((child, parent) for child in reversed(node.children) if child.is_named)
    return roots


def _definition_at(node: Node, parent: _Definition | None, spec: _Spec) -> _Definition | None:
    """The definition ``node`` is, qualified by ``parent``; None if it is none (or shares its parent's first row)."""
    name = spec.name(node)
    if not name:
        return None
    outer = _outer(node, spec)
    first_row = outer.start_point.row
    if parent is not None and first_row <= parent.head:
        return None  # on its parent's first line: kept inside the parent's chunk
    start = _leading_start(outer, spec.leading)
    if parent is not None:
        start = max(start, parent.head + 1)
    qualified = f"{parent.name}.{name}" if parent is not None else name
    return _Definition(qualified, first_row, start, _last_row(outer))


def _outer(node: Node, spec: _Spec) -> Node:
    """``node`` with the wrapping nodes that belong to it alone (``export``, decorators, a one-type group)."""
    while (parent := node.parent) is not None and parent.type in spec.wrappers:
        if any(sibling != node and spec.name(sibling) for sibling in parent.named_children):
            break  # a group of several definitions (Go's ``type ( A int; B string )``): each is its own
        node = parent
    return node


def _leading_start(node: Node, leading: frozenset[str]) -> int:
    """The first row of ``node`` including the comments and attributes written immediately above it."""
    start = node.start_point.row
    sibling = node.prev_sibling
    while sibling is not None and sibling.type in leading and _last_row(sibling) >= start - 1:
        if _is_inner(sibling):
            break
        before = sibling.prev_sibling
        if before is not None and _last_row(before) >= sibling.start_point.row:
            break  # a comment trailing the code before it
        start = min(start, sibling.start_point.row)
        sibling = before
    return start


def _is_inner(node: Node) -> bool:
    """A Rust inner attribute or doc comment (``#![…]``, ``//!``): it documents the enclosing item."""
    return node.type == "inner_attribute_item" or node.child_by_field_name("inner") is not None


def _last_row(node: Node) -> int:
    """The last row holding any of ``node``'s text (a node ending in a newline ends on the row before)."""
    end = node.end_point
    if end.column == 0 and end.row > node.start_point.row:
        return end.row - 1
    return end.row


def _covered_rows(definitions: list[_Definition]) -> set[int]:
    """The rows inside any of the (top-level) ``definitions``."""
    return {row for definition in definitions for row in range(definition.start, definition.end + 1)}


def _walk(definitions: list[_Definition]) -> Iterator[_Definition]:
    """Every definition, each followed by its nested ones, in source order."""
    stack = list(reversed(definitions))
    while stack:
        definition = stack.pop()
        yield definition
        stack.extend(reversed(definition.children))


# --------------------------------------------------------------------------------------------------------------
# node names, per language


def _text(node: Node | None) -> str:
    """A node's source text, whitespace removed (a name must make an anchor); empty for None."""
    if node is None or node.text is None:
        return ""
    return _WHITESPACE.sub("", node.text.decode("utf-8", errors="replace"))


def _field_name(node: Node) -> str:
    """The text of ``node``'s ``name`` field (quotes stripped, for ``declare module "x"``)."""
    return _text(node.child_by_field_name("name")).strip("'\"`")


def _python_name(node: Node) -> str | None:
    """Python: functions (methods) and classes."""
    return _field_name(node) if node.type in {"function_definition", "class_definition"} else None


_JS_DECLARATIONS: Final = frozenset(
    {
        "function_declaration",
        "generator_function_declaration",
        "class_declaration",
        "abstract_class_declaration",
        "interface_declaration",
        "type_alias_declaration",
        "enum_declaration",
        "internal_module",
        "module",
    }
)
_JS_FUNCTION_VALUES: Final = frozenset(
    {"arrow_function", "function_expression", "function", "generator_function", "class"}
)


def _js_name(node: Node) -> str | None:
    """JavaScript/TypeScript: declarations, class members, and functions bound at the top of the module."""
    kind = node.type
    if kind in _JS_DECLARATIONS:
        return _field_name(node)
    if node.parent is not None and node.parent.type == "class_body":
        return _js_member_name(node)
    if kind == "variable_declarator" and _is_top_level_declarator(node) and _holds_function(node, "value"):
        name = node.child_by_field_name("name")
        return _text(name) if name is not None and name.type == "identifier" else None
    if kind == "assignment_expression" and _is_top_level_statement(node) and _holds_function(node, "right"):
        return _text(node.child_by_field_name("left"))  # ``res.send = function send(body) { … }``
    return None


def _js_member_name(node: Node) -> str | None:
    """A class's methods and its fields holding a function (``handle = () => { … }``)."""
    if node.type == "method_definition":
        return _field_name(node)
    if node.type in {"field_definition", "public_field_definition"} and _holds_function(node, "value"):
        return _text(node.child_by_field_name("property") or node.child_by_field_name("name"))
    return None


def _holds_function(node: Node, value: str) -> bool:
    """``node``'s field ``value`` is a function or class expression."""
    held = node.child_by_field_name(value)
    return held is not None and held.type in _JS_FUNCTION_VALUES


def _is_top_level_declarator(node: Node) -> bool:
    """The only declarator of a ``const``/``let``/``var`` at the top of the module (maybe exported)."""
    declaration = node.parent
    if declaration is None or declaration.type not in {"lexical_declaration", "variable_declaration"}:
        return False
    if sum(1 for child in declaration.named_children if child.type == "variable_declarator") != 1:
        return False
    holder = declaration.parent
    if holder is not None and holder.type == "export_statement":
        holder = holder.parent
    return _is_program(holder)


def _is_top_level_statement(node: Node) -> bool:
    """``node`` is a statement of its own at the top of the module."""
    statement = node.parent
    return statement is not None and statement.type == "expression_statement" and _is_program(statement.parent)


def _is_program(node: Node | None) -> bool:
    """``node`` is the module itself."""
    return node is not None and node.type == "program"


def _go_name(node: Node) -> str | None:
    """Go: functions, methods (``Type.Method``) and type declarations."""
    kind = node.type
    if kind in {"function_declaration", "type_spec", "type_alias"}:
        return _field_name(node)
    if kind == "method_declaration":
        name = _field_name(node)
        receiver = _first_of_type(node.child_by_field_name("receiver"), "type_identifier")
        return f"{_text(receiver)}.{name}" if receiver is not None and name else name
    return None


def _first_of_type(node: Node | None, kind: str) -> Node | None:
    """The first node of type ``kind`` in ``node``'s subtree (pre-order), or None."""
    stack = [node] if node is not None else []
    while stack:
        current = stack.pop()
        if current.type == kind:
            return current
        stack.extend(reversed(current.named_children))
    return None


_RUST_ITEMS: Final = frozenset(
    {"function_item", "struct_item", "enum_item", "union_item", "trait_item", "type_item", "macro_definition"}
)


def _rust_name(node: Node) -> str | None:
    """Rust: fns, structs, enums, unions, traits, type aliases, macros, inline modules and impl blocks."""
    kind = node.type
    if kind in _RUST_ITEMS:
        return _field_name(node)
    if kind == "mod_item":
        return _field_name(node) if node.child_by_field_name("body") is not None else None
    if kind == "impl_item":
        return _rust_type_name(node.child_by_field_name("type"))
    return None


def _rust_type_name(node: Node | None) -> str | None:
    """The bare name of an impl's type: ``Store`` for ``Store<T>``, ``crate::a::Store`` or ``&Store``."""
    while node is not None and node.type not in {"type_identifier", "primitive_type"}:
        if node.type == "generic_type":
            node = node.child_by_field_name("type")
        elif node.type == "scoped_type_identifier":
            node = node.child_by_field_name("name")
        elif node.type == "reference_type":
            node = node.child_by_field_name("type")
        else:
            return _text(node) or None
    return _text(node) or None


_JAVA_DECLARATIONS: Final = frozenset(
    {
        "class_declaration",
        "interface_declaration",
        "enum_declaration",
        "record_declaration",
        "annotation_type_declaration",
        "method_declaration",
        "constructor_declaration",
    }
)


def _java_name(node: Node) -> str | None:
    """Java: classes, interfaces, enums, records, annotation types, methods and constructors with a body."""
    if node.type not in _JAVA_DECLARATIONS:
        return None
    if node.type == "method_declaration" and node.child_by_field_name("body") is None:
        return None  # abstract or an interface's: a line of its type's chunk
    return _field_name(node)


_JS_SPEC: Final = _Spec(
    _js_name,
    wrappers=frozenset({"export_statement", "ambient_declaration", "expression_statement", "lexical_declaration"})
    | frozenset({"variable_declaration"}),
    leading=frozenset({"comment", "decorator"}),
)
_SPECS: Final[Mapping[str, _Spec]] = MappingProxyType(
    {
        "python": _Spec(_python_name, frozenset({"decorated_definition"}), frozenset({"comment"})),
        "javascript": _JS_SPEC,
        "typescript": _JS_SPEC,
        "tsx": _JS_SPEC,
        "go": _Spec(_go_name, frozenset({"type_declaration"}), frozenset({"comment"})),
        "rust": _Spec(_rust_name, frozenset(), frozenset({"line_comment", "block_comment", "attribute_item"})),
        "java": _Spec(_java_name, frozenset(), frozenset({"line_comment", "block_comment"})),
    }
)


# --------------------------------------------------------------------------------------------------------------
# chunks


def _split_lines(text: str) -> list[str]:
    """The file's lines as tree-sitter counts them (split at ``\\n`` only); no empty line after a final newline."""
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines


def _definition_chunks(path: str, lines: list[str], definitions: list[_Definition]) -> list[Chunk]:
    """One chunk (or several parts) per definition, nested ones excluded from their parent's text."""
    seen: dict[str, int] = {}
    chunks: list[Chunk] = []
    for definition in _walk(definitions):
        anchor = dedupe_anchor(definition.name, seen, style="tilde")
        parts = _pieces([(row, lines[row]) for row in _own_rows(definition, lines)])
        for number, (first, last, text) in enumerate(parts, start=1):
            first = definition.start if number == 1 else first
            last = definition.end if number == len(parts) else last
            chunks.append(
                Chunk(path, part_anchor(anchor, number), definition.name, text, first + 1, last + 1, "definition")
            )
    return chunks


def _own_rows(definition: _Definition, lines: list[str]) -> list[int]:
    """The rows of ``definition`` outside its nested definitions, runs of blank rows made one, none at the end."""
    nested = _covered_rows(definition.children)
    rows: list[int] = []
    for row in range(definition.start, definition.end + 1):
        if row in nested or (not lines[row].strip() and rows and not lines[rows[-1]].strip()):
            continue
        rows.append(row)
    return _trim_blank(rows, lines)


def _windows(path: str, lines: list[str], rows: Iterable[int], window_lines: int) -> list[Chunk]:
    """Window chunks over the runs of consecutive ``rows``: at most ``window_lines`` lines each, blank ones skipped."""
    name = path.rsplit("/", 1)[-1]
    chunks: list[Chunk] = []
    for run in _runs(rows):
        for window in _windows_of_run(run, lines, window_lines):
            span, number = (-1, -1), 0
            for first, last, text in _pieces([(row, lines[row]) for row in window]):
                # a window too long is cut between lines into windows of its own; pieces of one long line are parts
                number = number + 1 if (first, last) == span else 1
                span = (first, last)
                anchor = part_anchor(f"L{first + 1}-{last + 1}", number)
                title = f"{name} lines {first + 1}-{last + 1}"
                chunks.append(Chunk(path, anchor, title, text, first + 1, last + 1, "window"))
    return chunks


def _runs(rows: Iterable[int]) -> Iterator[list[int]]:
    """Maximal runs of consecutive numbers in the ascending ``rows``."""
    run: list[int] = []
    for row in rows:
        if run and row != run[-1] + 1:
            yield run
            run = []
        run.append(row)
    if run:
        yield run


def _windows_of_run(run: list[int], lines: list[str], window_lines: int) -> Iterator[list[int]]:
    """``run`` cut into windows of at most ``window_lines`` rows, none starting or ending with a blank line."""
    window: list[int] = []
    for row in run:
        if not window and not lines[row].strip():
            continue
        window.append(row)
        if len(window) == window_lines:
            yield _trim_blank(window, lines)
            window = []
    if window := _trim_blank(window, lines):
        yield window


def _trim_blank(window: list[int], lines: list[str]) -> list[int]:
    """``window`` without its trailing blank rows."""
    end = len(window)
    while end and not lines[window[end - 1]].strip():
        end -= 1
    return window[:end]


def _pieces(numbered: list[tuple[int, str]]) -> list[tuple[int, int, str]]:
    """``(first row, last row, text)`` pieces of numbered lines, each text at most MAX_CHUNK_CHARS long.

    Lines are joined with newlines and cut between lines; a line longer than the limit is cut into pieces.
    """
    pieces: list[tuple[int, int, str]] = []
    rows: list[int] = []
    texts: list[str] = []
    size = -1
    for row, line in numbered:
        if rows and size + 1 + len(line) > MAX_CHUNK_CHARS:
            pieces.append((rows[0], rows[-1], "\n".join(texts)))
            rows, texts, size = [], [], -1
        if len(line) > MAX_CHUNK_CHARS:
            pieces.extend((row, row, line[at : at + MAX_CHUNK_CHARS]) for at in range(0, len(line), MAX_CHUNK_CHARS))
            continue
        rows.append(row)
        texts.append(line)
        size += 1 + len(line)
    if rows:
        pieces.append((rows[0], rows[-1], "\n".join(texts)))
    return pieces


def _unique_anchors(chunks: list[Chunk]) -> list[Chunk]:
    """``chunks`` with any anchor repeated (a definition name that looks like a window or part) suffixed ``~n``."""
    seen: dict[str, int] = {}
    unique: list[Chunk] = []
    for chunk in chunks:
        anchor = dedupe_anchor(chunk.anchor, seen, style="tilde")
        if anchor != chunk.anchor:
            chunk = Chunk(chunk.path, anchor, chunk.title, chunk.text, chunk.first_line, chunk.last_line, chunk.kind)
        unique.append(chunk)
    return unique
