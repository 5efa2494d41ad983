#!/usr/bin/env python3
"""The documentation checks that need no server (scripts/doc-examples.sh runs them first, so
that they fail before anything is built):

    doc_check.py tree docs/development.md
    doc_check.py links FILE...
    doc_check.py runbooks RULES.yml...
    doc_check.py modules RUST_FILE...
    doc_check.py tests docs/development.md
    doc_check.py majors FILE...

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

`modules` checks the module maps: each module a Rust file declares (`mod x;`, `pub mod x;`,
`pub(crate) mod x;`) has its line in the file's map, so that the map a newcomer reads first
names every room. A map is written one of two ways: in the file's top comment (its `//!`
lines), naming modules in code spans (`x`, or a path through it, `x::y`); or beside the
declarations, a `///` line right above each. A top comment that names any module the file
declares is that file's map and must name them all (a new module cannot hide behind its `///`
line); otherwise each declaration needs its `///` line.

`tests` checks that every integration test file (tests/integration/tests/*.rs) has its line in
a table of the section "## Test layers" of docs/development.md: a row whose first cell is its
name in a code span (`| `horizon` | what it checks |`).

`majors` checks the PostgreSQL majors the pages name against `SUPPORTED_MAJORS` in
scripts/lib.sh (what the test command runs): a list of majors after "PostgreSQL" that starts at
the oldest must end at the newest ("PostgreSQL 15 and 19"), and one of three majors or more
("PostgreSQL 15, 16, 17 and 18", "PostgreSQL 15 to 18") must be the whole list; a major
called the newest (or the oldest) must be the last (or the first) of it ("19, the newest",
"15 and 19, the oldest and the newest"). A list may run over a line's end; ```text blocks
(output shown) are not read.

Each prints one line `doc-tree: ... ok`, `doc-links: ... ok`, `doc-runbooks: ... ok`,
`doc-modules: ... ok`, `doc-tests: ... ok` or `doc-majors: ... ok`, or one line per failure.
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USAGE = (
    "usage: doc_check.py tree docs/development.md | doc_check.py links FILE... | "
    "doc_check.py runbooks RULES.yml... | doc_check.py modules RUST_FILE... | "
    "doc_check.py tests docs/development.md | doc_check.py majors FILE..."
)
TREE_HEADING = "## The layout of the tree"
TREE_FENCE = re.compile(r"^```(\w*)\s*$")
GAP = re.compile(r" {2,}")
SKIPPED_DIRS = {"target", "node_modules", "__pycache__", "results"}
# The links check: fences, code spans, links and headings of Markdown.
MD_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"\]\(([^()\s]*(?:\([^()\s]*\)[^()\s]*)*)(?:\s+\"[^\"]*\")?\)")
MD_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def lines_under(doc, heading, check):
    """The lines of `doc` and the index of `heading` among them; stops `check` when it has none."""
    with open(doc, encoding="utf-8") as f:
        lines = f.read().split("\n")
    try:
        return lines, lines.index(heading)
    except ValueError:
        sys.exit(f"doc-{check}: {doc} has no heading '{heading}'")


def tree_lines(doc):
    """(line number, text) of each line of the tree's text block."""
    lines, start = lines_under(doc, TREE_HEADING, "tree")
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


MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", re.M)


def check_modules(args):
    """Each module a file declares is named in a code span of its top `//!` comment."""
    if not args:
        sys.exit(USAGE)
    failures, count = [], 0
    for path in args:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        lines = text.split("\n")
        top = []
        for line in lines:
            if line.startswith("//!"):
                top.append(line[3:])
            elif top or line.strip():
                break
        if not top:
            failures.append(f"{path}: no module map: the file starts with no //! comment")
            continue
        spans = set()
        for span in re.findall(r"`([^`]+)`", " ".join(top)):
            spans.update(part for part in span.split("::"))
        declared = [(m.group(1), text.count("\n", 0, m.start()) + 1) for m in MOD_DECL.finditer(text)]
        count += len(declared)
        top_is_map = any(name in spans for name, _ in declared)
        for name, number in declared:
            at = number - 2  # the line above the declaration, past its attributes
            while at > 0 and lines[at].strip().startswith("#["):
                at -= 1
            above = lines[at].strip() if at >= 0 else ""
            if top_is_map and name not in spans:
                failures.append(
                    f"{path}:{number}: module {name} is not in the module map (the //! comment at the "
                    f"top): name it there, `{name}`, saying in a few words what it holds"
                )
            elif not top_is_map and not above.startswith("///"):
                failures.append(
                    f"{path}:{number}: module {name} has no line in the module map (a /// line above "
                    "its declaration): say in a few words what it holds"
                )
    return report(
        "doc-modules", failures, f"{len(failures)} of {count} modules not in their module maps",
        f"{count} modules in {len(args)} files, each in its file's map: ok",
    )


