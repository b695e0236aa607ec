"""The sources pool: URL normalization by parsing, stable SIDs, enriching merges, compact rendering."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from berth.runtime.paths import SourcesPath, parse_path
from berth.runtime.sources import Source, SourceRow, SourcesPool, normalize_url, render_sources_pool


@pytest.mark.parametrize(
    ("url", "normalized"),
    [
        ("http://10.0.0.80:80/a", "http://10.0.0.80/a"),
        ("https://x.org:443/", "https://x.org/"),
        ("http://10.0.0.80:8080/a", "http://10.0.0.80:8080/a"),
        ("https://x.org:80/", "https://x.org:80/"),
        ("http://x.org:0443/", "http://x.org:443/"),
        ("HTTPS://Example.ORG/Path/Case", "https://example.org/Path/Case"),
        ("https://x.org/a/", "https://x.org/a"),
        ("https://x.org", "https://x.org/"),
        ("https://x.org/a#section-2", "https://x.org/a"),
        ("https://x.org/a?utm_source=n&id=7&UTM_Medium=m&gclid=g&fbclid=f", "https://x.org/a?id=7"),
        ("https://x.org/?b=2&a=1", "https://x.org/?b=2&a=1"),
        ("https://x.org/?q=a%20b", "https://x.org/?q=a%20b"),
        ("http://[2001:DB8::1]:80/x", "http://[2001:db8::1]/x"),
        ("http://user@X.org:80/", "http://user@x.org/"),
        ("https://x.org:99999/a", "https://x.org:99999/a"),
    ],
)
def test_url_is_normalized_by_parsing(url: str, normalized: str) -> None:
    assert normalize_url(url) == normalized


def test_default_port_removal_keeps_the_host_when_the_host_ends_like_a_port() -> None:
    # A string-stripping implementation (removing ":80") would damage this one.
    assert normalize_url("http://host-80:80/a") == "http://host-80/a"
    assert normalize_url("http://10.0.0.80:80") == "http://10.0.0.80/"


def test_new_sources_get_consecutive_sids_in_input_order() -> None:
    merge = SourcesPool().merge([Source(url="https://a.org"), Source(url="https://b.org")])
    assert merge.sids == (1, 2)
    assert merge.added == (1, 2)
    assert [row.sid for row in merge.pool.rows] == [1, 2]


def test_a_source_seen_again_keeps_its_sid_and_enriches_its_row() -> None:
    first = SourcesPool().merge([Source(url="https://a.org/doc?utm_source=x", text="short")]).pool
    fetched = datetime(2026, 3, 2, tzinfo=UTC)
    again = Source(
        url="https://A.org/doc/#top", title="Doc", text="a much longer text", relevance=0.8, fetched_at=fetched
    )
    merge = first.merge([again, Source(url="https://b.org")])
    assert merge.sids == (1, 2)
    assert merge.added == (2,)
    row = merge.pool.get(1)
    assert row is not None
    assert (row.url, row.title, row.text, row.relevance, row.fetched_at) == (
        "https://a.org/doc?utm_source=x",
        "Doc",
        "a much longer text",
        0.8,
        fetched,
    )


def test_enrichment_never_loses_what_the_row_already_knew() -> None:
    pool = SourcesPool().merge([Source(url="https://a.org", title="Kept", text="longer text", relevance=0.9)]).pool
    row = pool.merge([Source(url="https://a.org", title="Other", text="short", relevance=0.1)]).pool.get(1)
    assert row is not None
    assert (row.title, row.text, row.relevance) == ("Kept", "longer text", 0.9)


def test_merging_nothing_new_returns_the_same_pool() -> None:
    pool = SourcesPool().merge([Source(url="https://a.org", title="A")]).pool
    assert pool.merge([Source(url="https://a.org/")]).pool is pool


def test_a_source_repeated_in_one_batch_gets_one_sid() -> None:
    merge = SourcesPool().merge([Source(url="https://a.org"), Source(url="https://a.org/#x")])
    assert merge.sids == (1, 1)
    assert len(merge.pool.rows) == 1


def test_local_files_are_deduplicated_by_their_path() -> None:
    image = Source(physical_path="turn_1/outputs/chart.png", source_type="file", mime="image/png")
    merge = SourcesPool().merge([image, image.model_copy(update={"title": "Chart"})])
    assert merge.sids == (1, 1)
    assert merge.pool.rows[0].title == "Chart"


def test_only_http_and_https_rows_are_citable() -> None:
    pool = (
        SourcesPool()
        .merge(
            [
                Source(url="https://a.org"),
                Source(url="http://b.org"),
                Source(url="ftp://c.org/f"),
                Source(physical_path="turn_1/outputs/x.png", source_type="file"),
            ]
        )
        .pool
    )
    assert [row.sid for row in pool.citable_rows()] == [1, 2]


def test_source_without_url_or_path_is_refused() -> None:
    with pytest.raises(ValidationError, match="url or a physical_path"):
        Source(title="nowhere")


def test_selector_path_picks_rows_and_skips_unknown_sids() -> None:
    pool = SourcesPool().merge([Source(url=f"https://s{n}.org") for n in range(1, 6)]).pool
    selector = parse_path("so:sources_pool[4-9,1]")
    assert isinstance(selector, SourcesPath)
    assert [row.sid for row in pool.select(selector)] == [1, 4, 5]
    assert len(pool.select(SourcesPath())) == 5


def test_pool_round_trips_through_json() -> None:
    pool = SourcesPool().merge([Source(url="https://a.org", fetched_at=datetime(2026, 3, 1, tzinfo=UTC))]).pool
    restored = SourcesPool.model_validate_json(pool.model_dump_json())
    assert restored == pool
    assert restored.find(Source(url="https://a.org/")) is not None


def test_pool_refuses_duplicate_sources_and_duplicate_sids() -> None:
    with pytest.raises(ValidationError, match="same source"):
        SourcesPool(rows=(SourceRow(sid=1, url="https://a.org"), SourceRow(sid=2, url="https://a.org/")))
    with pytest.raises(ValidationError, match="twice"):
        SourcesPool(rows=(SourceRow(sid=1, url="https://a.org"), SourceRow(sid=1, url="https://b.org")))


def test_rendering_is_compact_and_marks_rows_that_cannot_be_cited() -> None:
    pool = (
        SourcesPool()
        .merge(
            [
                Source(url="https://a.org/x", title="Alpha  report", text="line one\nline two " + "x" * 500),
                Source(physical_path="turn_1/outputs/chart.png", source_type="file", title="Chart"),
            ]
        )
        .pool
    )
    text = render_sources_pool(pool.rows, snippet_chars=40)
    lines = text.splitlines()
    assert lines[0] == "[SOURCES POOL]"
    assert "[S:1] Alpha report — https://a.org/x" in lines
    assert "    line one line two " + "x" * 21 + "…" in lines
    assert "[S:2] (not citable: file) Chart — turn_1/outputs/chart.png" in lines
    assert all(len(line) <= 160 for line in lines)


def test_empty_pool_renders_a_placeholder() -> None:
    assert "(no sources yet)" in render_sources_pool(())


urls = st.builds(
    "{}://{}{}/{}{}".format,
    st.sampled_from(["http", "https", "HTTP"]),
    st.sampled_from(["a.org", "B.org", "10.0.0.80"]),
    st.sampled_from(["", ":80", ":443", ":8080"]),
    st.sampled_from(["", "x", "x/", "y/z"]),
    st.sampled_from(["", "?utm_source=q", "#frag", "?id=1"]),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(urls, max_size=12), st.lists(urls, max_size=12))
def test_sids_once_given_never_change_across_merges(first: list[str], second: list[str]) -> None:
    pool = SourcesPool().merge([Source(url=u) for u in first]).pool
    before = {row.dedup_key: row.sid for row in pool.rows}
    merged = pool.merge([Source(url=u) for u in second]).pool
    after = {row.dedup_key: row.sid for row in merged.rows}
    assert all(after[key] == sid for key, sid in before.items())
    assert sorted(after.values()) == list(range(1, len(after) + 1))


@settings(max_examples=150, deadline=None)
@given(urls)
def test_normalization_is_idempotent(url: str) -> None:
    once = normalize_url(url)
    assert normalize_url(once) == once
