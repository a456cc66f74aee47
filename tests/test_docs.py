"""What the documentation points to exists in a clone: its relative links name files of the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_every_relative_link_of_the_readmes_and_docs_names_a_file_of_the_clone() -> None:
    """The README pointed at `../shared/DESIGN.md`, which a clone does not have (issue 34, item 9)."""
    pages = [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("*/README.md")]
    broken = []
    for page in pages:
        for target in LINK.findall(page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            resolved = (page.parent / target).resolve()
            if not resolved.exists() or not resolved.is_relative_to(ROOT):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken
    assert "../shared" not in (ROOT / "README.md").read_text()
