"""The source-code chunker: definitions by tree-sitter, line windows for the rest (berth.knowledge.code)."""

from __future__ import annotations

import itertools
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from textwrap import dedent

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from berth.knowledge import code
from berth.knowledge.chunks import MAX_CHUNK_CHARS, Chunk, base_anchor
from berth.knowledge.code import LANGUAGES, chunk_code, language_of

Row = tuple[str, str, str, int, int]
"""(kind, anchor, title, first line, last line) of a chunk."""


def rows(chunks: list[Chunk]) -> list[Row]:
    return [(chunk.kind, chunk.anchor, chunk.title, chunk.first_line, chunk.last_line) for chunk in chunks]


def by_anchor(chunks: list[Chunk]) -> dict[str, Chunk]:
    return {chunk.anchor: chunk for chunk in chunks}


def source(text: str) -> str:
    return dedent(text).lstrip("\n")


PYTHON = source(
    '''
    """A store of documents."""

    import os
    from typing import Any

    LIMIT = 10


    class Store:
        """Documents in memory."""

        kind = "memory"

        def __init__(self, root: str) -> None:
            self.root = root

        # Search the store.
        @staticmethod
        def search(query: str) -> list[str]:
            def score(doc: str) -> int:
                return doc.count(query)

            return sorted([], key=score)


    def main(argv: Any = None) -> None:
        print(Store(os.getcwd()), LIMIT)


    if __name__ == "__main__":
        main()
    '''
)

JAVASCRIPT = source(
    """
    import { readFile } from "node:fs/promises";

    const RETRIES = 3;

    /** Loads the config. */
    export async function loadConfig(path) {
      const text = await readFile(path, "utf8");
      return JSON.parse(text);
    }

    export const retry = async (fn) => {
      for (let i = 0; i < RETRIES; i++) {
        try { return await fn(); } catch (e) { /* again */ }
      }
    };

    class Cache extends Map {
      hits = 0;

      get(key) {
        this.hits++;
        return super.get(key);
      }

      static create() {
        return new Cache();
      }
    }

    export default Cache;
    """
)

TYPESCRIPT = source(
    """
    import type { Request } from "./http";

    export interface Handler {
      handle(request: Request): Promise<Response>;
    }

    export type Middleware = (next: Handler) => Handler;

    export enum Method {
      Get = "GET",
      Post = "POST",
    }

    export class Router implements Handler {
      private routes = new Map<string, Handler>();

      @logged
      async handle(request: Request): Promise<Response> {
        return this.routes.get(request.url)!.handle(request);
      }

      add = (path: string, handler: Handler): void => {
        this.routes.set(path, handler);
      };
    }

    export const compose = function (...middleware: Middleware[]): Middleware {
      return (next) => middleware.reduceRight((handler, m) => m(handler), next);
    };
    """
)

TSX = source(
    """
    import React from "react";

    type Props = { name: string };

    export function Greeting({ name }: Props) {
      return <h1>Hello, {name}!</h1>;
    }

    export const Farewell = ({ name }: Props) => (
      <p>Goodbye, {name}.</p>
    );
    """
)

GO = source(
    """
    package store

    import (
        "errors"
        "sync"
    )

    // ErrMissing is returned for an unknown key.
    var ErrMissing = errors.New("missing")

    // Store keeps values in memory.
    type Store struct {
        mu     sync.Mutex
        values map[string]string
    }

    type (
        Key   string
        Value = string
    )

    // Get returns the value of key.
    func (s *Store) Get(key string) (string, error) {
        s.mu.Lock()
        defer s.mu.Unlock()
        if v, ok := s.values[key]; ok {
            return v, nil
        }
        return "", ErrMissing
    }

    func New() *Store {
        return &Store{values: map[string]string{}}
    }
    """
)

