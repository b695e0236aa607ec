"""Importing bundle code so that generations and bundles never meet (SPEC §3.3).

* A **folder bundle** is imported as a synthetic package unique to bundle and generation,
  ``berth_bundles.<bundle>.g<N>``, so two folder bundles may both have a ``tools.py`` or a ``utils/``
  package. Inside it, imports of its own modules must be relative; an absolute import of a sibling
  fails with a :class:`ModuleNotFoundError` that says so (:class:`SiblingImportGuard`). Folder bundle
  modules are always compiled from their source (:class:`BundleSourceLoader`): a ``.pyc`` is trusted
  when the source's size and whole-second mtime match, so a same-size edit saved within the second of
  the previous load would otherwise reload the old code.
* A **pip-installed bundle** keeps its real package name. A reload drops that package's modules from
  ``sys.modules`` and imports them again; the previous generation keeps the module objects it holds.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import re
import sys
import threading
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from importlib_metadata import EntryPoint, entry_points

BUNDLE_GROUP = "berth.bundles"
SYNTHETIC_ROOT = "berth_bundles"


@dataclass(frozen=True)
class ImportedBundle:
    """The result of importing a bundle's code once."""

    plugin: object
    module_names: tuple[str, ...]
    roots: tuple[Path, ...]
    package: str


def synthetic_package_name(bundle_id: str, generation: int) -> str:
    """``berth_bundles.<bundle id with _ for ->.g<generation>``."""
    return f"{SYNTHETIC_ROOT}.{bundle_id.replace('-', '_')}.g{generation}"


def bundle_entry_points() -> dict[str, EntryPoint]:
    """The ``berth.bundles`` entry points installed now, by name (read afresh on every call)."""
    importlib.invalidate_caches()
    return {point.name: point for point in entry_points(group=BUNDLE_GROUP)}


def source_spec(
    name: str, source: Path, *, package: bool, loader: BundleSourceLoader | None = None
) -> importlib.machinery.ModuleSpec:
    """The spec of module ``name`` compiled from ``source`` (a package's ``__init__.py`` when ``package``)."""
    loader = loader or BundleSourceLoader(name, str(source))
    spec = importlib.machinery.ModuleSpec(name, loader, origin=str(source))
    spec.has_location = True
    if package:
        spec.submodule_search_locations = [str(source.parent)]
    return spec


def import_folder_bundle(bundle_id: str, generation: int, folder: Path, module: str | None) -> ImportedBundle:
    """Import the package at ``folder`` (or ``folder/<module>``) under its synthetic name."""
    package_dir = folder / module.replace(".", "/") if module else folder
    init = package_dir / "__init__.py"
    if not init.is_file():
        raise FileNotFoundError(f"bundle folder {package_dir} has no __init__.py")
    name = synthetic_package_name(bundle_id, generation)
    _ensure_parent_packages(name)
    SiblingImportGuard.install().watch(bundle_id, package_dir)
    FolderBundleFinder.install()
    loader = BundleSourceLoader(name, str(init))
    module_object = importlib.util.module_from_spec(source_spec(name, init, package=True, loader=loader))
    sys.modules[name] = module_object
    try:
        loader.exec_module(module_object)
    except BaseException:
        purge_modules(name)
        raise
    names = tuple(sorted(key for key in list(sys.modules) if key == name or key.startswith(name + ".")))
    return ImportedBundle(module_object, names, (package_dir,), name)


def import_entry_point_bundle(point: EntryPoint) -> ImportedBundle:
    """Import (or re-import) an installed bundle: purge its package from ``sys.modules``, then load."""
    top_level = point.module.split(".")[0]
    purge_modules(top_level)
    importlib.invalidate_caches()
    plugin = point.load()
    names = tuple(sorted(key for key in list(sys.modules) if key == top_level or key.startswith(top_level + ".")))
    top_module = sys.modules.get(top_level)
    roots: list[Path] = []
    if top_module is not None:
        roots = [Path(entry) for entry in getattr(top_module, "__path__", [])]
        if not roots and getattr(top_module, "__file__", None):
            roots = [Path(str(top_module.__file__)).parent]
    return ImportedBundle(plugin, names, tuple(roots), top_level)


def entry_point_roots(point: EntryPoint) -> list[Path]:
    """Folders of an entry point's top-level package without importing it (for error locations)."""
    spec = importlib.util.find_spec(point.module.split(".")[0])
    if spec is None or spec.submodule_search_locations is None:
        return [Path(spec.origin).parent] if spec is not None and spec.origin else []
    return [Path(location) for location in spec.submodule_search_locations]


