"""Reading a config file: YAML, its ``extends:`` chain, then validation into a flow's model."""

from __future__ import annotations

from pathlib import Path

import yaml

from advrag.config.base import Strict


def load_config(path: Path | str, model: type[Strict]) -> Strict:
    """Read a YAML file (after its ``extends:`` chain) into ``model``; errors name the file and field."""
    path = Path(path)
    raw = read_yaml_mapping(path, chain=())
    try:
        return model.model_validate(raw)
    except Exception as err:
        raise ValueError(f"{path}: invalid {model.__name__}:\n{err}") from err


def read_yaml_mapping(path: Path, chain: tuple[Path, ...]) -> dict:
    """The YAML mapping of ``path``, laid over the file its ``extends:`` names (relative to it).

    Nested mappings merge key by key; any other value, null included, replaces
    the parent's. ``chain`` holds the files that extend this one (cycle check).
    """
    if not path.is_file():
        named_by = f" (named by extends: in {chain[-1]})" if chain else " (see configs/ for examples)"
        raise FileNotFoundError(f"Config file {path} does not exist{named_by}.")
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}.")
    parent = raw.pop("extends", None)
    if parent is None:
        return raw
    if not isinstance(parent, str):
        raise ValueError(f"{path}: extends: takes one file path (relative to {path.parent}), "
                         f"got {parent!r}.")
    parent_path = (path.parent / parent).resolve()
    if parent_path in chain or parent_path == path.resolve():
        cycle = " → ".join(str(p) for p in (*chain, path.resolve(), parent_path))
        raise ValueError(f"{path}: extends: makes a cycle ({cycle}); remove one of the links.")
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
