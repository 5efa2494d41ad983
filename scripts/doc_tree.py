#!/usr/bin/env python3
"""Checks that the tree drawn in docs/development.md and the files of the checkout agree.

    doc_tree.py docs/development.md

The tree is the ```text block under the heading "The layout of the tree". Each line names
one or more paths (separated by ", ") followed, after at least two spaces, by what they are
for; a description too long for one line goes on in lines indented to where it starts. A line
indented under a folder (a path ending with "/") names paths inside that folder.

It fails, naming the path and what to do,

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
  Files git ignores (builds, installs) and hidden ones (.ci/, .gitignore) are not source
  files. Files not yet added to git count, so that a new file fails the check before its
  commit.

Prints `doc-tree: N paths named, M source files, each named: ok`. Runs before anything is
built (scripts/doc-examples.sh calls it first).
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADING = "## The layout of the tree"
FENCE = re.compile(r"^```(\w*)\s*$")
GAP = re.compile(r" {2,}")
SKIPPED_DIRS = {"target", "node_modules", "__pycache__", "results"}


def tree_lines(doc):
    """(line number, text) of each line of the tree's text block."""
    with open(doc, encoding="utf-8") as f:
        lines = f.read().split("\n")
    try:
        start = lines.index(HEADING)
    except ValueError:
        sys.exit(f"doc-tree: {doc} has no heading '{HEADING}'")
    opening = next((i for i in range(start + 1, len(lines)) if FENCE.match(lines[i])), None)
    if opening is None or FENCE.match(lines[opening]).group(1) != "text":
        sys.exit(f"doc-tree: {doc}: no ```text block under '{HEADING}'")
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
        if any(part.startswith(".") for part in parts):
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


def main():
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: doc_tree.py docs/development.md")
    doc = sys.argv[1]
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
            f"{doc}: the tree (under '{HEADING[3:]}') does not name {path}: add a line for it"
            + (f" under {folder}/" if folder else "")
            + ", saying in a few words what it is for"
        )
    if failures:
        print("\n".join(f"doc-tree: {failure}" for failure in failures), file=sys.stderr)
        print(f"doc-tree: {len(failures)} failed: the tree of {doc} and the files disagree", file=sys.stderr)
        return 1
    print(f"doc-tree: {len(named)} paths named, {len(required)} source files and folders, each named: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
