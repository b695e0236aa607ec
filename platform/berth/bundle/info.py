"""A bundle's identity (:class:`BundleInfo`) and its agent definition (:class:`AgentSpec`)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from berth.config.models.common import BUNDLE_ID_PATTERN


class EmptyProps(BaseModel):
    """Props model of a bundle that declares none: accepts nothing."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class BundleInfo(BaseModel):
    """Returned by ``berth_bundle()``: who the bundle is and the model of its props.

    ``id`` must match the id the operator gives it in ``bundles.yaml``. ``props_model`` is a pydantic
    model whose fields all have defaults; descriptors override them per tenant/project.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    id: str = Field(pattern=BUNDLE_ID_PATTERN)
    version: str = Field(min_length=1)
    title: str = ""
    description: str = ""
    props_model: type[BaseModel] = EmptyProps

    @field_validator("props_model")
    @classmethod
    def _props_model_is_constructible(cls, model: type[BaseModel]) -> type[BaseModel]:
        required = [name for name, field in model.model_fields.items() if field.is_required()]
        if required:
            raise ValueError(f"props model {model.__name__} has fields without defaults: {', '.join(required)}")
        return model


class AgentSpec(BaseModel):
    """Returned by ``berth_agent(ctx)``: how the shared ReAct runtime serves this bundle's chat.

    ``react`` overrides the scope's ``platform.react`` settings (``max_iterations`` and friends);
    ``tools`` limits the catalog to these tool ids or ``namespace.*`` patterns (None = all).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    instructions: str = ""
    model_role: str | None = None
    react: dict[str, Any] = Field(default_factory=dict)
    channels: list[str] = Field(default_factory=list)
    tools: list[str] | None = None

    @field_validator("tools")
    @classmethod
    def _tool_patterns(cls, patterns: list[str] | None) -> list[str] | None:
        for pattern in patterns or []:
            if not re.fullmatch(r"[a-z][a-z0-9_-]*(\.[A-Za-z0-9_*-]+)+|[a-z][a-z0-9_-]*\.\*", pattern):
                raise ValueError(f"'{pattern}' is not a tool id or 'namespace.*' pattern")
        return patterns