RUST = source(
    """
    //! An in-memory store.
    use std::collections::HashMap;

    /// A store of values.
    #[derive(Debug, Default)]
    pub struct Store<V> {
        values: HashMap<String, V>,
    }

    pub enum Event {
        Put(String),
        Removed,
    }

    impl<V: Clone> Store<V> {
        const LIMIT: usize = 100;

        /// Makes an empty store.
        pub fn new() -> Self {
            Self { values: HashMap::new() }
        }

        pub fn get(&self, key: &str) -> Option<V> {
            self.values.get(key).cloned()
        }
    }

    pub trait Backend {
        fn load(&self) -> Vec<u8>;
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn empty() {
            assert!(super::Store::<u8>::new().values.is_empty());
        }
    }
    """
)

JAVA = source(
    """
    package org.example.store;

    import java.util.HashMap;
    import java.util.Map;

    /** A store of values. */
    public class Store<V> {
        private final Map<String, V> values = new HashMap<>();

        public Store() {}

        /** The value of key, or null. */
        @Override
        public V get(String key) {
            return values.get(key);
        }

        static final class Entry {
            String key;

            String describe() {
                return key;
            }
        }

        interface Listener {
            void changed(String key);
        }
    }

    enum Color { RED, GREEN }
    """
)


SAMPLES: dict[str, tuple[str, list[Row]]] = {
    "src/store.py": (
        PYTHON,
        [
            ("window", "L1-6", "store.py lines 1-6", 1, 6),
            ("definition", "Store", "Store", 9, 23),
            ("definition", "Store.__init__", "Store.__init__", 14, 15),
            ("definition", "Store.search", "Store.search", 17, 23),
            ("definition", "Store.search.score", "Store.search.score", 20, 21),
            ("definition", "main", "main", 26, 27),
            ("window", "L30-31", "store.py lines 30-31", 30, 31),
        ],
    ),
    "web/config.js": (
        JAVASCRIPT,
        [
            ("window", "L1-3", "config.js lines 1-3", 1, 3),
            ("definition", "loadConfig", "loadConfig", 5, 9),
            ("definition", "retry", "retry", 11, 15),
            ("definition", "Cache", "Cache", 17, 28),
            ("definition", "Cache.get", "Cache.get", 20, 23),
            ("definition", "Cache.create", "Cache.create", 25, 27),
            ("window", "L30-30", "config.js lines 30-30", 30, 30),
        ],
    ),
    "web/router.ts": (
        TYPESCRIPT,
        [
            ("window", "L1-1", "router.ts lines 1-1", 1, 1),
            ("definition", "Handler", "Handler", 3, 5),
            ("definition", "Middleware", "Middleware", 7, 7),
            ("definition", "Method", "Method", 9, 12),
            ("definition", "Router", "Router", 14, 25),
            ("definition", "Router.handle", "Router.handle", 17, 20),
            ("definition", "Router.add", "Router.add", 22, 24),
            ("definition", "compose", "compose", 27, 29),
        ],
    ),
    "web/greeting.tsx": (
        TSX,
        [
            ("window", "L1-1", "greeting.tsx lines 1-1", 1, 1),
            ("definition", "Props", "Props", 3, 3),
            ("definition", "Greeting", "Greeting", 5, 7),
            ("definition", "Farewell", "Farewell", 9, 11),
        ],
    ),
    "store/store.go": (
        GO,
        [
            ("window", "L1-9", "store.go lines 1-9", 1, 9),
            ("definition", "Store", "Store", 11, 15),
            ("window", "L17-17", "store.go lines 17-17", 17, 17),
            ("definition", "Key", "Key", 18, 18),
            ("definition", "Value", "Value", 19, 19),
            ("window", "L20-20", "store.go lines 20-20", 20, 20),
            ("definition", "Store.Get", "Store.Get", 22, 30),
            ("definition", "New", "New", 32, 34),
        ],
    ),
    "src/store.rs": (
        RUST,
        [
            ("window", "L1-2", "store.rs lines 1-2", 1, 2),
            ("definition", "Store", "Store", 4, 8),
            ("definition", "Event", "Event", 10, 13),
            ("definition", "Store~2", "Store", 15, 26),  # the impl block, after the struct of the same name
            ("definition", "Store.new", "Store.new", 18, 21),
            ("definition", "Store.get", "Store.get", 23, 25),
            ("definition", "Backend", "Backend", 28, 30),
            ("definition", "tests", "tests", 32, 38),
            ("definition", "tests.empty", "tests.empty", 34, 37),
        ],
    ),
    "src/main/java/org/example/store/Store.java": (
        JAVA,
        [
            ("window", "L1-4", "Store.java lines 1-4", 1, 4),
            ("definition", "Store", "Store", 6, 29),
            ("definition", "Store.Store", "Store.Store", 10, 10),
            ("definition", "Store.get", "Store.get", 12, 16),
            ("definition", "Store.Entry", "Store.Entry", 18, 24),
            ("definition", "Store.Entry.describe", "Store.Entry.describe", 21, 23),
            ("definition", "Store.Listener", "Store.Listener", 26, 28),
            ("definition", "Color", "Color", 31, 31),
        ],
    ),
}


