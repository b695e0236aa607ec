"""Knowledge spaces at scale: indexers that chunk documents, code and git repositories, and a persistent
hybrid (lexical + vector) index per space.

* :mod:`berth.knowledge.chunks` — :class:`Chunk`, the unit that is indexed, searched and cited.
* :mod:`berth.knowledge.text` — chunkers for markdown, plain text, HTML and PDF (by headings / pages).
* :mod:`berth.knowledge.code` — chunkers for source code (by definitions, with tree-sitter) and line windows.
"""
