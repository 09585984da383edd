"""Write ``build-tools.lock``: the build tools' entries of ``requirements.lock``, hashes included.

The workers install it first (``--require-hashes``), then the whole lock with
``--no-build-isolation``, so a package that ships only an sdist (``antlr4-python3-runtime``)
is built with these hash-checked setuptools and wheel, never with ones pip would fetch
unchecked into an isolated build environment. ``make worker-lock`` runs it after resolving.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD_TOOLS = ("setuptools", "wheel")


def entries(lock: str, names: tuple[str, ...]) -> list[str]:
    """Each named package's ``name==version`` line and its ``--hash`` lines, in lock order."""
    blocks = re.findall(r"^([a-z0-9][a-z0-9._-]*==\S+ \\\n(?:    --hash=sha256:[0-9a-f]{64}"
                        r"(?: \\)?\n)+)", lock, re.M)
    found = [b for b in blocks if b.split("==", 1)[0] in names]
    missing = set(names) - {b.split("==", 1)[0] for b in found}
    if missing:
        sys.exit(f"requirements.lock pins no {', '.join(sorted(missing))}: add it to "
                 "requirements.in and rerun `make worker-lock`")
    return found


def main() -> None:
    lock = (HERE / "requirements.lock").read_text()
    text = ("# The build tools of requirements.lock (infra/worker/build_tools.py writes it; the\n"
            "# workers install it first, then the lock with --no-build-isolation).\n"
            + "".join(entries(lock, BUILD_TOOLS)))
    (HERE / "build-tools.lock").write_text(text)


if __name__ == "__main__":
    main()
