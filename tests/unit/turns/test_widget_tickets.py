"""Widget tickets: signed for one key, scope, bundle and widget; valid for one to two windows; void once the key or
the bundle's place in the scope is gone; shared between processes only through ``widgets.signing_key``."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from berth.config import Configuration
from berth.turns.callers import Caller
from berth.turns.errors import ServiceError
from berth.turns.widget_tickets import WidgetTickets

ACME = Caller(key_id="acme-user", tenant="acme", projects=None, roles=frozenset({"user"}))
TTL = 600


def descriptors(root: Path, *, keys: bool = True, signing_key: str | None = None, bundles: Any = None) -> Configuration:
    root.mkdir(parents=True, exist_ok=True)
    assembly = {"tenants": {"acme": {"projects": {"support": {}}}, "globex": {"projects": {"research": {}}}}}
    listed = {"hello": {"source": {"entry_point": "hello"}}}
    scopes = bundles or {"acme": {"bundles": ["hello"]}, "globex": {"bundles": []}}
    api_keys = [{"id": "acme-user", "sha256": hashlib.sha256(b"k").hexdigest(), "tenant": "acme"}] if keys else []
    api_keys.append({"id": "other", "sha256": hashlib.sha256(b"o").hexdigest(), "tenant": "globex"})
    widgets: dict[str, Any] = {"ticket_ttl_s": TTL}
    if signing_key is not None:
        widgets["signing_key"] = signing_key
    gateway = {"auth": {"mode": "api_keys", "keys": api_keys}, "widgets": widgets}
    (root / "assembly.yaml").write_text(yaml.safe_dump(assembly))
    (root / "bundles.yaml").write_text(yaml.safe_dump({"bundles": listed, "tenants": scopes}))
    (root / "gateway.yaml").write_text(yaml.safe_dump(gateway))
    return Configuration.load(root)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def refused(tickets: WidgetTickets, ticket: str, *scope: str) -> bool:
    """Whether the ticket is refused with a 404 (any other error fails the test)."""
    outcome: ServiceError | None = None
    try:
        tickets.check(ticket, *scope)  # type: ignore[arg-type]
    except ServiceError as error:
        outcome = error
    if outcome is None:
        return False
    assert (outcome.status, outcome.code) == (404, "not_found")
    return True


SCOPE = ("acme", "support", "hello", "greeter")


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Configuration:
    return descriptors(tmp_path_factory.mktemp("descriptors"))


@given(start=st.integers(min_value=10**6, max_value=10**10), later=st.integers(min_value=0, max_value=3 * TTL))
def test_a_ticket_is_valid_for_one_to_two_windows_and_stable_within_one(
    start: int, later: int, config: Configuration
) -> None:
    clock = Clock(start)
    tickets = WidgetTickets(lambda: config, clock=clock)
    ticket = tickets.issue(ACME, *SCOPE)
    clock.now = start + later
    if later < TTL:
        assert tickets.check(ticket, *SCOPE).key_id == "acme-user"
    if later >= 2 * TTL:
        assert refused(tickets, ticket, *SCOPE)
    if start // TTL == clock.now // TTL:
        assert tickets.issue(ACME, *SCOPE) == ticket


def test_a_ticket_is_bound_to_its_scope_bundle_and_widget(tmp_path: Path) -> None:
    config = descriptors(tmp_path / "d")
    tickets = WidgetTickets(lambda: config, clock=Clock(10**9))
    ticket = tickets.issue(ACME, *SCOPE)
    for other in (
        ("acme", "support", "hello", "other"),
        ("acme", "sales", "hello", "greeter"),
        ("globex", "research", "hello", "greeter"),
        ("acme", "support", "orbit", "greeter"),
    ):
        assert refused(tickets, ticket, *other), other
    for broken in ("", "...", "x.y.z", ticket + "A", ticket.replace(".", "..", 1), "!!." + ticket.split(".", 1)[1]):
        assert refused(tickets, broken, *SCOPE), broken


def test_a_ticket_dies_with_its_key_or_its_bundles_place_in_the_scope(tmp_path: Path) -> None:
    config = descriptors(tmp_path / "d", signing_key="literal:shared")
    current = [config]
    tickets = WidgetTickets(lambda: current[0], clock=Clock(10**9))
    ticket = tickets.issue(ACME, *SCOPE)
    assert tickets.check(ticket, *SCOPE).tenant == "acme"
    current[0] = descriptors(tmp_path / "revoked", keys=False, signing_key="literal:shared")
    assert refused(tickets, ticket, *SCOPE)
    nothing = {"acme": {"bundles": []}, "globex": {"bundles": []}}
    current[0] = descriptors(tmp_path / "disabled", signing_key="literal:shared", bundles=nothing)
    assert refused(tickets, ticket, *SCOPE)


@pytest.mark.parametrize(("signing_key", "shared"), [(None, False), ("literal:a long shared key", True)])
def test_only_a_signing_key_makes_a_ticket_valid_on_another_process(
    tmp_path: Path, signing_key: str | None, shared: bool
) -> None:
    config = descriptors(tmp_path / "d", signing_key=signing_key)
    one, two = (WidgetTickets(lambda: config, clock=Clock(10**9)) for _ in range(2))
    ticket = one.issue(ACME, *SCOPE)
    assert refused(two, ticket, *SCOPE) is not shared
