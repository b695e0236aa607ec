"""Building blocks shared by the descriptor models: the strict base model, names, secret settings."""

from __future__ import annotations

import re
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetJsonSchemaHandler, create_model
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

BUNDLE_ID_PATTERN = r"^[a-z][a-z0-9-]{1,62}$"
SCOPE_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
SCOPE_KEY_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}(/[a-z0-9][a-z0-9_-]{0,62})?$"
SECRET_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$"
SECRET_REF_PREFIX = "secret:"

BundleId = Annotated[str, Field(pattern=BUNDLE_ID_PATTERN, description="a bundle id: [a-z][a-z0-9-]{1,62}")]
ScopeName = Annotated[str, Field(pattern=SCOPE_NAME_PATTERN, description="a tenant or project name")]
ScopeKey = Annotated[
    str,
    Field(pattern=SCOPE_KEY_PATTERN, description="'tenant' or 'tenant/project', declared in assembly.yaml"),
]
SecretName = Annotated[str, Field(pattern=SECRET_NAME_PATTERN, description="a secret's name")]


class DescriptorModel(BaseModel):
    """Base of every descriptor model: unknown keys are errors, values are immutable records."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, defer_build=True)


class SecretSetting:
    """A setting whose value is secret: a ``secret:NAME`` reference, or a literal that is masked.

    Its ``str``/``repr`` and its serialized form show the reference (a locator, safe to print) or
    ``***`` for a literal. The value is only reachable through the secret resolver.
    """

    __slots__ = ("_raw",)

    def __init__(self, raw: str) -> None:
        if not raw:
            raise ValueError("a secret setting may not be empty")
        self._raw = raw

    @property
    def ref_name(self) -> str | None:
        """The secret's name in ``secrets.yaml`` when this is a ``secret:NAME`` reference."""
        return self._raw[len(SECRET_REF_PREFIX) :] if self._raw.startswith(SECRET_REF_PREFIX) else None

    @property
    def display(self) -> str:
        """What may be shown: the reference itself, or ``***`` for a literal value."""
        return self._raw if self.ref_name is not None else "***"

    def literal_value(self) -> str:
        """The literal value (for the secret resolver only); a reference has none."""
        if self.ref_name is not None:
            raise ValueError("a secret: reference has no literal value; resolve it")
        return self._raw

    def __repr__(self) -> str:
        return f"SecretSetting({self.display!r})"

    def __str__(self) -> str:
        return self.display

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretSetting) and other._raw == self._raw

    def __hash__(self) -> int:
        return hash(("SecretSetting", self._raw))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        def from_value(value: Any) -> SecretSetting:
            return value if isinstance(value, SecretSetting) else cls(value)

        return core_schema.no_info_after_validator_function(
            from_value,
            core_schema.union_schema([core_schema.is_instance_schema(cls), core_schema.str_schema()]),
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda value: value.display, when_used="json"
            ),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {
            "type": "string",
            "minLength": 1,
            "description": "a secret: 'secret:NAME' (resolved from secrets.yaml) or a literal value",
        }


def partial_model(model: type[BaseModel], name: str | None = None) -> type[DescriptorModel]:
    """Return a model with ``model``'s fields, each optional (``None`` = not overridden).

    Nested models become partial too, also inside mappings (``dict[str, Model]``), so an override
    may name only the fields it changes; unknown keys remain errors. The merged result is validated
    against the full model afterwards.
    """
    fields: dict[str, Any] = {}
    for field_name, info in model.model_fields.items():
        annotation = _partial_annotation(info.annotation)
        fields[field_name] = (annotation | None, Field(default=None, description=info.description))
    partial: type[DescriptorModel] = create_model(
        name or f"{model.__name__}Override", __base__=DescriptorModel, **fields
    )
    partial.__doc__ = f"Override of {model.__name__}: every field optional, merged over the wider scope."
    return partial


def _partial_annotation(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return partial_model(annotation)
    if get_origin(annotation) is dict:
        key, value = get_args(annotation)
        if isinstance(value, type) and issubclass(value, BaseModel):
            return dict.__class_getitem__((key, partial_model(value)))
    return annotation


def is_secret_ref(value: Any) -> bool:
    """True when ``value`` is a string of the form ``secret:NAME``."""
    return isinstance(value, str) and value.startswith(SECRET_REF_PREFIX)


def secret_ref_name(value: str) -> str:
    """The NAME of a ``secret:NAME`` string."""
    return value[len(SECRET_REF_PREFIX) :]


def is_valid_secret_name(name: str) -> bool:
    """True when ``name`` may name a secret in ``secrets.yaml``."""
    return re.fullmatch(SECRET_NAME_PATTERN, name) is not None


__all__ = [
    "BUNDLE_ID_PATTERN",
    "BundleId",
    "DescriptorModel",
    "ScopeKey",
    "ScopeName",
    "SecretName",
    "SecretSetting",
    "is_secret_ref",
    "is_valid_secret_name",
    "partial_model",
    "secret_ref_name",
]
