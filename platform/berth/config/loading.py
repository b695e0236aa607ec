"""Loading a descriptor set: each file read and validated on its own, then all checked together."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from importlib_metadata import entry_points

from berth.config.checks import cross_file_problems
from berth.config.descriptors import (
    ASSEMBLY,
    BUNDLES,
    BUNDLES_SECRETS,
    DESCRIPTOR_MODELS,
    GATEWAY,
    SECRETS,
    DescriptorSet,
)
from berth.config.errors import DescriptorError, DescriptorProblem
from berth.config.models.common import BUNDLE_ID_PATTERN
from berth.config.validation import describe_value, validate_document
from berth.config.yamlsource import LineMap, YamlDocument, read_yaml_file


def load_descriptor_set(
    root: Path | None, *, secret_providers: Iterable[str] = (), display_root: str | None = None
) -> DescriptorSet:
    """Read, validate and cross-check the descriptors in ``root`` (None = embedded defaults).

    Every problem of every file is collected and raised together as one :class:`DescriptorError`;
    cross-file checks run once each file is valid on its own.
    """
    if root is not None and not root.is_dir():
        raise DescriptorError(
            [DescriptorProblem(str(root), None, "", "descriptors folder does not exist or is not a folder")]
        )
    prefix = display_root if display_root is not None else (str(root) if root is not None else "")
    problems: list[DescriptorProblem] = []
    documents: dict[str, YamlDocument] = {}
    models: dict[str, Any] = {}
    present = []
    for name, model in DESCRIPTOR_MODELS.items():
        display = str(Path(prefix) / name) if prefix else name
        path = root / name if root is not None else None
        if path is not None and path.exists():
            present.append(name)
            try:
                document = read_yaml_file(path, display)
            except DescriptorError as exc:
                problems.extend(exc.problems)
                continue
        else:
            defaults = installed_bundles_document() if root is None and name == BUNDLES else {}
            document = YamlDocument(display, defaults, LineMap({(): 1}))
        documents[name] = document
        if not isinstance(document.data, dict):
            problems.append(
                DescriptorProblem(
                    display,
                    1,
                    "",
                    f"expected a mapping at the top of the file, got {describe_value(document.data)}",
                )
            )
            continue
        try:
            models[name] = validate_document(model, document)
        except DescriptorError as exc:
            problems.extend(exc.problems)
    if root is not None:
        problems.extend(_misnamed_files(root, prefix))
    if problems:
        raise DescriptorError(problems)
    descriptors = DescriptorSet(
        root=root,
        assembly=models[ASSEMBLY],
        bundles=models[BUNDLES],
        secrets=models[SECRETS],
        bundles_secrets=models[BUNDLES_SECRETS],
        gateway=models[GATEWAY],
        documents=documents,
        present=tuple(present),
    )
    cross = cross_file_problems(descriptors, secret_providers)
    if cross:
        raise DescriptorError(cross)
    return descriptors


def installed_bundles_document() -> dict[str, Any]:
    """The embedded defaults' ``bundles.yaml``: every installed ``berth.bundles`` entry point, visible everywhere.

    With no descriptors at all (``berth run`` in an empty folder) the bundles pip installed are served;
    an entry-point name that is no valid bundle id is left out.
    """
    names = sorted(point.name for point in entry_points(group="berth.bundles"))
    return {"bundles": {n: {"source": {"entry_point": n}} for n in names if re.fullmatch(BUNDLE_ID_PATTERN, n)}}


def _misnamed_files(root: Path, prefix: str) -> list[DescriptorProblem]:
    """YAML files next to the descriptors whose names look like a misspelt descriptor name."""
    problems = []
    for path in sorted(root.glob("*.y*ml")):
        if path.name in DESCRIPTOR_MODELS:
            continue
        close = difflib.get_close_matches(path.name.replace(".yml", ".yaml"), list(DESCRIPTOR_MODELS), n=1, cutoff=0.8)
        if close:
            display = str(Path(prefix) / path.name) if prefix else path.name
            problems.append(DescriptorProblem(display, None, "", f"not a descriptor name; did you mean '{close[0]}'?"))
    return problems
