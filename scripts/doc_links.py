#!/usr/bin/env python3
"""Checks the relative links of Markdown pages: each file it points at exists, and each
anchor (`page.md#a-heading`, `#a-heading`) is a heading of that page.

    doc_links.py FILE...

Links outside the checkout (http:, https:, mailto:) are not followed; links inside code
(fenced blocks and `code spans`) are not links. An anchor is made from a heading as GitHub
makes it: lower case, punctuation but `-` and `_` dropped, spaces made `-`, and `-1`, `-2`
... added to a heading that comes again. Prints `doc-links: N links in M files: ok`, or one
line per broken link, naming the file and line. scripts/doc-examples.sh calls it first.
"""

import os
import re
import sys

FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"\]\(([^()\s]*(?:\([^()\s]*\)[^()\s]*)*)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(path):
    """(line number, text) of the lines outside fenced blocks, code spans blanked."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    fence = None
    for number, line in enumerate(lines, 1):
        opening = FENCE.match(line)
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
            heading = HEADING.match(line)
            if heading:
                base = anchor(heading.group(2))
                count = seen.get(base, 0)
                seen[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
        cache[path] = found
    return cache[path]


def main():
    files = sys.argv[1:]
    if not files or any(f.startswith("-") for f in files):
        sys.exit("usage: doc_links.py FILE...")
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
    if failures:
        print("\n".join(f"doc-links: {failure}" for failure in failures), file=sys.stderr)
        print(f"doc-links: {len(failures)} of {count} links broken", file=sys.stderr)
        return 1
    print(f"doc-links: {count} links in {len(files)} files: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
