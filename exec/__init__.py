"""Isolated code execution: supervisor, executor bootstrap and backend launchers."""
