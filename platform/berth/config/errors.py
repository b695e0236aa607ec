"""Descriptor problems: what was wrong, in which file, on which line, at which field."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class DescriptorProblem:
    """One problem in one descriptor file.

    ``file`` is the file name as the operator knows it (``bundles.yaml``), ``line`` the 1-based
    line in that file when the YAML parser knows it, ``field`` the dotted path of the offending
    key (``tenants.acme/support.default_bundle``; list items as ``keys[0]``), ``message`` what is
    wrong and what to do about it. Messages never contain secret values.
    """

    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where} {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class DescriptorError(Exception):
    """A descriptor set (or one file of it) is invalid; carries every problem found, sorted."""

    def __init__(self, problems: Iterable[DescriptorProblem]) -> None:
        self.problems: tuple[DescriptorProblem, ...] = tuple(
            sorted(set(problems), key=lambda p: (p.file, p.line or 0, p.field, p.message))
        )
        super().__init__(self.render())

    def render(self) -> str:
        """Return one problem per line, in file/line order."""
        return "\n".join(str(problem) for problem in self.problems)


class ConfigError(Exception):
    """A configuration problem found at run time (a missing secret, an unknown scope).

    The message names what is missing and where to set it; it never contains a secret value.
    ``code`` is a stable identifier (``secret_missing``, ``unknown_tenant``, …).
    """

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)
