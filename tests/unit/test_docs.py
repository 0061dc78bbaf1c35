"""The documentation holds together: every relative link of README.md and docs/ leads to a file
that exists and, with `#anchor`, to a heading of it; the README stays a short entry point."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings (code blocks aside)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    inside = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            inside = not inside
        m = None if inside else re.match(r"^#{1,6} (.*)$", line)
        if m is None:
            continue
        a = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(a)
        seen[a] = 0 if n is None else n + 1
        found.add(a if n is None else f"{a}-{n + 1}")
    return found


def links(page: Path) -> list[str]:
    text, inside, out = page.read_text().splitlines(), False, []
    for line in text:
        if line.startswith("```"):
            inside = not inside
        elif not inside:
            out += LINK.findall(line)
    return [x for x in out if not re.match(r"^[a-z]+:", x)]  # http:, https:, mailto:


def test_every_relative_link_leads_somewhere() -> None:
    broken = []
    for page in PAGES:
        for link in links(page):
            path, _, anchor = link.partition("#")
            target = page if not path else (page.parent / path).resolve()
            if not target.exists():
                broken.append(f"{page.relative_to(ROOT)}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in anchors(target):
                broken.append(f"{page.relative_to(ROOT)}: {link} (no such heading)")
    assert broken == []


def test_a_planted_broken_link_is_found(tmp_path: Path) -> None:
    page = tmp_path / "a.md"
    page.write_text("# A\n\n## Two words\n\n[ok](#two-words) [bad](#three) [gone](b.md)\n")
    assert anchors(page) == {"a", "two-words"}
    assert links(page) == ["#two-words", "#three", "b.md"]


def test_the_readme_is_an_entry_point_and_indexes_every_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    for page in PAGES[1:]:
        assert str(page.relative_to(ROOT)) in readme, f"README does not link {page.name}"


def test_the_reference_pages_are_made_from_the_code() -> None:
    """docs/reference/cli.md and metrics.md are what `make docs` writes now."""
    from processor.cli.reference import PAGES

    stale = [str(p.relative_to(ROOT)) for p, make in PAGES.items() if p.read_text() != make()]
    assert stale == [], "run `make docs`"


def test_the_lease_schema_page_names_every_property_a_lease_row_has() -> None:
    from leases import Lease, LeaseToken
    from leases.store.table_rows import lease_row

    page = (ROOT / "docs" / "reference" / "lease-schema.md").read_text()
    documented = set(re.findall(r"^\| `([A-Za-z]+)`", page, re.M))
    documented |= set(re.findall(r"^\| `[A-Za-z]+`, `([A-Za-z]+)`", page, re.M))
    assert set(lease_row("p", Lease(LeaseToken("00")))) <= documented