def non_blank(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.strip()]


# --------------------------------------------------------------------------------------------------------------
# one realistic file per language


@pytest.mark.parametrize("path", sorted(SAMPLES))
def test_a_source_file_is_chunked_by_its_definitions(path: str) -> None:
    text, expected = SAMPLES[path]
    chunks, note = chunk_code(path, text)
    assert note is None
    assert rows(chunks) == expected
    assert all(chunk.path == path for chunk in chunks)


@pytest.mark.parametrize("path", sorted(SAMPLES))
def test_every_line_is_in_exactly_one_chunk_text(path: str) -> None:
    """Nested definitions are cut out of their parents: no line of the file is indexed twice, none is lost."""
    text, _ = SAMPLES[path]
    chunks, _ = chunk_code(path, text)
    assert sorted(line for chunk in chunks for line in non_blank(chunk.text)) == sorted(non_blank(text))


def test_a_class_chunk_holds_its_own_lines_and_each_method_is_a_chunk() -> None:
    chunks = by_anchor(chunk_code("src/store.py", PYTHON)[0])
    assert chunks["Store"].text == 'class Store:\n    """Documents in memory."""\n\n    kind = "memory"'
    assert chunks["Store.__init__"].text == "    def __init__(self, root: str) -> None:\n        self.root = root"
    # the comment and decorator above a method are the method's; its nested function is a chunk of its own
    assert chunks["Store.search"].text == (
        "    # Search the store.\n    @staticmethod\n    def search(query: str) -> list[str]:\n\n"
        "        return sorted([], key=score)"
    )
    assert "doc.count(query)" in chunks["Store.search.score"].text
    assert "self.root = root" not in chunks["Store"].text


def test_doc_comments_and_attributes_above_a_definition_are_its_own() -> None:
    rust = by_anchor(chunk_code("src/store.rs", RUST)[0])
    assert rust["Store"].text.startswith("/// A store of values.\n#[derive(Debug, Default)]\npub struct Store<V> {")
    assert rust["Store~2"].text == "impl<V: Clone> Store<V> {\n    const LIMIT: usize = 100;\n\n}"
    assert rust["tests.empty"].text.startswith("    #[test]\n    fn empty() {")
    assert rust["L1-2"].text == "//! An in-memory store.\nuse std::collections::HashMap;"  # the crate's doc
    java = by_anchor(chunk_code("Store.java", JAVA)[0])
    assert java["Store.get"].text.startswith("    /** The value of key, or null. */\n    @Override\n")
    assert java["Store.Listener"].text == "    interface Listener {\n        void changed(String key);\n    }"
    go = by_anchor(chunk_code("store.go", GO)[0])
    assert go["Store.Get"].text.startswith("// Get returns the value of key.\nfunc (s *Store) Get(")
    ts = by_anchor(chunk_code("router.ts", TYPESCRIPT)[0])
    assert ts["Router.handle"].text.startswith("  @logged\n  async handle(")
    assert ts["Router"].text == (
        "export class Router implements Handler {\n  private routes = new Map<string, Handler>();\n\n}"
    )


