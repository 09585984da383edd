"""The base of every config model, and the one config hash."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """Base: unknown keys are errors, so a typo in a YAML file is caught."""

    model_config = ConfigDict(extra="forbid")


def config_hash(config: BaseModel, exclude: Iterable[str] = ()) -> str:
    """Short SHA-256 of a config's JSON form (minus ``exclude``): tells whether settings changed."""
    settings = config.model_dump(mode="json", exclude=set(exclude))
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
