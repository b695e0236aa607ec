"""``POST …/turns`` is served by :class:`StartTurnRoute`, which calls the FastAPI route's dependencies itself.

The FastAPI route documents the API; a dependency added to it alone would never run. This test lists what the
plain route calls, so such a change fails here until ``StartTurnRoute`` calls the new dependency too.
"""

from __future__ import annotations

from fastapi.routing import APIRoute

from berth.api.deps import scoped_caller, services
from berth.api.routes.conversations import StartTurnRoute, router


def test_the_documented_route_has_only_the_dependencies_the_plain_route_calls() -> None:
    (documented,) = [r for r in router.routes if isinstance(r, APIRoute) and r.name == "start_turn"]
    called = {dependency.call for dependency in documented.dependant.dependencies}
    assert called == {scoped_caller, services}, (
        "StartTurnRoute serves POST …/turns and calls scoped_caller and host_services itself: "
        f"call the new dependency there too ({called - {scoped_caller, services}})"
    )
    assert documented.dependencies == [] and router.dependencies == []


def test_the_plain_route_serves_the_documented_path_and_method() -> None:
    (documented,) = [r for r in router.routes if isinstance(r, APIRoute) and r.name == "start_turn"]
    plain = StartTurnRoute()
    assert plain.path == documented.path and plain.methods == {"POST"} == documented.methods
