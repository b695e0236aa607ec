"""The halves of the labelled questions ``bench/knowledge.py`` scores apart: ranking changes are chosen on the
tuning half and checked on the held-out half (issue 38: the questions are never tuned one by one)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import yaml

REPO = Path(__file__).resolve().parents[2]


@functools.cache
def bench_knowledge() -> ModuleType:
    """``bench/knowledge.py`` as a module of its own name (its helpers import from ``bench/``)."""
    if str(REPO / "bench") not in sys.path:
        sys.path.append(str(REPO / "bench"))  # after everything else: a bench module never shadows a package
    spec = importlib.util.spec_from_file_location("bench_knowledge", REPO / "bench" / "knowledge.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_the_questions_split_into_two_fixed_halves_of_each_kind() -> None:
    bench = bench_knowledge()
    questions = yaml.safe_load((REPO / "tests" / "data" / "knowledge_questions.yaml").read_text(encoding="utf-8"))
    halves = [bench.question_half(item["question"]) for item in questions]
    assert halves == [bench.question_half(item["question"]) for item in reversed(questions)][::-1]
    assert (halves.count("tuning"), halves.count("held-out")) == (72, 74)  # as question_half's docstring says
    for kind in ("paraphrase", "lexical", "detail"):
        kinds = {half for half, item in zip(halves, questions, strict=True) if item["kind"] == kind}
        assert kinds == {"tuning", "held-out"}


def test_scores_count_each_half_apart() -> None:
    bench = bench_knowledge()
    assert (bench.question_half("a"), bench.question_half("e")) == ("tuning", "held-out")
    answered = {"question": "a", "kind": "lexical", "answers": ["ks:docs/a.md#x"]}
    missed = {"question": "e", "kind": "paraphrase", "answers": ["ks:docs/e.md#y"]}
    scores = bench.Scores()
    scores.add(answered, ["ks:docs/z.md#z", "ks:docs/a.md#x~p2"])  # a split chunk's part counts as the chunk
    scores.add(missed, ["ks:docs/z.md#z"])
    row = scores.quality("arm", "hybrid")
    assert (row.recall_at_5, row.mrr_at_10) == (0.5, 0.25)
    assert row.by_half == {"tuning": (1.0, 0.5), "held-out": (0.0, 0.0)}
