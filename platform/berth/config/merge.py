"""Deep merge of configuration layers: mappings merge key by key, everything else is replaced."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def deep_merge(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge ``layers`` from lowest to highest precedence.

    Mappings are merged recursively; lists, scalars and ``None`` from a higher layer replace the
    lower value whole. Inputs are never modified.
    """
    merged: dict[str, Any] = {}
    for layer in layers:
        if not layer:
            continue
        for key, value in layer.items():
            current = merged.get(key)
            if isinstance(value, Mapping) and isinstance(current, Mapping):
                merged[key] = deep_merge(current, value)
            elif isinstance(value, Mapping):
                merged[key] = deep_merge(value)
            else:
                merged[key] = value
    return merged
