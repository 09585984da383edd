"""Reading a config file: YAML, its ``extends:`` chain, then validation into a flow's model.

Every problem is one ``ConfigError`` whose message names the file, each bad
field by its dotted path (``train.optim.lr``), what is wrong and the fix — the
CLI prints it as it is, without a traceback.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from advrag.config.base import Strict


class ConfigError(ValueError):
    """A config file that cannot be used; the message says where and how to fix it."""


def load_config(path: Path | str, model: type[Strict]) -> Strict:
    """Read a YAML file (after its ``extends:`` chain) into ``model``; errors name the file and field."""
    path = Path(path)
    raw = read_yaml_mapping(path, chain=())
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        problems = [describe_error(e, model) for e in err.errors()]
        raise ConfigError(f"{path}: invalid {model.__name__} config:\n"
                          + "\n".join(f"  - {p}" for p in problems)) from None


def describe_error(error: dict[str, Any], model: type[BaseModel]) -> str:
    """One validation error as ``field: what is wrong — the fix``."""
    field = ".".join(str(part) for part in error["loc"]) or "(top level)"
    if error["type"] == "extra_forbidden":
        return f"{field}: unknown field — {_unknown_field_fix(error['loc'], model)}"
    got = f" (got {error['input']!r})" if not isinstance(error.get("input"), dict) else ""
    about = _description_at(model, error["loc"])
    fix = f"set a valid value ({field} is: {about})" if about else "set a valid value"
    return f"{field}: {error['msg']}{got} — {fix}"


def _unknown_field_fix(loc: tuple, model: type[BaseModel]) -> str:
    """Suggest the closest valid field at that place, or list the valid ones."""
    fields = _fields_at(model, loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), fields, n=1, cutoff=0.4)
    if close:
        return f"did you mean {close[0]!r}?"
    return f"remove it; valid fields here: {', '.join(sorted(fields))}" if fields else "remove it"


def _fields_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """The field names of the (nested) model at ``loc`` (list indices skipped)."""
    nested = _model_at(model, loc)
    return list(nested.model_fields) if nested else []


def _description_at(model: type[BaseModel], loc: tuple) -> str | None:
    """The description of the field at ``loc``, if ``loc`` names one."""
    parent = _model_at(model, tuple(p for p in loc if isinstance(p, str))[:-1])
    names = [p for p in loc if isinstance(p, str)]
    info = parent.model_fields.get(names[-1]) if parent and names else None
    return info.description if info else None


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The (nested) model whose fields sit at ``loc`` (list indices skipped), if any."""
    for part in loc:
        if not isinstance(part, str):
            continue
        info = model.model_fields.get(part)
        nested = _model_of(info.annotation) if info else None
        if nested is None:
            return None
        model = nested
    return model


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (``X``, ``X | None``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def read_yaml_mapping(path: Path, chain: tuple[Path, ...]) -> dict:
    """The YAML mapping of ``path``, laid over the file its ``extends:`` names (relative to it).

    Nested mappings merge key by key; any other value, null included, replaces
    the parent's. ``chain`` holds the files that extend this one (cycle check).
    """
    if not path.is_file():
        named_by = f" (named by extends: in {chain[-1]})" if chain else " (see configs/ for examples)"
        raise FileNotFoundError(f"Config file {path} does not exist{named_by}.")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML — {err}".replace("\n", " ")) from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}.")
    parent = raw.pop("extends", None)
    if parent is None:
        return raw
    if not isinstance(parent, str):
        raise ConfigError(f"{path}: extends: takes one file path (relative to {path.parent}), "
                         f"got {parent!r}.")
    parent_path = (path.parent / parent).resolve()
    if parent_path in chain or parent_path == path.resolve():
        cycle = " → ".join(str(p) for p in (*chain, path.resolve(), parent_path))
        raise ConfigError(f"{path}: extends: makes a cycle ({cycle}); remove one of the links.")
    return merged(read_yaml_mapping(parent_path, (*chain, path.resolve())), raw)


def merged(base: dict, override: dict) -> dict:
    """``override`` laid over ``base``: mappings merge recursively, other values replace."""
    result = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result
