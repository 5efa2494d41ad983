#!/usr/bin/env python3
"""The documentation checks that need no server (scripts/doc-examples.sh runs them first, so
that they fail before anything is built):

    doc_check.py tree docs/development.md
    doc_check.py links FILE...
    doc_check.py runbooks RULES.yml...

`tree` checks that the tree drawn in docs/development.md and the files of the checkout agree.
The tree is the ```text block under the heading "The layout of the tree". Each line names
one or more paths (separated by ", ") followed, after at least two spaces, by what they are
for; a description too long for one line goes on in lines indented to where it starts. A line
indented under a folder (a path ending with "/") names paths inside that folder. It fails,
naming the path and what to do,

- when the tree names a path that does not exist (a file moved or removed), and
- when a source file is not in the tree. The source files are
  1. every file under src/, and under the src/, tests/ and benches/ folders of each crate
     in crates/: each one named on a line of its own (or beside others on one line);
  2. every entry directly inside scripts/, deploy/ and tests/clients/: a file by its name, a
     folder (scripts/postgresql-binaries/, deploy/sql/, tests/clients/go/, ...) by its name
     alone, standing for its contents;
  3. every entry at the top of the checkout and directly inside tests/ and crates/: a file
     by its name; a folder by its name (docs/, sql/, tests/pg_regress/ ...), standing for
     its contents, or by the paths named inside it.
  Files git ignores (builds, installs), hidden ones (.ci/, .gitignore) and Python's
  __pycache__/ are not source files. Files not yet added to git count, so that a new file fails the check before its
  commit.

`links` checks the relative links of Markdown pages: each file it points at exists, and each
anchor (`page.md#a-heading`, `#a-heading`) is a heading of that page. Links outside the
checkout (http:, https:, mailto:) are not followed; links inside code (fenced blocks and
`code spans`) are not links. An anchor is made from a heading as GitHub makes it: lower case,
punctuation but `-` and `_` dropped, spaces made `-`, and `-1`, `-2` ... added to a heading
that comes again.

`runbooks` checks Prometheus alert rule files (deploy/monitoring/alerts.yml): every alert has
a `summary` annotation and a `runbook_url` naming a page of the checkout (relative to its
top) and a heading of that page, so that an alert that fires leads to what to do.

Each prints one line `doc-tree: ... ok`, `doc-links: ... ok` or `doc-runbooks: ... ok`, or one
line per failure.
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USAGE = "usage: doc_check.py tree docs/development.md | doc_check.py links FILE... | doc_check.py runbooks RULES.yml..."
TREE_HEADING = "## The layout of the tree"
TREE_FENCE = re.compile(r"^```(\w*)\s*$")
GAP = re.compile(r" {2,}")
SKIPPED_DIRS = {"target", "node_modules", "__pycache__", "results"}
# The links check: fences, code spans, links and headings of Markdown.
MD_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"\]\(([^()\s]*(?:\([^()\s]*\)[^()\s]*)*)(?:\s+\"[^\"]*\")?\)")
MD_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def tree_lines(doc):
    """(line number, text) of each line of the tree's text block."""
    with open(doc, encoding="utf-8") as f:
        lines = f.read().split("\n")
    try:
        start = lines.index(TREE_HEADING)
    except ValueError:
        sys.exit(f"doc-tree: {doc} has no heading '{TREE_HEADING}'")
    opening = next((i for i in range(start + 1, len(lines)) if TREE_FENCE.match(lines[i])), None)
    if opening is None or TREE_FENCE.match(lines[opening]).group(1) != "text":
        sys.exit(f"doc-tree: {doc}: no ```text block under '{TREE_HEADING}'")
    closing = next((i for i in range(opening + 1, len(lines)) if lines[i].startswith("```")), None)
    if closing is None:
        sys.exit(f"doc-tree: {doc}:{opening + 1}: the tree's block is never closed")
    return [(n + 1, lines[n]) for n in range(opening + 1, closing)]


def named_paths(doc):
    """path -> line number of every path the tree names (folders end with '/')."""
    named, folders, description_at = {}, [], None  # folders: a stack of (indent, path)
    for number, line in tree_lines(doc):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if description_at is not None and indent >= description_at:
            continue  # the description of the line before goes on
        gap = GAP.search(line, indent)
        if gap is None:
            sys.exit(
                f"doc-tree: {doc}:{number}: '{line.strip()}' says nothing of what it is for: "
                "write a description after two spaces or more"
            )
        description_at = gap.end()
        while folders and folders[-1][0] >= indent:
            folders.pop()
        parent = folders[-1][1] if folders else ""
        entries = [entry.strip() for entry in line[indent:gap.start()].split(",")]
        for entry in entries:
            if not entry or " " in entry:
                sys.exit(f"doc-tree: {doc}:{number}: '{entry}' is not a path (paths are separated by ', ')")
            named[parent + entry] = number
        if len(entries) == 1 and entries[0].endswith("/"):
            folders.append((indent, parent + entries[0]))
    return named


