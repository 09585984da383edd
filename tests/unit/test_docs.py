"""The README is a front door and the docs stay inside the repository.

The site itself is built with ``mkdocs build --strict`` by ``make test`` (links and anchors between
pages, the generated result tables); these checks cover what that build does not see.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_readme_is_at_most_300_lines():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


def test_no_page_links_outside_the_repository():
    """No web links (markdown or autolinks) and no paths that leave the checkout."""
    for page in PAGES:
        text = page.read_text()
        outside = [t for t in LINK.findall(text) if re.match(r"[a-z]+:", t)]
        assert not outside, f"{page.name} links outside the repository: {outside}"
        assert not re.search(r"<https?://", text), page.name
        assert "../shared" not in text, page.name


def test_the_readmes_links_name_files_that_exist():
    for target in LINK.findall((ROOT / "README.md").read_text()):
        assert (ROOT / target.split("#")[0]).exists(), target


def test_the_site_builds_without_the_network():
    """No web fonts fetched at build or view time, no plugin that downloads (social cards,
    the privacy plugin's asset fetching)."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["theme"]["font"] is False
    plugins = [p if isinstance(p, str) else next(iter(p)) for p in config.get("plugins", [])]
    assert not {"social", "privacy"} & set(plugins)


def rendered(page: Path, monkeypatch) -> str:
    """``page`` as the site renders it: its results markers expanded into their tables, then
    mkdocs.yml's Markdown extensions."""
    import markdown

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import results_tables

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    extensions = [e if isinstance(e, str) else next(iter(e)) for e in config["markdown_extensions"]]
    return markdown.markdown(results_tables.expand(page.read_text()), extensions=extensions)


def test_every_list_and_results_table_renders_as_one(monkeypatch):
    """Python-Markdown ends a list at a paragraph indented less than 4 spaces and starts none
    straight after a paragraph line, so a list item would show as text "- …"; a table indented
    as code would show as a code block."""
    for page in PAGES[1:]:
        html = rendered(page, monkeypatch)
        paragraphs = re.findall(r"<p>(.*?)</p>", html, re.S)
        as_text = [p[:70] for p in paragraphs if re.search(r"(^|\n)\s*- ", p)]
        assert not as_text, f"{page.relative_to(ROOT)}: list items shown as text: {as_text}"
        assert "<code>| " not in html, f"{page.relative_to(ROOT)}: a table shown as code"
