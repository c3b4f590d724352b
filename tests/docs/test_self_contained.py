"""Nothing in the repository refers to a document outside it: every relative link of every
Markdown file resolves to a file of the repository, and every ``*.md`` file that code, configs,
notebooks or docs name exists in it (a clone holds everything its pages point to)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# a document's name: in capitals (ARCHITECTURE.md, the style of design notes), or a path
# (docs/train.md, methods/darts.md in the site's nav); a lower-case bare name is a file a
# command writes
MD_NAME = re.compile(r"(?<![\w/.-])((?:\.\./|[\w.-]+/)+[\w.-]+\.md|[A-Z][A-Z0-9_]+\.md)\b")


def tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *patterns],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return [REPO / line for line in out.splitlines() if (REPO / line).is_file()]


def test_markdown_links_stay_inside_the_repository():
    broken = []
    for page in tracked("*.md"):
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code is not a link
        for target in LINK.findall(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a web address (the reference code, papers) or an anchor
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.exists() or REPO not in path.parents and path != REPO:
                broken.append(f"{page.relative_to(REPO)}: ({target})")
    assert not broken, "links to files that are not in the repository:\n" + "\n".join(broken)


def test_named_markdown_documents_exist():
    names = {p.name for p in tracked("*.md")}
    missing = []
    for path in tracked("*.py", "*.yaml", "*.yml", "*.md", "*.ipynb", "*.toml", "*.sh"):
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            for name in MD_NAME.findall(line):
                if name.startswith(("http", "www.")) or "*" in name:
                    continue
                if "/" in name:  # a path: from the file's folder, the repository's root or docs/
                    found = [
                        c.resolve()
                        for c in (path.parent / name, REPO / name, REPO / "docs" / name)
                        if c.exists() and REPO in c.resolve().parents
                    ]
                else:
                    found = [name] if name in names else []
                if not found:
                    missing.append(f"{path.relative_to(REPO)}:{n}: {name}")
    assert not missing, "documents named but not in the repository:\n" + "\n".join(missing)
