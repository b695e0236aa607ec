"""The ReAct runtime's context engine: timeline blocks, logical paths, sources, plans and rendering.

One concept per module: :mod:`~berth.runtime.blocks` (the block records),
:mod:`~berth.runtime.paths` (the logical path grammar), :mod:`~berth.runtime.sources` (the sources
pool), :mod:`~berth.runtime.timeline` (contribute, announce, hide, rounds),
:mod:`~berth.runtime.caching` (checkpoint placement), :mod:`~berth.runtime.plan` (plans),
:mod:`~berth.runtime.announce` (the per-round ANNOUNCE section), :mod:`~berth.runtime.pruning` (TTL
pruning) and :mod:`~berth.runtime.render` (the prompt). Import from those modules; this package
re-exports nothing.
"""
