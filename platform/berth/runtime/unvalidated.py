"""A pydantic model instance built from values the runtime made itself, without validating them again.

``model_construct`` walks every field of the model for defaults and aliases (about 20,000 instructions for a
two-field prompt message), and validation costs more; for the few models a round makes several times from values
that are plainly valid (its blocks, its prompt messages), the instance is set up directly instead. The caller
gives every field, in the model's order, and is responsible for their validity (a test ties each caller to what
validation or ``model_construct`` makes).
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["unvalidated"]

_Model = TypeVar("_Model", bound=BaseModel)


def unvalidated(model: type[_Model], fields: dict[str, Any], fields_set: set[str] | None = None) -> _Model:
    """An instance of ``model`` holding ``fields`` (every field, in the model's order), not validated.

    :param fields_set: the fields counted as given (``model_fields_set``); all of ``fields`` by default. The
        model must have no private attributes and no extra fields.
    """
    instance = model.__new__(model)
    set_slot = object.__setattr__
    set_slot(instance, "__dict__", fields)
    set_slot(instance, "__pydantic_fields_set__", set(fields) if fields_set is None else fields_set)
    set_slot(instance, "__pydantic_extra__", None)
    set_slot(instance, "__pydantic_private__", None)
    return instance
