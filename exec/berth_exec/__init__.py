"""berth-exec: the code that runs inside Berth's execution sandbox.

This package is installed into every sandbox image (local, Docker, Fargate), next to the untrusted program an
agent wrote, so it uses the standard library only and never imports ``berth``: the trusted half (the supervisor
that holds descriptors and secrets) stays in the host. It will hold the executor bootstrap, the length-prefixed
JSON wire protocol over a Unix socket, and the client that generated code imports (``from berth_exec import
tools``); see ``exec/README.md``.
"""

__version__ = "0.1.0"

PROTOCOL_VERSION = 2
"""The version of the supervisor-executor wire protocol this package speaks (:mod:`berth_exec.wire`)."""
