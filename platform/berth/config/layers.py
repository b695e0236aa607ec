"""Configuration layers, and finding which layer (file and line) a merged value came from."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from berth.config.errors import DescriptorProblem
from berth.config.validation import clean_location, error_message
from berth.config.yamlsource import LineMap, format_field_path


@dataclass(frozen=True)
class Layer:
    """One layer of a merge: ``data`` sits at ``prefix`` inside the file ``file`` (lines in ``lines``).

    ``env_prefix`` marks the environment layer instead: a path is shown as the variable that set it.
    """

    file: str
    prefix: tuple[Any, ...]
    data: Mapping[str, Any]
    lines: LineMap | None = None
    env_prefix: str | None = None

    def depth_of(self, path: tuple[Any, ...]) -> int:
        """How many leading elements of ``path`` exist in this layer's data (0 = none)."""
        node: Any = self.data
        depth = 0
        for element in path:
            if isinstance(node, Mapping) and element in node:
                node = node[element]
            elif isinstance(node, Mapping) and str(element) in node:
                node = node[str(element)]
            elif isinstance(node, list) and isinstance(element, int) and 0 <= element < len(node):
                node = node[element]
            else:
                break
            depth += 1
        return depth

    def problem(self, path: tuple[Any, ...], message: str) -> DescriptorProblem:
        """A problem at ``path`` (relative to this layer) in this layer's file."""
        if self.env_prefix is not None:
            depth = max(self.depth_of(path), 1)
            variable = self.env_prefix + "__".join(str(p).upper() for p in path[:depth])
            return DescriptorProblem(self.file, None, variable, message)
        full = (*self.prefix, *path)
        line = self.lines.locate(full)[0] if self.lines is not None else None
        return DescriptorProblem(self.file, line, format_field_path(full), message)


def owning_layer(layers: Sequence[Layer], path: tuple[Any, ...]) -> Layer:
    """The layer a merged value at ``path`` came from: the highest that holds the whole path,
    else the one that holds its longest prefix (later layers win ties)."""
    best = layers[0]
    best_depth = -1
    for layer in layers:
        depth = layer.depth_of(path)
        if depth == len(path):
            best, best_depth = layer, len(path) + 1
        elif depth >= best_depth and best_depth <= len(path):
            best, best_depth = layer, depth
    return best


def problems_in_layers(
    exc: ValidationError, model: type[BaseModel], layers: Sequence[Layer], note: str = ""
) -> list[DescriptorProblem]:
    """Attribute each error of validating the merge of ``layers`` to the layer that set the value."""
    problems = []
    for error in exc.errors(include_url=False):
        path, allowed = clean_location(model, tuple(error["loc"]))
        layer = owning_layer(layers, path)
        problems.append(layer.problem(path, error_message(error, path, allowed) + note))
    return problems
