#!/usr/bin/env python3
"""Keeps the recipes of docs/clients/ and the code the clients layer runs the same text.

A recipe in a test file is a region: the lines between a comment `region: NAME` and a
comment `endregion` (`#` or `//`), taken without their common indentation. A page shows
it in the fenced block right after a line

    <!-- region: tests/clients/python/test_psycopg.py insert -->

    regions.py --check docs/clients/*.md    fails, naming each block, unless every block is its
                                            region's text, and every region is shown on one of
                                            the pages
    regions.py --write docs/clients/*.md    rewrites the blocks from the regions
"""

import argparse
import difflib
import os
import re
import sys
import textwrap

MARKER = re.compile(r"^<!-- region: (?P<path>\S+) (?P<name>\S+) -->$")
START = re.compile(r"^\s*(#|//) region: (?P<name>\S+)\s*$")
END = re.compile(r"^\s*(#|//) endregion\s*$")
FENCE = re.compile(r"^(`{3,})(\S*)$")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def regions(path):
    """The regions of one file: name -> text (dedented, without the marker lines)."""
    found, name, lines = {}, None, []
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        for number, line in enumerate(f.read().splitlines(), 1):
            start, end = START.match(line), END.match(line)
            if start:
                if name is not None:
                    sys.exit(f"{path}:{number}: region {start['name']} inside region {name}")
                name, lines = start["name"], []
            elif end:
                if name is None:
                    sys.exit(f"{path}:{number}: endregion without a region")
                if name in found:
                    sys.exit(f"{path}:{number}: region {name} twice")
                found[name] = textwrap.dedent("\n".join(lines)).strip("\n")
                name = None
            elif name is not None:
                lines.append(line)
    if name is not None:
        sys.exit(f"{path}: region {name} not closed")
    return found


def blocks(doc_lines):
    """(index of the fence's first content line, its end, path, name) of each marked block."""
    for i, line in enumerate(doc_lines):
        marker = MARKER.match(line)
        if not marker:
            continue
        fence = FENCE.match(doc_lines[i + 1]) if i + 1 < len(doc_lines) else None
        if not fence or not fence.group(2):
            sys.exit(f"docs line {i + 1}: the marker must be followed by a tagged fence")
        end = next((j for j in range(i + 2, len(doc_lines)) if doc_lines[j] == fence.group(1)), None)
        if end is None:
            sys.exit(f"docs line {i + 2}: fence not closed")
        yield i + 2, end, marker["path"], marker["name"]


def main():
    parser = argparse.ArgumentParser()
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--write", action="store_true")
    parser.add_argument("docs", nargs="+")
    args = parser.parse_args()
    cache, shown, failures, rewritten = {}, set(), [], {}
    for doc in args.docs:
        with open(doc, encoding="utf-8") as f:
            doc_lines = f.read().splitlines()
        out, last = [], 0
        for start, end, path, name in blocks(doc_lines):
            if path not in cache:
                cache[path] = regions(path)
            if name not in cache[path]:
                sys.exit(f"{doc}:{start - 1}: {path} has no region {name}")
            shown.add((path, name))
            want = cache[path][name].splitlines()
            got = doc_lines[start:end]
            if got != want:
                failures.append(f"{doc}:{start - 1}: the block differs from {path}, region {name}:\n"
                                + "\n".join(difflib.unified_diff(got, want, "docs", path, lineterm="")))
            out += doc_lines[last:start] + want
            last = end
        rewritten[doc] = out + doc_lines[last:]
    # Every file of the layer with regions is shown, each region somewhere.
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, "tests/clients")):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in ("node_modules", "target")]
        for filename in filenames:
            if filename.endswith((".py", ".js", ".rs", ".go", ".java", ".rb")):
                path = os.path.relpath(os.path.join(dirpath, filename), ROOT)
                if path not in cache:
                    cache[path] = regions(path)
    unshown = [f"{p} {n}" for p in sorted(cache) for n in cache[p] if (p, n) not in shown]
    pages = ", ".join(args.docs)
    if args.write:
        for doc, out in rewritten.items():
            with open(doc, "w", encoding="utf-8") as f:
                f.write("\n".join(out) + "\n")
        print(f"regions: {pages}: {len(shown)} blocks written")
    else:
        if failures:
            sys.exit("\n".join(failures))
        if unshown:
            sys.exit(f"regions: not shown in {pages}: " + ", ".join(unshown))
        print(f"regions: {pages}: {len(shown)} blocks, each the text of the code the layer runs: ok")


if __name__ == "__main__":
    main()
