"""The default platform plugins: what the embedded mode needs, shipped inside the core.

Each module here registers through the ``berth.plugins`` entry-point group exactly as a third party's plugin
would (see ``[project.entry-points."berth.plugins"]`` in ``pyproject.toml``), so any of them can be disabled
or replaced by another plugin of the same name. Optional plugins with heavy dependencies are separate
distributions under ``plugins/`` (``berth-aws``, ``berth-e5``).

* :mod:`berth.default_plugins.storage` — the ``embedded`` storage backend (SQLite + local files);
* :mod:`berth.default_plugins.models` — the ``anthropic``, ``openai-compatible`` and ``scripted`` model providers;
* :mod:`berth.default_plugins.embedders` — the ``builtin`` hashed n-gram embedder;
* :mod:`berth.default_plugins.tools` — the ``web`` tool pack.
"""
