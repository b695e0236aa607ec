"""Package discovery for the folder → import-name mapping of SPEC §1.

`pyproject.toml` holds all metadata; this file only lists the packages, because setuptools cannot
discover subpackages under a remapped folder (``platform/`` → ``berth``) by itself.
"""

from setuptools import find_packages, setup

FOLDERS = {"berth": "platform", "berth.plugins": "plugins", "berth.exec": "exec"}


def packages_under(import_name: str, folder: str) -> list[str]:
    """Return ``import_name`` and every subpackage found under ``folder``, renamed into it."""
    return [import_name] + [f"{import_name}.{sub}" for sub in find_packages(folder)]


setup(packages=[pkg for name, folder in FOLDERS.items() for pkg in packages_under(name, folder)])
