"""Local stand-ins for remote LLM APIs, for tests (Berth's tests fake nothing else).

:mod:`~berth.testing.fakes.anthropic_server` speaks Anthropic's Messages streaming format and computes prompt-cache
reads and writes from the breakpoints it receives; :mod:`~berth.testing.fakes.openai_server` speaks the
OpenAI-compatible chat-completions stream. Both bind to 127.0.0.1 on a free port, are scripted per test and
record every request. Import the modules directly; this package re-exports nothing.
"""
