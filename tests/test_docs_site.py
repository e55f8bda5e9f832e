"""docs/ builds as a site with mkdocs --strict: a broken link, a missing anchor or a page left out
of the nav fails the fast tier (issue: the docs are the manual, the README only points there)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _build(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(root / "site")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_docs_site_builds_strictly_and_a_broken_link_fails_it(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    built = _build(tmp_path)
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "site" / "critics" / "index.html").is_file()
    with (tmp_path / "docs" / "loop.md").open("a") as page:
        page.write("\nSee [the missing page](no-such-page.md).\n")
    broken = _build(tmp_path)
    assert broken.returncode != 0 and "no-such-page.md" in broken.stderr


def test_every_docs_page_is_in_the_nav_and_the_readme_links_resolve() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert {p for p in pages if f": {p}" not in nav} == set()
    readme = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / target).is_file(), target
