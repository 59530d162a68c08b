"""The documentation stays true: the options page equals what ServerArgs generates, and every
page README.md and docs/ link to exists."""

import pathlib
import re

from runtime.server_args import options_markdown

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_options_page_matches_the_server_args():
    page = (ROOT / "docs" / "options.md").read_text()
    assert page == options_markdown(), "run: python -m runtime.server_args > docs/options.md"


def test_every_local_link_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"
    readme = (ROOT / "README.md").read_text()
    assert "docs/README.md" in readme and "docs/options.md" in readme
