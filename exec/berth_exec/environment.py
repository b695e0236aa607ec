"""The executor's environment: the only module of ``berth_exec`` that reads its process environment.

Inside the sandbox the environment is the contract between the backend and the program, exactly these variables
(nothing secret is ever among them): ``WORKDIR``, ``OUTPUT_DIR``, ``EXECUTION_ID``, ``BUNDLE_ID`` and, when the
bundle has tools to serve, ``SUPERVISOR_SOCKET_PATH``. This package is standard library only, so this small module
stands in for the host's settings layer (:mod:`berth.config.environment`), which it cannot import.
"""

from __future__ import annotations

import os

SOCKET_VARIABLE = "SUPERVISOR_SOCKET_PATH"
"""The environment variable that names the supervisor's socket inside the sandbox."""
WORKDIR_VARIABLE = "WORKDIR"
"""The environment variable that names the program's working directory."""
DOCUMENTED_VARIABLES = frozenset({"WORKDIR", "OUTPUT_DIR", "EXECUTION_ID", "BUNDLE_ID", SOCKET_VARIABLE})
"""The whole contract: no other variable reaches the program."""


def keep_documented_only() -> None:
    """Remove every variable but the documented ones from this process's environment (and so its children's).

    The backends pass only these, but the tools on the way add some: bubblewrap sets ``PWD`` after ``--chdir``,
    and Python's C-locale coercion (PEP 538) sets ``LC_CTYPE`` when the locale is ``C``.
    """
    for name in [name for name in os.environ if name not in DOCUMENTED_VARIABLES]:
        del os.environ[name]


def supervisor_socket_path() -> str | None:
    """The supervisor's socket, when the run has one (``SUPERVISOR_SOCKET_PATH``)."""
    return os.environ.get(SOCKET_VARIABLE) or None


def workdir() -> str | None:
    """The program's working directory (``WORKDIR``)."""
    return os.environ.get(WORKDIR_VARIABLE) or None
