"""clamd's INSTREAM replies read into verdicts, and the ``attachments.antivirus`` settings validated."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from berth.config.models.gateway import AntivirusConfig
from berth.gateway.antivirus import AntivirusUnavailableError, parse_reply

signatures = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=126, exclude_characters=":"), min_size=1, max_size=60
).filter(lambda name: not name.endswith("ERROR"))


def test_a_clean_stream_is_ok() -> None:
    assert parse_reply("stream: OK").infected is False


@given(signatures)
def test_a_found_signature_is_named_exactly(signature: str) -> None:
    verdict = parse_reply(f"stream: {signature} FOUND")
    assert verdict.infected
    assert verdict.signature == signature


@pytest.mark.parametrize(
    "reply",
    ["INSTREAM size limit exceeded. ERROR", "stream: Can't allocate memory ERROR", "", "UNKNOWN COMMAND", "stream: ?"],
)
def test_anything_but_a_verdict_is_unavailable_never_clean(reply: str) -> None:
    with pytest.raises(AntivirusUnavailableError):
        parse_reply(reply)


@given(st.text(max_size=80))
def test_no_reply_is_ever_read_as_clean_unless_it_says_ok(reply: str) -> None:
    try:
        verdict = parse_reply(reply)
    except AntivirusUnavailableError:
        return
    assert verdict.infected or reply.partition(": ")[2] == "OK"


@pytest.mark.parametrize("address", ["unix:///run/clamav/clamd.ctl", "tcp://clamav:3310", "tcp://[::1]:3310"])
def test_clamd_addresses_in_both_forms_are_accepted(address: str) -> None:
    assert AntivirusConfig(clamd=address).on_error == "refuse"


@pytest.mark.parametrize("address", ["clamav:3310", "unix://", "tcp://clamav", "tcp://clamav:99999", "http://x:1"])
def test_a_bad_clamd_address_is_refused_naming_it(address: str) -> None:
    with pytest.raises(ValidationError, match="unix:///path/to/socket or tcp://host:port"):
        AntivirusConfig(clamd=address)
