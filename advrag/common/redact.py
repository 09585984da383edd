"""Secrets out of messages: what an error prints or an MLflow tag keeps must not carry one.

A failed ``dvc remote modify … secret_access_key <key>`` prints its argv, a database URL holds
its password, an exception can quote a bearer token; an MLflow tag keeps whatever it is given
for everyone who can read the run. ``redact`` masks the values of this process's
secret-looking environment variables and the shapes secrets take in text.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

MASK = "***"
_SECRET_WORDS = r"password|passwd|secret|token(?!s)|api[_-]?key|access[_-]?key"
SECRET_NAME = re.compile(rf"(?i){_SECRET_WORDS}|auth|credential")
"""A variable name that looks secret (any ``auth``: ``ADVRAG_PREFECT_AUTH``)."""
_WORD = rf"(?:{_SECRET_WORDS}|authorization)"
"""A secret's name in text (``auth`` alone would match ordinary words: ``author``)."""
_VALUE = r"(?!\*\*\*)(\"[^\"]*\"|'[^']*'|[^\s,;&\"'`]+)"
_SHAPES = (
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"),
     MASK),
    (re.compile(r"(?i)\b(?:bearer|basic)\s+[\w.~+/=-]+"), MASK),
    (re.compile(rf"(?i)\b([\w-]*{_WORD}[\w-]*)([\"']?\s*[=:]\s*){_VALUE}"), rf"\1\2{MASK}"),
    (re.compile(rf"(?i)\b((?:[\w]+[_-])+{_WORD}(?:[_-][\w]+)*|{_WORD}(?:[_-][\w]+)+)(\s+)"
                rf"{_VALUE}"), rf"\1\2{MASK}"),
    (re.compile(rf"(?i)(--?[\w-]*{_WORD}[\w-]*)(\s+){_VALUE}"), rf"\1\2{MASK}"),
    (re.compile(r"(://[^/\s:@]+:)[^@\s/]+@"), rf"\1{MASK}@"),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), MASK),
    (re.compile(r"\bsk-[\w-]{8,}"), MASK),
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}"), MASK),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), MASK),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"), MASK),
)
"""Secrets in text: PEM private keys; bearer and basic credentials; ``name=value``,
``name: value`` or ``"name": value`` for a secret-looking name; ``compound_name value`` (a
command line: ``secret_access_key KEY``) and ``--name value`` options; URL passwords; AWS access
key ids; ``sk-`` keys; Hugging Face and GitHub tokens."""
SECRET_PARAM = re.compile(r"(?i)(?:^|[_-])(?:password|passwd|secret|api[_-]?key|access[_-]?key|"
                          r"token|credentials?)$")
"""A config field whose value is a secret (``judge.api_key``; not ``max_new_tokens``)."""


def environment_secrets(environ: dict[str, str] | None = None) -> list[str]:
    """Values of the environment's variables whose names look secret (8 characters or more)."""
    environ = os.environ if environ is None else environ
    return [v for k, v in environ.items() if SECRET_NAME.search(k) and len(v) >= 8]


def redact_param(name: str, value: str) -> str:
    """An MLflow param's value as it may be kept: masked whole under a secret field's name (its
    last dotted part, ``SECRET_PARAM``), else ``redact``-ed."""
    if value and SECRET_PARAM.search(name.rsplit(".", 1)[-1]):
        return MASK
    return redact(value)


def redact(text: str, secrets: Iterable[str] | None = None) -> str:
    """``text`` with ``secrets`` (default: ``environment_secrets()``) and secret shapes
    (``name=value`` for secret-looking names, bearer tokens, URL passwords, AWS access key
    ids, ``sk-`` keys) masked."""
    for secret in sorted(environment_secrets() if secrets is None else secrets,
                         key=len, reverse=True):
        if secret:
            text = text.replace(secret, MASK)
    for pattern, replacement in _SHAPES:
        text = pattern.sub(replacement, text)
    return text