def check_tests(args):
    """Every tests/integration/tests/*.rs is named in development.md's "Test layers"."""
    if len(args) != 1:
        sys.exit(USAGE)
    doc, heading = args[0], "## Test layers"
    lines, start = lines_under(doc, heading, "tests")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    named = {row.group(1) for row in (re.match(r"^\|\s*`(\w+)`\s*\|", line) for line in lines[start:end]) if row}
    folder = os.path.join(ROOT, "tests", "integration", "tests")
    files = sorted(f[:-3] for f in os.listdir(folder) if f.endswith(".rs"))
    failures = [
        f"{doc}: tests/integration/tests/{name}.rs is not named under '{heading[3:]}': "
        f"add its row (| `{name}` | what it checks |) to the table of the integration files"
        for name in files if name not in named
    ]
    return report(
        "doc-tests", failures, f"{len(failures)} of {len(files)} integration test files not in {doc}",
        f"{len(files)} integration test files, each named in '{heading[3:]}' of {doc}: ok",
    )


def supported_majors():
    with open(os.path.join(ROOT, "scripts", "lib.sh"), encoding="utf-8") as f:
        found = re.search(r"^SUPPORTED_MAJORS=\(([\d ]+)\)", f.read(), re.M)
    if not found:
        sys.exit("doc-majors: scripts/lib.sh has no line SUPPORTED_MAJORS=(...)")
    return [int(major) for major in found.group(1).split()]


MAJOR_LIST = re.compile(r"PostgreSQL\s+(\d\d(?:,\s+\d\d)*,?\s+(?:and|to)\s+\d\d)\b")
CALLED = re.compile(r"\b(\d\d)\b\**(?:,|\s+is|\s+was|\s+\(|\s)\s*(?:\w+\)\s*)?the\s+(newest|oldest)\b"
                    r"|\bthe\s+(newest|oldest)\s+(?:major|PostgreSQL)[,:]?\s+(?:is\s+)?(?:PostgreSQL\s+)?(\d\d)\b", re.I)
BOTH = re.compile(r"\b(\d\d)\**\s+and\s+\**(\d\d)\b\**,?\s+the\s+oldest\s+and\s+the\s+newest\b", re.I)


def without_text_blocks(text):
    """The text with the lines of its ```text blocks (output shown, such as these checks' own
    failures) blanked; commands' comments (```sh) stay."""
    lines, inside = text.split("\n"), False
    for number, line in enumerate(lines):
        if inside or re.match(r"^```text\s*$", line):
            inside = not (inside and line.startswith("```"))
            lines[number] = ""
    return "\n".join(lines)


def check_majors(args):
    """Lists of majors that start at the oldest are whole; the newest and oldest are named right."""
    if not args:
        sys.exit(USAGE)
    majors = supported_majors()
    whole = ", ".join(map(str, majors[:-1])) + f" and {majors[-1]}"
    failures, count = [], 0
    for path in args:
        with open(path, encoding="utf-8") as f:
            text = without_text_blocks(f.read())
        flat = re.sub(r"\s+", " ", text)  # a list may run over a line's end
        for match in MAJOR_LIST.finditer(flat):
            items = [int(n) for n in re.findall(r"\d\d", match.group(1))]
            if " to " in match.group(1):
                items = list(range(items[0], items[-1] + 1))
            if items[0] != majors[0] or len(items) < 2:
                continue  # a few majors (the CloudNativePG ones, the wheels'): not the whole list
            count += 1
            # From the oldest, a list ends at the newest ("15 and 19": the two ends); of three
            # majors or more, it is the whole list.
            if items[-1] != majors[-1] or (len(items) > 2 and items != majors):
                failures.append(
                    f"{path}: 'PostgreSQL {match.group(1)}' names majors from the oldest, but not those "
                    f"the test command runs (scripts/lib.sh SUPPORTED_MAJORS): PostgreSQL {whole}"
                )
        for number, line in enumerate(text.split("\n"), 1):
            for match in BOTH.finditer(line):
                count += 1
                if [int(match.group(1)), int(match.group(2))] != [majors[0], majors[-1]]:
                    failures.append(
                        f"{path}:{number}: calls {match.group(1)} and {match.group(2)} the oldest and the "
                        f"newest majors; scripts/lib.sh SUPPORTED_MAJORS says {majors[0]} and {majors[-1]}"
                    )
            line = BOTH.sub(lambda m: " " * len(m.group(0)), line)
            for match in CALLED.finditer(line):
                count += 1
                major = int(match.group(1) or match.group(4))
                which = (match.group(2) or match.group(3)).lower()
                expected = majors[-1] if which == "newest" else majors[0]
                if major != expected:
                    failures.append(
                        f"{path}:{number}: calls {major} the {which} major; scripts/lib.sh "
                        f"SUPPORTED_MAJORS says {expected}"
                    )
    return report(
        "doc-majors", failures, f"{len(failures)} of {count} statements of majors disagree with SUPPORTED_MAJORS",
        f"{count} statements of majors in {len(args)} files, as SUPPORTED_MAJORS ({' '.join(map(str, majors))}): ok",
    )


def report(name, failures, failed, passed):
    """Prints each failure and a last line; returns the exit status."""
    for failure in failures:
        print(f"{name}: {failure}", file=sys.stderr)
    print(f"{name}: {failed if failures else passed}", file=sys.stderr if failures else sys.stdout)
    return 1 if failures else 0


def main():
    checks = {
        "tree": check_tree, "links": check_links, "runbooks": check_runbooks,
        "modules": check_modules, "tests": check_tests, "majors": check_majors,
    }
    if len(sys.argv) < 2 or sys.argv[1] not in checks or any(a.startswith("-") for a in sys.argv[2:]):
        sys.exit(USAGE)
    return checks[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
