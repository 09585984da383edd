"""The base of every config model, the one config hash, and the ``OverridesOf`` field marker."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler
from pydantic_core import CoreSchema, core_schema


class Strict(BaseModel):
    """Base: unknown keys are errors, so a typo in a YAML file is caught."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class OverridesOf:
    """Field metadata: a mapping that overrides some fields of ``model``, each validated as there.

    ``Annotated[dict[str, Any], OverridesOf(TrainConfig)]``: an unknown key or a bad value
    fails at load time, and the error names ``field.key`` (``loading`` reads ``model``).
    """

    model: type[BaseModel]

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        """The mapping's own schema, then validation of its entries as ``model``'s fields."""
        return core_schema.no_info_after_validator_function(self._validate, handler(source))

    def _validate(self, overrides: dict[str, Any]) -> dict[str, Any]:
        """``overrides`` unchanged, once each entry is valid for ``model``."""
        self.model.model_validate(overrides)
        return overrides


def config_hash(config: BaseModel, exclude: Iterable[str] = ()) -> str:
    """Short SHA-256 of a config's JSON form (minus ``exclude``): tells whether settings changed."""
    settings = config.model_dump(mode="json", exclude=set(exclude))
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
