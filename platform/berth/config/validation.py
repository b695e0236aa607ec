"""Turning pydantic validation errors into :class:`DescriptorProblem` s an operator can act on."""

from __future__ import annotations

import difflib
import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from berth.config.errors import DescriptorError, DescriptorProblem
from berth.config.yamlsource import YamlDocument, format_field_path


def validate_document(model: type[BaseModel], document: YamlDocument) -> Any:
    """Validate ``document.data`` against ``model``; raise every problem at once with lines."""
    try:
        return model.model_validate(document.data)
    except ValidationError as exc:
        raise DescriptorError(problems_from_validation(exc, model, document)) from None


def problems_from_validation(
    exc: ValidationError, model: type[BaseModel], document: YamlDocument, prefix: tuple[Any, ...] = ()
) -> list[DescriptorProblem]:
    """Map each pydantic error of ``exc`` to a problem in ``document`` (``prefix`` = where ``model`` sits)."""
    problems = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        clean, allowed = clean_location(model, loc)
        full = (*prefix, *clean)
        line, _ = document.lines.locate(full)
        problems.append(
            DescriptorProblem(document.file, line, format_field_path(full), error_message(error, clean, allowed))
        )
    return problems


def describe_value(value: Any) -> str:
    """Name a YAML value's kind the way an operator thinks of it."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, int | float):
        return f"a number ({value})"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the text '{shown}'"
    return type(value).__name__


def error_message(error: Any, clean: tuple[Any, ...], allowed: list[str]) -> str:
    """Phrase one pydantic error for an operator (``clean`` is its path, ``allowed`` the keys there)."""
    kind = error["type"]
    value = error.get("input")
    if kind == "extra_forbidden":
        key = clean[-1] if clean else "?"
        hint = difflib.get_close_matches(str(key), allowed, n=1)
        suggestion = f"; did you mean '{hint[0]}'?" if hint else ""
        known = f" (known: {', '.join(allowed)})" if allowed and not hint else ""
        return f"unknown key '{key}'{suggestion}{known}"
    if kind == "missing":
        return f"required key '{clean[-1] if clean else '?'}' is missing"
    if kind in {"dict_type", "model_type", "model_attributes_type"}:
        return f"expected a mapping, got {describe_value(value)}"
    if kind == "list_type":
        return f"expected a list, got {describe_value(value)}"
    if kind in {"string_type"}:
        return f"expected text, got {describe_value(value)}"
    if kind in {"int_type", "int_parsing", "int_from_float"}:
        return f"expected a whole number, got {describe_value(value)}"
    if kind in {"float_type", "float_parsing"}:
        return f"expected a number, got {describe_value(value)}"
    if kind in {"bool_type", "bool_parsing"}:
        return f"expected true or false, got {describe_value(value)}"
    if kind == "string_pattern_mismatch":
        pattern = error.get("ctx", {}).get("pattern", "")
        return f"invalid value '{value}': it must match {pattern}"
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        return f"{describe_value(value)} is not allowed; expected {expected}"
    message = str(error["msg"])
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    elif value is not None and not isinstance(value, dict | list):
        message = f"{message}; got {describe_value(value)}"
    return message


def clean_location(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[tuple[Any, ...], list[str]]:
    """Drop the parts of a pydantic ``loc`` that are not in the document (union tags, key markers).

    Returns the cleaned path and the keys allowed in the mapping that holds its last element (used
    to suggest a correction for an unknown key).
    """
    clean: list[Any] = []
    current: Any = model
    allowed: list[str] = []
    for element in loc:
        current = _unwrap(current)
        if element == "[key]":
            continue
        members = _union_members(current)
        if members:
            chosen = _pick_member(members, element)
            if chosen is not None:
                current = chosen
                continue
            current = next((m for m in members if _is_model(m)), members[0])
            current = _unwrap(current)
        if _is_model(current):
            fields = current.model_fields
            allowed = sorted(fields)
            clean.append(element)
            current = fields[element].annotation if element in fields else Any
        elif get_origin(current) is dict:
            clean.append(element)
            current = get_args(current)[1]
        elif get_origin(current) is list:
            clean.append(element)
            current = get_args(current)[0]
        else:
            clean.append(element)
            current = Any
    return tuple(clean), allowed


def _unwrap(tp: Any) -> Any:
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if _union_members(tp):
        non_none = [m for m in get_args(tp) if m is not type(None)]
        if len(non_none) == 1:
            return _unwrap(non_none[0])
    return tp


def _union_members(tp: Any) -> list[Any]:
    if get_origin(tp) in (Union, types.UnionType):
        return [_strip_annotated(m) for m in get_args(tp) if m is not type(None)]
    return []


def _strip_annotated(tp: Any) -> Any:
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return tp


def _pick_member(members: list[Any], element: Any) -> Any | None:
    """Return the union member that a pydantic loc element (a tag or a type name) selects."""
    for member in members:
        if _is_model(member):
            if element == member.__name__:
                return member
            for field in member.model_fields.values():
                if get_origin(field.annotation) is not None and element in get_args(field.annotation):
                    return member
        elif isinstance(element, str) and (element == getattr(member, "__name__", None) or "[" in element):
            return member
    return None


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)
