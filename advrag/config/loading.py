"""Reading a config file: YAML, its ``extends:`` chain, then validation into a flow's model.

Every problem is one ``ConfigError`` whose message names the file, each bad
field by its dotted path (``train.optim.lr``), what is wrong and the fix — the
CLI prints it as it is, without a traceback. One problem fits on one line::

    my.yaml: invalid GrpoConfig config: optim.lr_rate: unknown field — did you mean 'lr'?

several are listed one per line under that header.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from advrag.config.base import OverridesOf, Strict


class ConfigError(ValueError):
    """A config file that cannot be used; the message says where and how to fix it."""


def load_config(path: Path | str, model: type[Strict], overrides: dict | None = None) -> Strict:
    """Read a YAML file (after its ``extends:`` chain, then ``overrides``) into ``model``.

    Raises ``ConfigError`` naming the file and each bad field, or ``FileNotFoundError``.
    """
    path = Path(path)
    raw = merged(read_yaml_mapping(path, chain=()), overrides or {})
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        source = f"{path} with overrides {overrides}" if overrides else str(path)
        raise ConfigError(error_message(source, model, err)) from None


def parse_overrides(settings: Iterable[str]) -> dict:
    """``key.sub=value`` settings (the command line's ``--set``) as one nested mapping, each
    value read as YAML (``8`` an int, ``null`` None, ``[a, b]`` a list); a later setting of
    the same key wins. Validation is the file's: ``load_config`` lays the mapping over it."""
    result: dict = {}
    for setting in settings:
        key, equals, text = setting.partition("=")
        parts = key.strip().split(".")
        if not equals or not all(parts):
            raise ConfigError(f"--set {setting!r}: write it as key=value, with a dotted key for a "
                              "nested setting, e.g. --set optim.lr=1.0e-5")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise ConfigError(f"--set {setting!r}: the value is not valid YAML — "
                              f"{err}".replace("\n", " ")) from None
        for part in reversed(parts):
            value = {part: value}
        result = merged(result, value)
    return result


def error_message(source: str, model: type[BaseModel], err: ValidationError) -> str:
    """The one message for ``err``: one line for one problem, else a line per problem."""
    head = f"{source}: invalid {model.__name__} config:"
    problems = describe_errors(err.errors(), model)
    if len(problems) == 1:
        return f"{head} {problems[0]}"
    return "\n".join([head, *(f"  - {problem}" for problem in problems)])


def describe_errors(errors: Iterable[dict[str, Any]], model: type[BaseModel]) -> list[str]:
    """One ``field: what is wrong — the fix`` per bad place (a union's failed branches merged)."""
    at: dict[str, list[tuple[dict[str, Any], FieldInfo | None, list[str]]]] = {}
    for error in errors:
        path, field, siblings = locate(model, error["loc"])
        at.setdefault(path, []).append((error, field, siblings))
    return [_describe(path, found) for path, found in at.items()]


def _describe(path: str, found: list[tuple[dict[str, Any], FieldInfo | None, list[str]]]) -> str:
    """The line for the errors ``found`` at ``path``."""
    error, field, siblings = found[0]
    if error["type"] == "value_error":  # a validator's message names the field and the fix
        message = str(error["ctx"]["error"])
        return f"{path}: {message}" if path else message
    where = path or "(top level)"
    if error["type"] == "extra_forbidden":
        fix = did_you_mean(str(error["loc"][-1]), siblings) or _valid_fields(siblings)
        return f"{where}: unknown field — {fix}"
    what = " or ".join(dict.fromkeys(e["msg"] for e, _, _ in found))
    got = "" if isinstance(error.get("input"), dict) else f" (got {error['input']!r})"
    return f"{where}: {what}{got} — {_fix(error, field, where)}"


def _fix(error: dict[str, Any], field: FieldInfo | None, where: str) -> str:
    """The closest allowed value of a choice, else what the field is for."""
    if error["type"] == "literal_error":
        choices = re.findall(r"'([^']*)'", error["ctx"]["expected"])
        close = did_you_mean(str(error["input"]), choices)
        if close:
            return close
    about = field.description if field else None
    return f"set a valid value ({where} is: {about})" if about else "set a valid value"


def _valid_fields(names: list[str]) -> str:
    """The fix for an unknown field with no close match."""
    return f"remove it; valid fields here: {', '.join(sorted(names))}" if names else "remove it"


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """``did you mean 'x'?`` for the choice closest to ``word``, or None.

    Close means similar (difflib ratio ≥ 0.6: ``modle``, ``topkk``) or a prefix of
    ``word`` (``lr`` for ``lr_rate``, ``r`` for ``rank``), the longest such choice.
    """
    choices = list(choices)
    prefixes = sorted((c for c in choices if word.startswith(c)), key=len, reverse=True)
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6) or prefixes[:1]
    return f"did you mean {close[0]!r}?" if close else None


def locate(model: type[BaseModel], loc: tuple) -> tuple[str, FieldInfo | None, list[str]]:
    """Where pydantic's ``loc`` points: ``(dotted path, its field, the field names beside it)``.

    Fields and mapping keys join with dots, list items read ``[i]``, union branch
    tags (``str``, ``list[str]``) and ``[key]`` markers are dropped.
    """
    path, field, siblings, annotation = "", None, [], model
    for part in loc:
        nested = _model_of(annotation)
        if nested is not None:
            siblings = list(nested.model_fields)
            field = nested.model_fields.get(part)
            annotation = _annotation_of(field) if field else None
            path = f"{path}.{part}" if path else str(part)
        elif isinstance(part, int):
            path, annotation = f"{path}[{part}]", _member(annotation, 0)
        elif get_origin(annotation) is dict:
            path, annotation = f"{path}.{part}", _member(annotation, 1)
        else:
            annotation = None
    return path, field, siblings


def _annotation_of(field: FieldInfo) -> Any:
    """A field's type; for an ``OverridesOf`` mapping, the model whose fields it overrides."""
    marks = [m.model for m in field.metadata if isinstance(m, OverridesOf)]
    return marks[0] if marks else field.annotation


def _member(annotation: Any, index: int) -> Any:
    """The ``index``-th type argument of a container type (``list[X]``: X), if any."""
    args = get_args(_unwrap(annotation))
    return args[index] if len(args) > index else None


def _unwrap(annotation: Any) -> Any:
    """``annotation`` without ``Annotated[…]`` and without a ``None`` branch."""
    if get_origin(annotation) is Annotated:
        return _unwrap(get_args(annotation)[0])
    args = [a for a in get_args(annotation) if a is not type(None)]
    if _is_union(annotation) and len(args) == 1:
        return _unwrap(args[0])
    return annotation


def _is_union(annotation: Any) -> bool:
    """Whether ``annotation`` is ``X | Y`` or ``Union[X, Y]``."""
    return get_origin(annotation) in (Union, UnionType)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation is (``X``, ``X | None``), if it is one."""
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
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
    except (yaml.YAMLError, UnicodeDecodeError) as err:
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
