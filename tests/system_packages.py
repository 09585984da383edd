"""Debian packages the tests install themselves (PostgreSQL, Chromium, g++), or skip saying why."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from typing import TypeVar

import pytest

Found = TypeVar("Found")


def apt_install(package: str, find: Callable[[], Found | None], *, timeout_s: int = 900) -> Found:
    """``apt-get update && apt-get install -y package``, then ``find()`` what the tests need.

    The one place a system-package test skips: only when the package cannot be
    installed here (no apt, no network to Debian, no permission), saying which
    command failed and how. Installed but unusable is a failure.
    """
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    problem = None
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", package]):
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired) as err:
            problem = f"`{' '.join(cmd)}` could not run: {err}"
            break
        if proc.returncode != 0:
            problem = f"`{' '.join(cmd)}` failed: {proc.stderr.strip()[-500:]}"
            break
    if problem is not None:
        pytest.skip(f"{package} is not installed and could not be installed here: {problem}")
    found = find()
    if found is None:  # installed, yet unusable: a real failure, never hidden as a skip
        pytest.fail(f"apt-get installed {package}, but what the tests need from it is missing")
    return found
