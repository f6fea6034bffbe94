"""The documentation site (`mkdocs.yml`, `docs/`) builds strictly, holds every page, links
only to what exists, and documents exactly what the packages export.

`mkdocs build --strict` fails on a broken link or anchor, a page left out of the nav and a
docstring that does not render; it comes with the `dev` extra. Without it the build test
skips with one line outside CI and fails under ``CI`` (set by `.ci/run`), so CI never passes
a build it did not run. (`tests/test_readme_examples.py` runs the pages' examples.)
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_readme_examples import _nav_pages

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: the packages whose `__all__` the API pages document, and their page
API_PAGES = {"shiftwatch.operators": "api/operators.md", "shiftwatch.streams": "api/streams.md",
             "shiftwatch.sinks": "api/sinks.md", "shiftwatch.deploy": "api/deploy.md"}


def _config() -> dict:
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text())


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def _prose(text: str) -> str:
    """The text outside fenced blocks and inline code (where a `](...)` is not a link)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _defined_at(package: str) -> dict[str, str]:
    """Exported name -> the module that defines it (the package's lazy table)."""
    module = importlib.import_module(package)
    return {name: importlib.util.resolve_name(where, package) if where.startswith(".")
            else where for name, where in module._LAZY.items()}


def test_every_page_is_in_the_nav():
    nav = set(_nav_pages(_config()["nav"]))
    missing = [str(p.relative_to(DOCS)) for p in _pages() if str(p.relative_to(DOCS)) not in nav]
    assert not missing, f"pages not in mkdocs.yml's nav: {missing}"
    assert all((DOCS / p).exists() for p in nav), nav


def test_every_relative_link_resolves():
    broken = []
    for page in [ROOT / "README.md", ROOT / "DEVELOPERS.md", ROOT / "CHANGELOG.md", *_pages()]:
        for target in re.findall(r"\]\(([^)\s]+)\)", _prose(page.read_text())):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = target.split("#", 1)[0]
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, "\n".join(broken)


def test_the_readme_is_short_and_says_what_shiftwatch_is_before_the_install():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 210
    before = text.split("```", 1)[0]
    assert "stream" in before and "operators" in before and len(before.split()) >= 30


def test_the_api_pages_document_exactly_what_the_packages_export():
    for package, page in API_PAGES.items():
        shown = re.findall(r"^::: ([\w.]+)$", (DOCS / page).read_text(), re.M)
        expected = [f"{module}.{name}" for name, module in _defined_at(package).items()]
        assert sorted(shown) == sorted(expected), (page, set(shown) ^ set(expected))
    # the names `import shiftwatch` offers are listed on the API index
    index = (DOCS / "api" / "index.md").read_text()
    missing = [name for name in _defined_at("shiftwatch") if f"`shiftwatch.{name}`" not in index]
    assert not missing, missing


def test_the_site_builds_strictly(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec(
            "mkdocstrings_handlers.python") is None:
        msg = ("needs mkdocs-material and mkdocstrings[python] (the dev extra: "
               "pip install -c constraints.txt -e '.[dev,learners]')")
        if os.environ.get("CI"):
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(site)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    # every nav page was written, and the API pages hold the rendered docstrings
    for page in _nav_pages(_config()["nav"]):
        stem = page.removesuffix(".md")
        html = site / ("index.html" if stem == "index" else
                       f"{stem.removesuffix('/index')}/index.html")
        assert html.exists(), html
    operators = (site / "api" / "operators" / "index.html").read_text()
    assert "Shekhar" in operators and "shiftwatch.operators.registry.create" in operators
    # the changelog and the developer notes are included, not copied
    assert "Unreleased" in (site / "changelog" / "index.html").read_text()
    assert "Architecture" in (site / "developers" / "index.html").read_text()
