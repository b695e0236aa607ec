"""The price table (assembly.yaml) and budgets (gateway.yaml): a bad entry is one clear problem naming the file,
its line, the model key or budget, and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from berth.config import Configuration, DescriptorError

pytestmark = pytest.mark.usefixtures("clean_berth_env")

PRICES_AT = "  react: {max_iterations: 15,"


def add_prices(folder: Path, *entries: str) -> None:
    """Give ``platform.models`` of the example assembly.yaml a ``prices`` table (its entries from line 12)."""
    path = folder / "assembly.yaml"
    lines = "".join(f"      {entry}\n" for entry in entries)
    path.write_text(path.read_text().replace(PRICES_AT, f"    prices:\n{lines}{PRICES_AT}", 1))


def add_budgets(folder: Path, *entries: str) -> int:
    """Append ``budgets`` to the example gateway.yaml; return the line of its first entry."""
    path = folder / "gateway.yaml"
    text = path.read_text()
    path.write_text(text + "budgets:\n" + "".join(f"  - {entry}\n" for entry in entries))
    return text.count("\n") + 2


def problems(folder: Path) -> list[str]:
    with pytest.raises(DescriptorError) as caught:
        Configuration.load(folder)
    return [f"{Path(p.file).name}:{p.line} {p.field}: {p.message}" for p in caught.value.problems]


SONNET = '"anthropic:claude-sonnet-5-5": {input: 3, output: 15, cache_read: 0.3, cache_write: 3.75}'
HAIKU = "claude-haiku-5-5: {input: 1, output: 5}"


def test_prices_load_and_a_label_finds_its_own_price_or_its_bare_model_names(example_descriptors: Path) -> None:
    add_prices(example_descriptors, SONNET, HAIKU)
    models = Configuration.load(example_descriptors).settings_for("acme", "support").models
    sonnet = models.price_of("anthropic:claude-sonnet-5-5")
    assert sonnet is not None and (sonnet.input, sonnet.cache_read_price, sonnet.cache_write_price) == (3, 0.3, 3.75)
    haiku = models.price_of("bedrock:claude-haiku-5-5")
    assert haiku is not None and (haiku.output, haiku.cache_read_price) == (5, 1), "cache priced as input"
    assert models.price_of("anthropic:claude-opus-9") is None


def test_a_project_may_override_one_price(example_descriptors: Path) -> None:
    add_prices(example_descriptors, SONNET)
    path = example_descriptors / "assembly.yaml"
    path.write_text(
        path.read_text().replace(
            'support: {title: "ACME support", react: {max_iterations: 20}}',
            'support: {title: "ACME support", models: {prices: {"anthropic:claude-sonnet-5-5": {output: 12}}}}',
        )
    )
    config = Configuration.load(example_descriptors)
    negotiated = config.settings_for("acme", "support").models.price_of("anthropic:claude-sonnet-5-5")
    listed = config.settings_for("acme", "internal").models.price_of("anthropic:claude-sonnet-5-5")
    assert negotiated is not None and (negotiated.input, negotiated.output) == (3, 12)
    assert listed is not None and listed.output == 15


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            '"anthropic:claude-sonnet-5-5": {input: 3, output: -15}',
            "assembly.yaml:12 platform.models.prices.anthropic:claude-sonnet-5-5.output: "
            "Input should be greater than or equal to 0; got a number (-15)",
        ),
        (
            "claude-haiku-5-5: {input: true, output: 5}",
            "assembly.yaml:12 platform.models.prices.claude-haiku-5-5.input: "
            "a price is a number of USD per million tokens, not true/false",
        ),
        (
            "claude-haiku-5-5: {input: 1}",
            "assembly.yaml:12 platform.models.prices.claude-haiku-5-5.output: required key 'output' is missing",
        ),
        (
            "claude-haiku-5-5: {input: 1, output: 5, cache_reads: 1}",
            "assembly.yaml:12 platform.models.prices.claude-haiku-5-5.cache_reads: unknown key 'cache_reads'; "
            "did you mean 'cache_read'?",
        ),
        (
            "claude-haiku-5-5: {input: .inf, output: 5}",
            "assembly.yaml:12 platform.models.prices.claude-haiku-5-5.input: Input should be a finite number",
        ),
    ],
)
def test_a_bad_price_names_the_model_key_and_the_field(example_descriptors: Path, entry: str, expected: str) -> None:
    add_prices(example_descriptors, entry)
    (problem,) = problems(example_descriptors)
    assert problem.startswith(expected), problem


def test_budgets_load_and_say_whom_they_limit(example_descriptors: Path) -> None:
    add_prices(example_descriptors, SONNET, HAIKU)
    add_budgets(
        example_descriptors,
        "{scope: acme/support, per_user: true, period: day, tokens: 200000}",
        "{scope: acme, period: month, cost_usd: 500}",
    )
    per_user, tenant = Configuration.load(example_descriptors).descriptors.gateway.budgets
    assert per_user.describe() == "each user of acme/support may spend 200,000 tokens a day"
    assert tenant.describe() == "acme may spend $500.00 a month"
    assert tenant.applies_to("acme", "internal") and not per_user.applies_to("acme", "internal")


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        (
            ["{scope: acme, period: month}"],
            ["gateway.yaml:{0} budgets[0]: a budget needs a limit: 'tokens', 'cost_usd' or both"],
        ),
        (
            ["{scope: acme, period: week, tokens: 10}"],
            ["gateway.yaml:{0} budgets[0].period: the text 'week' is not allowed; expected 'day' or 'month'"],
        ),
        (
            ["{scope: acme, period: day, tokens: -1}"],
            ["gateway.yaml:{0} budgets[0].tokens: Input should be greater than or equal to 0; got a number (-1)"],
        ),
        (
            ["{scope: acme, period: day, tokens: yes}"],
            ["gateway.yaml:{0} budgets[0].tokens: expected a whole number, got the text 'yes'"],
        ),
        (
            ["{scope: initech, period: day, tokens: 10}"],
            [
                "gateway.yaml:{0} budgets[0].scope: tenant 'initech' is not declared in assembly.yaml "
                "(known: acme, globex)"
            ],
        ),
        (
            ["{scope: acme/sales, period: day, tokens: 10}"],
            [
                "gateway.yaml:{0} budgets[0].scope: project 'sales' is not declared for tenant 'acme' in assembly.yaml "
                "(known: internal, support)"
            ],
        ),
        (
            ["{scope: acme/support, period: day, tokens: 10}", "{scope: acme/support, period: day, cost_usd: 1}"],
            [
                "gateway.yaml:{1} budgets[1]: repeats budgets[0] (scope 'acme/support', per_user false, period 'day'); "
                "give both limits in one entry"
            ],
        ),
    ],
)
def test_a_bad_budget_is_one_problem_naming_the_budget_and_the_field(
    example_descriptors: Path, entries: list[str], expected: list[str]
) -> None:
    add_prices(example_descriptors, SONNET, HAIKU)
    first = add_budgets(example_descriptors, *entries)
    assert problems(example_descriptors) == [problem.format(first, first + 1) for problem in expected]


def test_a_cost_budget_needs_a_price_for_every_model_its_scope_may_call(example_descriptors: Path) -> None:
    add_prices(example_descriptors, SONNET)
    first = add_budgets(example_descriptors, "{scope: acme/support, period: month, cost_usd: 100}")
    assert problems(example_descriptors) == [
        f"gateway.yaml:{first} budgets[0].cost_usd: a cost budget needs a price for every model its scope may call; "
        "platform.models.prices of assembly.yaml has none for 'anthropic:claude-haiku-5-5' (acme/support)"
    ]
