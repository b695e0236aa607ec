"""Pytest fixtures for bundle and plugin authors (a pytest plugin, active wherever berth-platform is installed).

* :mod:`berth.testing.bundle_host` — ``bundle_host``: a real bundle registry with the bundles you name.
* :mod:`berth.testing.storage` — ``storage_kind``: run a test on embedded and on distributed storage.
* :mod:`berth.testing.services` — the service markers (``postgres``, ``redis``, ``docker``, ``browser``,
  ``aws``: skip when the service is missing, fail under ``CI=true``), ``clean_berth_env``, and one test at a time
  on the machine for those marked ``sandbox`` or ``docker`` (parallel pytest-xdist workers take turns).
"""

from berth.testing.bundle_host import BundleHost, bundle_host, write_descriptors
from berth.testing.services import (
    SERVICE_MARKERS,
    clean_berth_env,
    pytest_configure,
    pytest_runtest_protocol,
    pytest_runtest_setup,
)
from berth.testing.storage import storage_kind

__all__ = [
    "SERVICE_MARKERS",
    "BundleHost",
    "bundle_host",
    "clean_berth_env",
    "pytest_configure",
    "pytest_runtest_protocol",
    "pytest_runtest_setup",
    "storage_kind",
    "write_descriptors",
]