def test_javascript_functions_bound_at_the_top_of_a_module() -> None:
    text = source(
        """
        var app = exports = module.exports = {};

        app.init = function init() {
          const settings = { get() { return 1; } };
          const helper = () => settings;
          return helper();
        };

        Router.prototype.route = function (path) { return path; };

        let a = () => 1, b = () => 2;

        export default function () {}
        """
    )
    chunks, note = chunk_code("lib/application.js", text)
    assert note is None
    assert rows(chunks) == [
        ("window", "L1-1", "application.js lines 1-1", 1, 1),
        ("definition", "app.init", "app.init", 3, 7),
        ("definition", "Router.prototype.route", "Router.prototype.route", 9, 9),
        ("window", "L11-13", "application.js lines 11-13", 11, 13),  # two functions in one declaration
    ]


# --------------------------------------------------------------------------------------------------------------
# anchors, parts and windows


def test_a_repeated_name_gets_a_tilde_number() -> None:
    text = source(
        """
        from typing import overload


        @overload
        def parse(value: str) -> int: ...
        @overload
        def parse(value: bytes) -> int: ...
        def parse(value: str | bytes) -> int:
            return int(value)


        class Codec:
            def encode(self) -> None:
                pass

            def encode(self) -> None:  # redefined
                pass
        """
    )
    chunks, _ = chunk_code("codec.py", text)
    assert [(chunk.anchor, chunk.title, chunk.first_line) for chunk in chunks if chunk.kind == "definition"] == [
        ("parse", "parse", 4),
        ("parse~2", "parse", 6),
        ("parse~3", "parse", 8),
        ("Codec", "Codec", 12),
        ("Codec.encode", "Codec.encode", 13),
        ("Codec.encode~2", "Codec.encode", 16),
    ]
    java = "class A {\n  void f(int a) {}\n  void f(String s) {}\n}\n"
    assert [chunk.anchor for chunk in chunk_code("A.java", java)[0]] == ["A", "A.f", "A.f~2"]


def test_a_definition_longer_than_a_chunk_is_split_into_parts_at_line_boundaries() -> None:
    body = [f"    total += {index} * len('{'x' * 40}')" for index in range(300)]
    text = "import os\n\n\ndef big(total: int) -> int:\n" + "\n".join(body) + "\n    return total\n\n\nDONE = 1\n"
    chunks, note = chunk_code("big.py", text)
    assert note is None
    parts = [chunk for chunk in chunks if chunk.kind == "definition"]
    assert len(parts) > 3
    assert [chunk.anchor for chunk in parts] == ["big"] + [f"big~p{number}" for number in range(2, len(parts) + 1)]
    assert {chunk.title for chunk in parts} == {"big"}
    assert {base_anchor(chunk.anchor) for chunk in parts} == {"big"}
    assert all(len(chunk.text) <= MAX_CHUNK_CHARS for chunk in parts)
    assert parts[0].first_line == 4
    assert parts[-1].last_line == 305
    assert "\n".join(chunk.text for chunk in parts) == "\n".join(text.split("\n")[3:305])  # whole lines, in order
    for before, after in itertools.pairwise(parts):
        assert after.first_line == before.last_line + 1
    assert [chunk.anchor for chunk in chunks if chunk.kind == "window"] == ["L1-1", "L308-308"]


def test_a_line_longer_than_a_chunk_is_cut() -> None:
    long_line = "x = '" + "a" * (2 * MAX_CHUNK_CHARS + 10) + "'"
    chunks, _ = chunk_code("data.py", long_line + "\n")
    assert [(chunk.anchor, chunk.first_line, chunk.last_line) for chunk in chunks] == [
        ("L1-1", 1, 1),
        ("L1-1~p2", 1, 1),
        ("L1-1~p3", 1, 1),
    ]
    assert "".join(chunk.text for chunk in chunks) == long_line
    assert all(len(chunk.text) <= MAX_CHUNK_CHARS for chunk in chunks)

    chunks, _ = chunk_code("data.py", f"def f():\n    {long_line}\n    return x\n")
    assert [chunk.anchor for chunk in chunks] == ["f", "f~p2", "f~p3", "f~p4", "f~p5"]
    assert all(len(chunk.text) <= MAX_CHUNK_CHARS for chunk in chunks)
    assert (chunks[0].first_line, chunks[-1].last_line) == (1, 3)


