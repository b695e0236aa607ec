"""The ``hello.greet`` tool."""

from __future__ import annotations

from berth import tool


@tool(read_only=True)
def greet(name: str, language: str = "en") -> str:
    """Greet someone by name.

    Args:
        name: who to greet.
        language: ISO 639-1 code of the greeting's language (en, fr, de, es).
    """
    words = {"en": "Hello", "fr": "Bonjour", "de": "Hallo", "es": "Hola"}
    return f"{words.get(language, words['en'])}, {name}!"
