"""docs/ARCHITECTURE.md and the other pages stay true to the tree: every path they name exists, every
package and top-level module of gigpo_lab is on the map, every config group is named, and every link
between the pages resolves (files and headings)."""

from __future__ import annotations

import re

import pytest

from gigpo_lab.config_paths import config_groups, config_root

ROOT = config_root()
DOCS = ROOT / "docs"
ARCH = (DOCS / "ARCHITECTURE.md").read_text()
PAGES = ["ARCHITECTURE.md", "ALGORITHMS.md", "TUTORIAL.md", "CONFIG.md"]


def test_every_path_the_map_names_exists():
    for path in set(re.findall(r"`(gigpo_lab/[\w/.]*)`", ARCH)):
        assert (ROOT / path).exists(), f"ARCHITECTURE.md names {path}, which does not exist"
    for name in set(re.findall(r"`(\w+\.py)`", ARCH)):
        assert list((ROOT / "gigpo_lab").rglob(name)), f"ARCHITECTURE.md names {name}, which does not exist"


def test_every_package_and_top_level_module_is_on_the_map():
    package = ROOT / "gigpo_lab"
    parts = [p for p in package.iterdir() if (p / "__init__.py").is_file()]
    parts += [p for p in package.glob("*.py") if p.name != "__init__.py"]
    missing = [p.name for p in parts if f"gigpo_lab/{p.name}" not in ARCH]
    assert not missing, f"not on the package map of ARCHITECTURE.md: {missing}"


def test_every_config_group_is_named():
    groups = set(config_groups())  # conf/'s folders and the schemas stored as options (Hydra's own aside)
    table = ARCH.split("## The package map", 1)[1].split("\n## ", 1)[0]
    assert not {g for g in groups if f"`{g}`" not in table}


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", PAGES)
def test_links_between_pages_resolve(page):
    text = (DOCS / page).read_text()
    for target, anchor in re.findall(r"\]\(([A-Z]+\.md)(?:#([\w\-]+))?\)", text):
        assert (DOCS / target).is_file(), f"{page} links to {target}"
        if anchor:
            headings = {_slug(h) for h in re.findall(r"^#+ (.*)$", (DOCS / target).read_text(), re.M)}
            assert anchor in headings, f"{page} links to {target}#{anchor}, no such heading"


def test_readme_links_the_docs():
    readme = (ROOT / "README.md").read_text()
    for page in PAGES:
        assert f"docs/{page}" in readme, f"README.md does not link docs/{page}"