def editable_source_folders(point: EntryPoint) -> list[Path]:
    """The source folders of an entry point's package when its distribution is installed in editable mode
    (``pip install -e``; pip records it in the distribution's ``direct_url.json``), else ``[]``."""
    distribution = point.dist
    text = distribution.read_text("direct_url.json") if distribution is not None else None
    if not text:
        return []
    try:
        record = json.loads(text)
    except ValueError:
        return []
    if not (record.get("dir_info") or {}).get("editable"):
        return []
    url = urlsplit(str(record.get("url", "")))
    if url.scheme != "file":
        return []
    project = Path(unquote(url.path))
    roots = [root for root in entry_point_roots(point) if root.is_relative_to(project)]
    return roots or [project]


def purge_modules(package: str) -> None:
    """Drop ``package`` and its submodules from ``sys.modules`` (objects others hold stay alive)."""
    # list(): another thread may import (and so grow sys.modules) while this walks it
    for key in [key for key in list(sys.modules) if key == package or key.startswith(package + ".")]:
        sys.modules.pop(key, None)


def _ensure_parent_packages(name: str) -> None:
    parts = name.split(".")
    for depth in range(1, len(parts)):
        parent = ".".join(parts[:depth])
        if parent not in sys.modules:
            module = types.ModuleType(parent, "Synthetic namespace for folder bundles.")
            module.__path__ = []
            sys.modules[parent] = module


class BundleSourceLoader(importlib.machinery.SourceFileLoader):
    """Loads a folder bundle's module from its source every time: no ``.pyc`` is read or written."""

    def get_code(self, fullname: str) -> types.CodeType:
        """Compile the module's current source."""
        path = self.get_filename(fullname)
        return compile(self.get_data(path), path, "exec", dont_inherit=True)


class FolderBundleFinder(importlib.abc.MetaPathFinder):
    """First finder on ``sys.meta_path`` for modules under ``berth_bundles.``: finds a folder bundle's
    submodules in its package folders and loads them with :class:`BundleSourceLoader`."""

    _instance: FolderBundleFinder | None = None
    _lock = threading.Lock()

    @classmethod
    def install(cls) -> FolderBundleFinder:
        """The process-wide finder, inserted at the front of ``sys.meta_path`` on first use."""
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            if cls._instance not in sys.meta_path:
                sys.meta_path.insert(0, cls._instance)
            return cls._instance

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        """A spec for ``berth_bundles.<id>.g<N>.<sub>``; None for anything else (other finders go on)."""
        if not fullname.startswith(SYNTHETIC_ROOT + ".") or path is None:
            return None
        leaf = fullname.rpartition(".")[2]
        for folder in path:
            package_init = Path(folder) / leaf / "__init__.py"
            if package_init.is_file():
                return source_spec(fullname, package_init, package=True)
            module_file = Path(folder) / f"{leaf}.py"
            if module_file.is_file():
                return source_spec(fullname, module_file, package=False)
        return None


class SiblingImportGuard(importlib.abc.MetaPathFinder):
    """Last finder on ``sys.meta_path``: turns a failed absolute import of a folder bundle's own module
    into an error that says to make it relative.

    It only acts after every other finder failed, so it never hides a real module.
    """

    _instance: SiblingImportGuard | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self._folders: dict[str, Path] = {}

    @classmethod
    def install(cls) -> SiblingImportGuard:
        """The process-wide guard, appended to ``sys.meta_path`` on first use."""
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            if cls._instance not in sys.meta_path:
                sys.meta_path.append(cls._instance)
            return cls._instance

    def watch(self, bundle_id: str, package_dir: Path) -> None:
        """Guard the top-level modules of ``package_dir`` (the folder of bundle ``bundle_id``)."""
        self._folders[bundle_id] = package_dir

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        """Raise a helpful error for ``import sibling`` from a folder bundle; otherwise find nothing."""
        if path is not None or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", fullname):
            return None
        for bundle_id, folder in self._folders.items():
            if (folder / f"{fullname}.py").is_file() or (folder / fullname / "__init__.py").is_file():
                raise ModuleNotFoundError(
                    f"No module named '{fullname}': folder bundle '{bundle_id}' has a module '{fullname}', "
                    f"but a bundle imports its own modules relatively: write 'from . import {fullname}' "
                    f"or 'from .{fullname} import …'",
                    name=fullname,
                )
        return None
