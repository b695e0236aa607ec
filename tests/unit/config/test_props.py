"""A bundle's effective props: model defaults ⊕ bundles.<id>.props ⊕ tenant ⊕ project."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from berth.config import Configuration, DescriptorError


class WebTools(BaseModel):
    max_results: int = 3
    timeout_s: float = 10.0


class DocsProps(BaseModel):
    greeting: str = "Hello"
    knowledge_dir: str = "./knowledge"
    tags: list[str] = Field(default_factory=lambda: ["default"])
    tools: dict[str, WebTools] = Field(default_factory=lambda: {"web": WebTools()})
    limits: dict[str, int] = Field(default_factory=lambda: {"a": 1, "b": 2})


BUNDLES = """
bundles:
  docs:
    source: {entry_point: docs}
    props:
      greeting: Platform hello
      tags: [platform]
      limits: {b: 20}
tenants:
  acme:
    bundles: [docs]
    props:
      docs: {tools: {web: {max_results: 5}}, tags: [tenant-a, tenant-b]}
  acme/support:
    props:
      docs: {greeting: Support hello, limits: {c: 300}}
"""


@pytest.fixture
def config(tmp_path: Path) -> Configuration:
    (tmp_path / "assembly.yaml").write_text("tenants:\n  acme: {projects: {support: {}, sales: {}}}\n")
    (tmp_path / "bundles.yaml").write_text(BUNDLES)
    return Configuration.load(tmp_path)


def test_model_defaults_fill_what_no_descriptor_sets(config: Configuration) -> None:
    props = config.bundle_props("docs", DocsProps)
    assert props.knowledge_dir == "./knowledge"
    assert props.tools["web"] == WebTools()


def test_bundle_props_override_defaults(config: Configuration) -> None:
    props = config.bundle_props("docs", DocsProps)
    assert props.greeting == "Platform hello"
    assert props.limits == {"a": 1, "b": 20}


def test_tenant_props_merge_over_bundle_props(config: Configuration) -> None:
    props = config.bundle_props("docs", DocsProps, "acme", "sales")
    assert props.greeting == "Platform hello"
    assert props.tools["web"] == WebTools(max_results=5, timeout_s=10.0)


def test_project_props_merge_over_tenant_props(config: Configuration) -> None:
    props = config.bundle_props("docs", DocsProps, "acme", "support")
    assert props.greeting == "Support hello"
    assert props.tools["web"].max_results == 5
    assert props.limits == {"a": 1, "b": 20, "c": 300}


def test_lists_are_replaced_not_merged(config: Configuration) -> None:
    assert config.bundle_props("docs", DocsProps).tags == ["platform"]
    assert config.bundle_props("docs", DocsProps, "acme", "support").tags == ["tenant-a", "tenant-b"]


def test_project_entry_without_bundles_inherits_the_tenants_list(config: Configuration) -> None:
    assert config.descriptors.visible_bundles("acme", "support") == ["docs"]


def test_a_bad_override_names_file_line_bundle_and_field(tmp_path: Path) -> None:
    (tmp_path / "assembly.yaml").write_text("tenants:\n  acme: {projects: {support: {}}}\n")
    (tmp_path / "bundles.yaml").write_text(BUNDLES.replace("max_results: 5", "max_results: five"))
    config = Configuration.load(tmp_path)
    with pytest.raises(DescriptorError) as caught:
        config.bundle_props("docs", DocsProps, "acme", "support")
    (problem,) = caught.value.problems
    assert problem.file.endswith("bundles.yaml")
    assert problem.line == 13
    assert problem.field == "tenants.acme.props.docs.tools.web.max_results"
    assert "bundle 'docs'" in problem.message
    assert "expected a whole number" in problem.message


def test_an_unknown_prop_is_reported_when_the_model_forbids_extras(tmp_path: Path) -> None:
    class StrictProps(BaseModel, extra="forbid"):
        greeting: str = "hi"

    (tmp_path / "bundles.yaml").write_text(
        "bundles:\n  docs:\n    source: {entry_point: docs}\n    props: {greting: x}\n"
    )
    with pytest.raises(DescriptorError) as caught:
        Configuration.load(tmp_path).bundle_props("docs", StrictProps)
    (problem,) = caught.value.problems
    assert (problem.line, problem.field) == (4, "bundles.docs.props.greting")
    assert "did you mean 'greeting'?" in problem.message
