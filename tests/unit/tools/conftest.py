"""Fixtures for tool-pack tests (the server itself lives in ``web_playground``)."""

from web_playground import playground

__all__ = ["playground"]
