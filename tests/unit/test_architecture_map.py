"""docs/architecture.md's code map stays true: every package under advrag/, flows/, tasks/ and
models/ (and every module at advrag/'s top) is named there, and every module or folder the map
names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
CODE = ("advrag", "flows", "tasks", "models")


def code_map() -> dict[str, str]:
    """Each row of the code map: its path cell (a backticked path) → its description."""
    text = PAGE.read_text()
    table = text[text.index("## The code map"):].split("\n## ", 1)[0]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and (path := re.match(r"`([^`]+)`", cells[0])):
            rows[path.group(1)] = cells[1]
    return rows


def packages() -> list[str]:
    """Every package (a folder with ``__init__.py``) under the code folders, as ``a/b/``
    (``advrag/`` itself is the whole, not a group)."""
    found = [p.parent.relative_to(ROOT).as_posix() + "/"
             for top in CODE for p in (ROOT / top).rglob("__init__.py")]
    return sorted(p for p in found if "__pycache__" not in p and p != "advrag/")


def named_in(rows: dict[str, str], path: str) -> bool:
    """``path`` is a row of its own, or a backticked name (``name/``) in its parent's row."""
    if path in rows or any(path in cell.split() for cell in rows):
        return True
    parent, name = path.rstrip("/").rsplit("/", 1) if "/" in path.rstrip("/") else ("", path)
    return f"`{name.rstrip('/')}/`" in rows.get(parent + "/", "")


def test_every_package_and_top_module_is_on_the_map():
    rows = code_map()
    missing = [p for p in packages() if not named_in(rows, p)]
    top_modules = [p.name for p in (ROOT / "advrag").glob("*.py") if p.name != "__init__.py"]
    missing += [f"advrag/{m}" for m in top_modules
                if not any(f"`{m}`" in d or f"advrag/{m}" in path for path, d in rows.items())]
    assert missing == [], f"docs/architecture.md's code map does not name {missing}"


def test_every_module_the_map_names_exists():
    gone = []
    for path, description in code_map().items():
        if not path.startswith(tuple(f"{c}/" for c in CODE)):
            continue
        base = ROOT / path.split(" ")[0].rstrip("/")
        if not base.exists():
            gone.append(path)
            continue
        for name in re.findall(r"`([\w./-]+\.(?:py|cpp)|[\w-]+/)`", description):
            if not ((base / name).exists() or (ROOT / name).exists()):
                gone.append(f"{path} {name}")
    assert gone == [], f"docs/architecture.md's code map names what is not there: {gone}"