def test_an_unknown_extension_is_indexed_as_line_windows() -> None:
    text = "\n".join(f"line {number}" for number in range(1, 131)) + "\n"
    chunks, note = chunk_code("notes/todo.xyz", text, window_lines=60)
    assert note is None
    assert rows(chunks) == [
        ("window", "L1-60", "todo.xyz lines 1-60", 1, 60),
        ("window", "L61-120", "todo.xyz lines 61-120", 61, 120),
        ("window", "L121-130", "todo.xyz lines 121-130", 121, 130),
    ]
    assert chunks[0].text == "\n".join(f"line {number}" for number in range(1, 61))
    makefile, _ = chunk_code("Makefile", "\n\nall:\n\tmake build\n\n\n")
    assert rows(makefile) == [("window", "L3-4", "Makefile lines 3-4", 3, 4)]


def test_windows_skip_blank_lines_at_their_edges_and_stay_within_the_size_limit() -> None:
    wide = "\n".join("#" + "=" * 99 for _ in range(60))  # 60 lines of 100 characters: 6,000 in all
    chunks, _ = chunk_code("wide.txt", "\n\n\n" + wide + "\n\n\n\n" + "tail\n\n")
    assert [chunk.anchor for chunk in chunks] == ["L4-42", "L43-63", "L67-67"]
    assert all(len(chunk.text) <= MAX_CHUNK_CHARS for chunk in chunks)


@pytest.mark.parametrize("text", ["", "\n", "   \n\t\n", "\r\n\r\n"])
def test_an_empty_file_has_no_chunks(text: str) -> None:
    assert chunk_code("empty.py", text) == ([], None)
    assert chunk_code("empty.txt", text) == ([], None)


def test_a_file_with_syntax_errors_still_yields_its_definitions() -> None:
    text = source(
        """
        import os


        def good() -> int:
            return 1


        def broken(:
            return


        class Fine:
            def method(self) -> None:
                pass
        """
    )
    chunks, note = chunk_code("broken.py", text)
    assert note is not None
    assert "syntax errors" in note
    anchors = [chunk.anchor for chunk in chunks]
    assert {"good", "Fine", "Fine.method"} <= set(anchors)
    assert len(anchors) == len(set(anchors))
    assert sorted(non_blank("\n".join(chunk.text for chunk in chunks))) == sorted(non_blank(text))


# --------------------------------------------------------------------------------------------------------------
# languages, failures, threads


def test_languages_by_extension() -> None:
    assert language_of("src/app.py") == "python"
    assert language_of("SRC/APP.PY") == "python"
    assert language_of("web/a.jsx") == "javascript"
    assert language_of("web/a.mjs") == "javascript"
    assert language_of("web/a.ts") == "typescript"
    assert language_of("web/a.tsx") == "tsx"
    assert language_of("cmd/main.go") == "go"
    assert language_of("src/lib.rs") == "rust"
    assert language_of("A.java") == "java"
    assert language_of("Makefile") is None
    assert language_of(".bashrc") is None
    assert language_of("dist/app.tar.gz") is None
    assert language_of("dir.py/README") is None
    assert set(LANGUAGES.values()) == {"python", "javascript", "typescript", "tsx", "go", "rust", "java"}
    assert all(extension.startswith(".") and extension == extension.lower() for extension in LANGUAGES)


