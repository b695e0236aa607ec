"""A bundle's widget is served only in a scope that enables the bundle, to a key that covers the scope: through the
ticket its URL in the bundle listing carries (an iframe cannot send the key). Everything else is a 404, and every
answer keeps the widget sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest
from api_stack import ApiStack, api_stack
from other_bundle import TENANT_BUNDLES, both_bundles

from berth.api.security_headers import WIDGET_POLICY
from berth.turns.callers import LOCAL_CALLER

pytestmark = pytest.mark.usefixtures("storage_kind")

ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>Hi!</channel:answer>'


async def widget_url(stack: ApiStack, who: str, tenant: str, project: str) -> str:
    listing = await stack.client.get(f"/v1/{tenant}/{project}/bundles", headers=stack.auth(who))
    assert listing.status_code == 200, listing.text
    [bundle] = listing.json()
    [widget] = bundle["widgets"]
    return str(widget["url"])


async def test_a_widget_needs_a_ticket_of_a_key_that_covers_a_scope_enabling_its_bundle(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ANSWER], bundles=both_bundles(tmp_path), tenant_bundles=TENANT_BUNDLES) as stack:
        greeter = await widget_url(stack, "acme", "acme", "support")
        assert greeter.startswith("/v1/acme/support/bundles/hello/widgets/greeter/")
        radar = await widget_url(stack, "globex", "globex", "research")
        assert radar.startswith("/v1/globex/research/bundles/orbit/widgets/radar/")
        assert await widget_url(stack, "acme", "acme", "support") == greeter  # the same URL for a while

        served = await stack.client.get(greeter)
        assert served.status_code == 200
        assert "Greeter" in served.text
        assert served.headers["content-security-policy"] == WIDGET_POLICY
        script = await stack.client.get(greeter + "index.html")  # its own files, by relative URL, carry the ticket
        assert script.status_code == 200, script.text
        assert (await stack.client.get(radar)).text == "<h3>Radar of orbit</h3>"

        ticket = greeter.rstrip("/").rsplit("/", 1)[1]
        flipped = ticket[:-1] + ("A" if ticket[-1] != "A" else "B")
        refused = [
            "/b/hello/widgets/greeter/",  # the old unscoped route is gone
            "/v1/acme/support/bundles/hello/widgets/greeter/",  # no ticket
            "/v1/acme/support/bundles/hello/widgets/greeter/x/",
            greeter.replace(ticket, flipped),  # forged
            greeter.replace("/acme/support/", "/acme/sales/"),  # a project the key does not cover
            greeter.replace("/acme/support/", "/globex/research/"),  # another tenant, which does not enable hello
            radar.replace("/globex/research/", "/acme/support/"),  # globex's ticket in acme's scope
            greeter.replace("/greeter/", "/other/"),  # another widget of the bundle
        ]
        # a ticket rightly signed for a scope that does not enable the bundle: still refused
        signed = stack.services.widget_tickets.issue(LOCAL_CALLER, "acme", "support", "orbit", "radar")
        refused.append(f"/v1/acme/support/bundles/orbit/widgets/radar/{signed}/")
        for url in refused:
            answer = await stack.client.get(url)
            assert answer.status_code == 404, (url, answer.status_code, answer.text[:200])
            assert answer.json()["error"]["code"] == "not_found", url
            assert "Greeter" not in answer.text and "Radar" not in answer.text
            if url.startswith("/v1/"):
                assert answer.headers["content-security-policy"] == WIDGET_POLICY, url
