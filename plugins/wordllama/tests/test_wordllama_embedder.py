"""The ``wordllama`` embedder plugin: registered through ``berth_embedders``, the real weights read lazily from the
installed ``wordllama`` package, and a knowledge space that ranks by its vectors."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from berth.bundle.knowledge import DocumentFolder, KnowledgeSpace
from berth.config.errors import ConfigError
from berth.config.models.assembly import EmbedderConfig
from berth.knowledge.service import KnowledgeService
from berth.runtime.memory import cosine
from berth.testing.plugins import embedders_contributed_by
from berth_wordllama import embedder as wordllama


def test_wordllama_is_registered_by_the_plugin() -> None:
    assert embedders_contributed_by(wordllama) == {"wordllama": wordllama.create_wordllama_embedder}


def test_loading_the_plugin_reads_no_weights_and_imports_no_tokenizer() -> None:
    probe = (
        "import sys, berth_wordllama.embedder as p; p.berth_embedders(); "
        "print('tokenizers' in sys.modules, 'safetensors' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False False"


def test_an_unknown_wordllama_model_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        wordllama.create_wordllama_embedder(EmbedderConfig(provider="wordllama", model="l3_supercat"))
    assert caught.value.code == "embedder_model_unknown"
    assert "l2_supercat" in str(caught.value)


def test_the_weights_come_from_the_installed_package_not_a_download() -> None:
    weights, tokenizer = wordllama.model_files()
    assert weights.name == "l2_supercat_256.safetensors" and weights.stat().st_size > 10_000_000
    assert tokenizer.name == "l2_supercat_tokenizer_config.json"
    assert weights.parents[1] == tokenizer.parents[1]  # both inside the wordllama package


# --- the real model ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def embedder() -> wordllama.WordLlamaEmbedder:
    return wordllama.create_wordllama_embedder(EmbedderConfig(provider="wordllama"))


async def test_vectors_have_256_dimensions_and_unit_length(embedder: wordllama.WordLlamaEmbedder) -> None:
    vectors = await embedder.embed(["Backups run nightly at 02:00 UTC.", "x", "Schlüssel und Geheimnisse"])
    assert embedder.semantic is True
    assert [len(v) for v in vectors] == [embedder.dimensions] * 3 == [256] * 3
    assert all(math.isclose(math.fsum(x * x for x in v), 1.0, rel_tol=1e-5) for v in vectors)


async def test_a_text_without_tokens_is_a_zero_vector_and_no_texts_is_no_vectors(
    embedder: wordllama.WordLlamaEmbedder,
) -> None:
    assert await embedder.embed([]) == []
    (empty,) = await embedder.embed([""])
    assert empty == (0.0,) * 256


async def test_a_query_embeds_as_the_same_text_in_a_batch(embedder: wordllama.WordLlamaEmbedder) -> None:
    alone = await embedder.embed_query("rotate the signing keys")
    batched = await embedder.embed(["something else entirely", "rotate the signing keys"])
    assert cosine(alone, batched[1]) == pytest.approx(1.0, abs=1e-6)


async def test_paraphrases_are_closer_than_unrelated_text(embedder: wordllama.WordLlamaEmbedder) -> None:
    failed, paraphrase, unrelated = await embedder.embed(
        [
            "The database migration failed during the nightly deploy.",
            "Last night's schema upgrade broke the production DB.",
            "My grandmother bakes banana bread every Sunday.",
        ]
    )
    assert cosine(failed, paraphrase) > cosine(failed, unrelated) + 0.2


async def test_a_vector_search_finds_the_section_that_answers_a_paraphrased_question(
    embedder: wordllama.WordLlamaEmbedder, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ops.md").write_text(
        "# Operations\n\n"
        "## Invoices\n\nInvoices are emailed to every customer on the first business day of each month.\n\n"
        "## Office plants\n\nThe ficus by the window is watered on Tuesdays; the cactus needs nothing.\n\n"
        "## Certificates\n\nTLS certificates renew automatically thirty days before they expire.\n",
        encoding="utf-8",
    )
    service = KnowledgeService(tmp_path / "knowledge", embedder, embedder_name="wordllama")
    space = service.open("ops", KnowledgeSpace(name="guide", indexer=DocumentFolder(docs)))
    try:
        await space.refresh()
        hits = await space.search("when do clients receive their bills", limit=3, mode="vector")
        assert hits[0].logical_path == "ks:guide/ops.md#invoices"
        hits = await space.search("does the https cert need manual renewal", limit=3, mode="vector")
        assert hits[0].logical_path == "ks:guide/ops.md#certificates"
    finally:
        await space.aclose()