def test_a_missing_grammar_falls_back_to_windows_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(language: str) -> object:
        raise ModuleNotFoundError(f"No module named 'tree_sitter_{language}'")

    monkeypatch.setattr(code, "_parser", missing)
    chunks, note = chunk_code("src/store.py", PYTHON)
    assert note == (
        "python grammar unavailable (ModuleNotFoundError: No module named 'tree_sitter_python'); "
        "indexed as line windows"
    )
    assert [(chunk.kind, chunk.anchor) for chunk in chunks] == [("window", "L1-31")]


def test_a_failing_parser_falls_back_to_windows_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(*args: object) -> object:
        raise RuntimeError("boom")

    monkeypatch.setattr(code, "_collect", failing)
    chunks, note = chunk_code("src/store.py", PYTHON, window_lines=10)
    assert note == "python parser failed: RuntimeError: boom; indexed as line windows"
    assert [chunk.anchor for chunk in chunks] == ["L1-10", "L12-21", "L23-31"]  # no window starts on a blank line


def test_grammars_load_from_the_installed_wheels_without_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: object, **kwargs: object) -> object:
        raise AssertionError("the code chunker reached for the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(code, "_languages", {})  # load every grammar afresh
    monkeypatch.setattr(code, "_thread_state", threading.local())
    for path, (text, expected) in SAMPLES.items():
        assert rows(chunk_code(path, text)[0]) == expected


def test_worker_threads_chunk_concurrently() -> None:
    jobs = [(path, text) for path, (text, _) in SAMPLES.items()] * 8
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda job: chunk_code(*job), jobs))
    assert results == [chunk_code(path, text) for path, text in jobs]


# --------------------------------------------------------------------------------------------------------------
# properties


def check_invariants(path: str, text: str, window_lines: int = 60) -> None:
    chunks, note = chunk_code(path, text, window_lines=window_lines)
    assert note is None or isinstance(note, str)
    lines = text.split("\n")
    anchors = [chunk.anchor for chunk in chunks]
    assert len(anchors) == len(set(anchors))
    for chunk in chunks:
        assert chunk.path == path
        assert chunk.kind in {"definition", "window"}
        assert len(chunk.text) <= MAX_CHUNK_CHARS
        assert 1 <= chunk.first_line <= chunk.last_line <= len(lines)
    covered = {line for chunk in chunks for line in range(chunk.first_line, chunk.last_line + 1)}
    for number, line in enumerate(lines, start=1):
        if line.strip():
            assert number in covered, f"line {number} ({line!r}) is in no chunk"


EXTENSIONS = [".py", ".js", ".ts", ".tsx", ".go", ".rs", ".java", ".txt", ""]

PYTHON_ISH = st.lists(
    st.sampled_from(
        [
            "def f(x):",
            "class A(B):",
            "    def m(self):",
            "        def inner():",
            "async def g():",
            "@decorator",
            "    @property",
            "# comment",
            '    """doc"""',
            "    return x",
            "        pass",
            "x = 1",
            "if x:",
            "    ",
            "",
            "(",
            ")",
            ":",
            "'''",
            "\t",
            "\r",
            "    y = [",
            "lambda: 0",
            "import os",
            "é ü 😀",
            "x" * 700,
        ]
    ),
    max_size=40,
).map("\n".join)


def brace_ish(text: str) -> str:
    return text.replace("def ", "function ").replace("class ", "struct ").replace(":", " {")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=400), extension=st.sampled_from(EXTENSIONS), window_lines=st.integers(-1, 8))
def test_any_text_chunks_without_error(text: str, extension: str, window_lines: int) -> None:
    check_invariants(f"dir/file{extension}", text, window_lines)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=PYTHON_ISH, window_lines=st.integers(1, 20))
def test_python_ish_text_chunks_without_error(text: str, window_lines: int) -> None:
    check_invariants("pkg/module.py", text, window_lines)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=PYTHON_ISH.map(brace_ish), extension=st.sampled_from([".js", ".ts", ".go", ".rs", ".java"]))
def test_brace_language_ish_text_chunks_without_error(text: str, extension: str) -> None:
    check_invariants(f"src/file{extension}", text)