def checkout_files():
    """Every file of the checkout that git does not ignore, relative to ROOT."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT, capture_output=True, check=True,
        ).stdout.decode().split("\0")
        return sorted(path for path in listed if path and os.path.isfile(os.path.join(ROOT, path)))
    except (OSError, subprocess.CalledProcessError):
        found = []  # not a git checkout (an unpacked archive): the files, without builds
        for dirpath, dirnames, filenames in os.walk(ROOT):
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in SKIPPED_DIRS]
            found += [os.path.relpath(os.path.join(dirpath, f), ROOT) for f in filenames]
        return sorted(found)


def source_paths(files):
    """path -> whether a path named inside it will do (folders only): what the tree must name."""
    required = {}
    for path in files:
        parts = path.split("/")
        if any(part.startswith(".") or part == "__pycache__" for part in parts):
            continue
        if parts[0] == "src" or (len(parts) > 3 and parts[0] == "crates" and parts[2] in ("src", "tests", "benches")):
            required[path] = False  # rule 1
        if parts[0] in ("scripts", "deploy") or parts[:2] == ["tests", "clients"]:
            depth = 1 if parts[0] != "tests" else 2  # rule 2
            if len(parts) > depth:
                entry = "/".join(parts[: depth + 1]) + ("/" if len(parts) > depth + 1 else "")
                required[entry] = False
        for depth in (0, 1):  # rule 3
            if depth == 1 and parts[0] not in ("tests", "crates"):
                continue
            if len(parts) > depth:
                entry = "/".join(parts[: depth + 1]) + ("/" if len(parts) > depth + 1 else "")
                required.setdefault(entry, entry.endswith("/"))
    return required


def check_tree(args):
    if len(args) != 1:
        sys.exit(USAGE)
    doc = args[0]
    named = named_paths(doc)
    failures = []
    for path, number in sorted(named.items(), key=lambda item: item[1]):
        exists = os.path.isdir if path.endswith("/") else os.path.isfile
        if not exists(os.path.join(ROOT, path)):
            failures.append(
                f"{doc}:{number}: the tree names {path}, which does not exist: "
                "correct the path if it moved, or remove it from the line if it is gone"
            )
    required = source_paths(checkout_files())
    for path, inside_will_do in sorted(required.items()):
        if path in named or (inside_will_do and any(p.startswith(path) for p in named)):
            continue
        folder = os.path.dirname(path.rstrip("/"))
        failures.append(
            f"{doc}: the tree (under '{TREE_HEADING[3:]}') does not name {path}: add a line for it"
            + (f" under {folder}/" if folder else "")
            + ", saying in a few words what it is for"
        )
    return report(
        "doc-tree", failures, f"{len(failures)} failed: the tree of {doc} and the files disagree",
        f"{len(named)} paths named, {len(required)} source files and folders, each named: ok",
    )


def prose_lines(path):
    """(line number, text) of the lines outside fenced blocks, code spans blanked."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    fence = None
    for number, line in enumerate(lines, 1):
        opening = MD_FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)
            continue
        if fence is not None:
            if line.strip().startswith(fence[0] * len(fence)) and not line.strip().strip(fence[0]):
                fence = None
            continue
        yield number, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def anchor(text):
    text = re.sub(r"`([^`]*)`", r"\1", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        for _, line in prose_lines(path):
            heading = MD_HEADING.match(line)
            if heading:
                base = anchor(heading.group(2))
                count = seen.get(base, 0)
                seen[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
        cache[path] = found
    return cache[path]


def check_links(args):
    files = args
    if not files:
        sys.exit(USAGE)
    failures, count = [], 0
    for path in files:
        for number, line in prose_lines(path):
            for match in LINK.finditer(line):
                target = match.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target) or not target:
                    continue
                count += 1
                where = f"{path}:{number}: {target}"
                file_part, _, fragment = target.partition("#")
                linked = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
                if not os.path.exists(linked):
                    failures.append(f"{where}: no file {linked}")
                elif fragment and linked.endswith(".md") and fragment not in anchors(linked):
                    failures.append(f"{where}: {linked} has no heading with the anchor #{fragment}")
    return report(
        "doc-links", failures, f"{len(failures)} of {count} links broken",
        f"{count} links in {len(files)} files: ok",
    )


def check_runbooks(args):
    """Each alert of Prometheus rule files has a summary and a runbook_url naming a page of
    this checkout and one of its headings (paths are relative to the checkout's top)."""
    if not args:
        sys.exit(USAGE)
    failures, count = [], 0
    for path in args:
        alerts = []  # [line number, name, {annotation: value}]
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                alert = re.match(r"^\s*- alert:\s*(\S+)", line)
                field = re.match(r'^\s*(summary|runbook_url):\s*"?([^"]*)"?\s*$', line)
                if alert:
                    alerts.append((number, alert.group(1), {}))
                elif field and alerts:
                    alerts[-1][2][field.group(1)] = field.group(2)
        for number, name, fields in alerts:
            count += 1
            where = f"{path}:{number}: {name}"
            if not fields.get("summary"):
                failures.append(f"{where}: no summary annotation")
            target = fields.get("runbook_url", "")
            page, _, fragment = target.partition("#")
            if not target:
                failures.append(f"{where}: no runbook_url annotation")
            elif not (page.endswith(".md") and os.path.exists(os.path.join(ROOT, page))):
                failures.append(f"{where}: runbook_url {target}: no page {page}")
            elif not fragment or fragment not in anchors(os.path.join(ROOT, page)):
                failures.append(f"{where}: runbook_url {target}: {page} has no heading with the anchor #{fragment}")
    return report(
        "doc-runbooks", failures, f"{len(failures)} problems in {count} alerts",
        f"{count} alerts, each with a summary and a runbook section: ok",
    )


def report(name, failures, failed, passed):
    """Prints each failure and a last line; returns the exit status."""
    for failure in failures:
        print(f"{name}: {failure}", file=sys.stderr)
    print(f"{name}: {failed if failures else passed}", file=sys.stderr if failures else sys.stdout)
    return 1 if failures else 0


def main():
    checks = {"tree": check_tree, "links": check_links, "runbooks": check_runbooks}
    if len(sys.argv) < 2 or sys.argv[1] not in checks or any(a.startswith("-") for a in sys.argv[2:]):
        sys.exit(USAGE)
    return checks[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
