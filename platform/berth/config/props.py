"""A bundle's effective props: model defaults ⊕ ``bundles.<id>.props`` ⊕ tenant ⊕ project (SPEC §2.2)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from berth.config.descriptors import BUNDLES, DescriptorSet
from berth.config.errors import DescriptorError
from berth.config.layers import Layer, problems_in_layers
from berth.config.merge import deep_merge

PropsModel = TypeVar("PropsModel", bound=BaseModel)


def props_layers(descriptors: DescriptorSet, bundle_id: str, tenant: str | None, project: str | None) -> list[Layer]:
    """The ``bundles.yaml`` layers of a bundle's props for a scope, lowest first."""
    document = descriptors.document(BUNDLES)
    data = document.data if isinstance(document.data, dict) else {}
    bundle = (data.get("bundles") or {}).get(bundle_id) or {}
    layers = [Layer(document.file, ("bundles", bundle_id, "props"), bundle.get("props") or {}, document.lines)]
    scope_keys = [tenant] if tenant else []
    if tenant and project:
        scope_keys.append(f"{tenant}/{project}")
    for key in scope_keys:
        entry = (data.get("tenants") or {}).get(key) or {}
        scoped = (entry.get("props") or {}).get(bundle_id) or {}
        layers.append(Layer(document.file, ("tenants", key, "props", bundle_id), scoped, document.lines))
    return layers


def merged_props(descriptors: DescriptorSet, bundle_id: str, tenant: str | None, project: str | None) -> dict[str, Any]:
    """The props overrides of every layer merged (without model defaults or validation)."""
    return deep_merge(*(layer.data for layer in props_layers(descriptors, bundle_id, tenant, project)))


def effective_props(
    descriptors: DescriptorSet,
    bundle_id: str,
    props_model: type[PropsModel],
    tenant: str | None = None,
    project: str | None = None,
) -> PropsModel:
    """Validate the bundle's props for a scope against its props model.

    Mappings deep-merge over the model's defaults; lists and scalars replace them. A bad override
    raises :class:`DescriptorError` naming ``bundles.yaml``, its line, the bundle and the field.
    """
    layers = props_layers(descriptors, bundle_id, tenant, project)
    defaults = _model_defaults(props_model)
    merged = deep_merge(defaults, *(layer.data for layer in layers))
    try:
        return props_model.model_validate(merged)
    except ValidationError as exc:
        note = f" (props of bundle '{bundle_id}', model {props_model.__name__})"
        raise DescriptorError(problems_in_layers(exc, props_model, layers, note=note)) from None


def _model_defaults(model: type[BaseModel]) -> dict[str, Any]:
    """The fields of ``model`` that have defaults, as plain data."""
    defaults: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if field.is_required():
            continue
        value = field.get_default(call_default_factory=True, validated_data={})
        defaults[name] = value.model_dump() if isinstance(value, BaseModel) else value
    return defaults
