"""berth-exec runs in sandbox images that have nothing but Python: it imports the standard library only."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import berth_exec

PACKAGE = Path(berth_exec.__file__).parent


def imported_top_level_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names


def test_every_module_imports_only_the_standard_library_and_itself() -> None:
    allowed = set(sys.stdlib_module_names) | {"berth_exec", "__future__"}
    offenders = {
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in PACKAGE.rglob("*.py")
        for name in imported_top_level_names(path) - allowed
    }
    assert offenders == set()


def test_importing_it_loads_no_third_party_module() -> None:
    probe = (
        "import sys; before = set(sys.modules); import berth_exec; "
        "print(sorted(m for m in set(sys.modules) - before if m.partition('.')[0] not in sys.stdlib_module_names))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.strip() == "['berth_exec']"
