#!/usr/bin/env python3
"""Runs the SQL examples of the documentation against a server and compares their output.

    doc_examples.py --parse-only FILE...
        checks the format of the fenced blocks of each file and counts them; needs no server
    doc_examples.py --psql PSQL --host DIR --port PORT --user USER FILE...
        runs them: each file in a database of its own, created for it (scripts/doc-examples.sh
        starts the server and calls this)

The format (docs/development.md, "Examples that are tested"):

- A fence tagged `sql` holds statements. They must run without an error; their output is
  not compared.
- A fence tagged `psql` holds a transcript. A line `=# STATEMENT` or `name=# STATEMENT` is
  input, continued on lines `name-# ...` (or `name(# ...`, as psql prompts inside
  parentheses, quotes or comments); the lines after it, up to the next prompt, are what psql
  prints for it. One statement or backslash command per prompt. A line `...` stands for
  any number of lines.
- Every other fence (`sh`, `conf`, `text`, `rust`, ...) is not run. An untagged fence is an
  error, and so is a psql prompt in a fence not tagged `psql`: each example says what it is.

The blocks of one file run in order, in one psql session, in a new database of that file.
Before the file's first runnable block the extension is created, unless that block begins
with `CREATE EXTENSION snowflake_id` itself. The server runs with TimeZone UTC and
DateStyle ISO.

Before comparing, both sides are normalised: blank lines dropped, runs of spaces made one
and table rules (`---+---`) made alike, because column widths follow the values; every
timestamp becomes `<ts>` and every run of 13 or more digits `<id>` (IDs, and milliseconds
since 1970), because they change per run; the code of notices, and the lines psql adds in
verbose mode only (`LOCATION:`, `SCHEMA NAME:`, `TABLE NAME:`, ...), are dropped. Errors
keep their SQLSTATE: psql runs with `\\set VERBOSITY verbose`, so an error reads
`ERROR:  22023: shard 5000 is out of range`; CONTEXT lines are off
(`\\set SHOW_CONTEXT never`). So a renamed function, column or setting, or a changed
message, detail, hint or SQLSTATE, fails the check.
"""

import argparse
import difflib
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

RUN_TAGS = ("sql", "psql")
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
PROMPT = re.compile(r"^[A-Za-z0-9_]*=# ?(?P<text>.*)$")
CONTINUATION = re.compile(r"^[A-Za-z0-9_]*[-'\"($*]# ?(?P<text>.*)$")
ELLIPSIS = "..."
FIRST_CREATES_EXTENSION = re.compile(
    r"^\s*CREATE\s+EXTENSION\s+(IF\s+NOT\s+EXISTS\s+)?\"?snowflake_id\b", re.IGNORECASE
)
# Normalisation (see the module's docstring).
PSQL_LOCATION = re.compile(r"^psql:[^:\n]*:(?P<line>\d+): ")
TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}(?::\d{2})?)?"
)
LONG_NUMBER = re.compile(r"\d{13,}")
NOTICE_CODE = re.compile(r"^(NOTICE|WARNING|INFO|LOG|DEBUG):  [0-9A-Z]{5}: ")
RULE = re.compile(r"^-[-+]*$")
RECORD = re.compile(r"^-\[ RECORD (\d+) \][-+]*$")
ERROR_LINE = re.compile(r"^(ERROR|FATAL|PANIC):")
# Fields that psql prints with VERBOSITY verbose only: the code's place, and the names of the
# object in question (which the message names already).
VERBOSE_ONLY = re.compile(r"^(LOCATION|SCHEMA NAME|TABLE NAME|COLUMN NAME|DATATYPE NAME|CONSTRAINT NAME):  ")


class FormatError(Exception):
    pass


@dataclass
class Statement:
    line: int  # the prompt's line in the document
    text: list  # the input, one string per line
    expected: list  # what psql prints, one string per line


@dataclass
class Block:
    path: str
    line: int  # the opening fence's line
    tag: str
    lines: list  # (line number, text)
    statements: list = field(default_factory=list)  # psql blocks only

    @property
    def runnable(self):
        return self.tag in RUN_TAGS

    def first_statement(self):
        if self.tag == "psql":
            return "\n".join(self.statements[0].text)
        return "\n".join(text for _, text in self.lines)


def where(path, line):
    return f"{path}:{line}"


def parse_blocks(path):
    """Every fenced block of a Markdown file, checked for the format."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, info = opening["indent"], opening["fence"], opening["info"].strip()
        closing = re.compile(r"^[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$")
        start, body, i = i + 1, [], i + 1
        while i < len(lines) and not closing.match(lines[i]):
            text = lines[i]
            body.append((i + 1, text[len(indent):] if text.startswith(indent) else text.lstrip()))
            i += 1
        if i == len(lines):
            raise FormatError(f"{where(path, start)}: this fence is never closed")
        i += 1
        tag = info.split()[0] if info else ""
        block = Block(path, start, tag, body)
        check_block(block)
        blocks.append(block)
    return blocks


def check_block(block):
    at = where(block.path, block.line)
    if not block.tag:
        raise FormatError(
            f"{at}: a fence without a tag; tag it sql or psql to have it run, "
            "or sh, conf, text, ... to say that it is not run"
        )
    prompts = [n for n, text in block.lines if PROMPT.match(text)]
    if block.tag == "psql":
        block.statements = parse_transcript(block)
    elif block.tag == "sql":
        if prompts:
            raise FormatError(f"{where(block.path, prompts[0])}: a psql prompt in a sql block; tag the block psql")
        code = [(n, text) for n, text in block.lines if text.strip() and not text.strip().startswith("--")]
        if not code:
            raise FormatError(f"{at}: an empty sql block")
        n, last = code[-1]
        if not (last.rstrip().endswith(";") or last.lstrip().startswith("\\")):
            raise FormatError(f"{where(block.path, n)}: the last statement of a sql block must end with ';'")
    elif prompts:
        raise FormatError(
            f"{where(block.path, prompts[0])}: a psql prompt in a block tagged '{block.tag}'; "
            "tag it psql so that it runs (examples that need another setup show no prompt)"
        )


def parse_transcript(block):
    statements = []
    for n, text in block.lines:
        prompt, continuation = PROMPT.match(text), CONTINUATION.match(text)
        if prompt:
            statements.append(Statement(n, [prompt["text"]], []))
        elif continuation and statements and not statements[-1].expected:
            statements[-1].text.append(continuation["text"])
        elif statements:
            statements[-1].expected.append(text)
        elif text.strip():
            raise FormatError(f"{where(block.path, n)}: a psql block must begin with a prompt (=# or name=#)")
    if not statements:
        raise FormatError(f"{where(block.path, block.line)}: a psql block without a prompt")
    for statement in statements:
        last = statement.text[-1].rstrip()
        if not (last.endswith(";") or re.search(r"(^|\s)\\[A-Za-z]", last)):
            raise FormatError(
                f"{where(block.path, statement.line)}: a statement must end with ';' "
                "(or be a backslash command), one per prompt"
            )
    return statements


def normalise(lines, actual=False):
    """The lines as compared (see the module's docstring); ELLIPSIS stays as it is."""
    out = []
    for line in lines:
        if not actual and line.strip() == ELLIPSIS:
            out.append(ELLIPSIS)
            continue
        line = PSQL_LOCATION.sub("", line)
        if VERBOSE_ONLY.match(line):
            continue
        line = NOTICE_CODE.sub(r"\1:  ", line)
        line = TIMESTAMP.sub("<ts>", line)
        line = LONG_NUMBER.sub("<id>", line)
        line = RECORD.sub(r"-[ RECORD \1 ]", line)
        line = RULE.sub("---", line)
        line = re.sub(r"\s+", " ", line).rstrip()
        if line:
            out.append(line)
    return out


def matches(expected, actual):
    if ELLIPSIS not in expected:
        return expected == actual
    pattern = "".join(
        r"(?:[^\n]*\n)*?" if line == ELLIPSIS else re.escape(line) + r"\n" for line in expected
    )
    return re.fullmatch(pattern, "".join(line + "\n" for line in actual)) is not None


class Script:
    """The psql script of one file, with the document line of every script line."""

    def __init__(self, path):
        self.path = path
        self.lines = []
        self.origin = {}  # script line -> document line
        self.stop_on_error = None

    def add(self, text, origin=None):
        self.lines.append(text)
        if origin is not None:
            self.origin[len(self.lines)] = origin

    def marker(self, key, stop_on_error):
        if stop_on_error != self.stop_on_error:
            self.add(f"\\set ON_ERROR_STOP {'on' if stop_on_error else 'off'}")
            self.stop_on_error = stop_on_error
        self.add(f"\\echo @@doc-example {key}@@")
        self.add(f"\\warn @@doc-example {key}@@")

    def document_line(self, script_line):
        """The document line of the statement psql reported at `script_line`."""
        for n in range(script_line, 0, -1):
            if n in self.origin:
                return self.origin[n]
        return None


def split_output(text):
    """psql's output cut at the markers: marker key -> lines."""
    chunks, key = {}, None
    for line in text.split("\n"):
        found = re.fullmatch(r"@@doc-example (\S+)@@", line)
        if found:
            key = found[1]
            chunks[key] = []
        elif key is not None:
            chunks[key].append(line)
    return chunks


def database_name(index, path):
    stem = re.sub(r"[^a-z0-9]+", "_", os.path.splitext(os.path.basename(path))[0].lower())
    return f"doc_{index}_{stem}"


def run_file(index, path, blocks, args):
    """Runs the runnable blocks of one file; returns a list of failure messages."""
    runnable = [block for block in blocks if block.runnable]
    if not runnable:
        return []
    psql = [args.psql, "-X", "-h", args.host, "-p", str(args.port), "-U", args.user]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG") and k not in ("LANGUAGE", "LANG")}
    env.update(LC_ALL="C", PGTZ="UTC", PGDATESTYLE="ISO, MDY")
    database = database_name(index, path)
    created = subprocess.run(
        psql + ["-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c", f'CREATE DATABASE "{database}"'],
        env=env, capture_output=True, text=True,
    )
    if created.returncode != 0:
        return [f"{path}: could not create database {database}: {created.stderr.strip()}"]

    script = Script(path)
    script.add("\\set VERBOSITY verbose")
    script.add("\\set SHOW_CONTEXT never")
    units = []  # (key, block, statement or None)
    if not FIRST_CREATES_EXTENSION.match(runnable[0].first_statement()):
        script.marker("setup", True)
        script.add("CREATE EXTENSION snowflake_id;")
        units.append(("setup", runnable[0], None))
    for b, block in enumerate(runnable):
        if block.tag == "sql":
            key = f"{b}"
            script.marker(key, True)
            for n, text in block.lines:
                script.add(text, n)
            units.append((key, block, None))
        else:
            for s, statement in enumerate(block.statements):
                key = f"{b}.{s}"
                script.marker(key, False)
                for k, text in enumerate(statement.text):
                    script.add(text, statement.line + k)
                units.append((key, block, statement))
    script.marker("end", False)

    with tempfile.TemporaryDirectory() as tmp:
        script_path = os.path.join(tmp, "examples.sql")
        with open(script_path, "w", encoding="utf-8") as f:
            f.write("\n".join(script.lines) + "\n")
        ran = subprocess.run(psql + ["-d", database, "-f", script_path], env=env, capture_output=True, text=True)
    stdout, stderr = split_output(ran.stdout), split_output(ran.stderr)

    failures = []
    for key, block, statement in units:
        if key not in stderr:
            last = [line for line in ran.stderr.strip().split("\n") if line][-5:]
            failures.append(
                f"{where(path, block.line)}: psql stopped before this block "
                f"(exit status {ran.returncode}):\n{indent(shown(last))}"
            )
            break
        if statement is None:
            error = next((line for line in stderr[key] if ERROR_LINE.match(PSQL_LOCATION.sub("", line))), None)
            if error is not None:
                reported = PSQL_LOCATION.match(error)
                line = script.document_line(int(reported["line"])) if reported else None
                what = "creating the extension" if key == "setup" else f"a statement of the sql block at line {block.line}"
                failures.append(f"{where(path, line or block.line)}: {what} failed:\n" + indent(shown(stderr[key])))
                break
            continue
        got = stderr[key] + stdout.get(key, [])
        if args.show_output:
            print(f"{where(path, statement.line)}:\n{prompted(statement.text)}\n" + "\n".join(shown(got)))
        expected, actual = normalise(statement.expected), normalise(got, actual=True)
        if not matches(expected, actual):
            diff = difflib.unified_diff(
                expected, actual, lineterm="", n=len(expected) + len(actual),
                fromfile=f"{where(path, statement.line)}, the transcript (normalised)",
                tofile="what psql printed (normalised)",
            )
            failures.append(
                f"{where(path, statement.line)}: the output of this statement differs from the transcript:\n"
                + indent(prompted(statement.text).split("\n")) + "\n"
                + indent(list(diff)) + "\n"
                + "  what psql printed:\n" + indent(shown(got), "    ")
            )
    else:
        if ran.returncode != 0:
            failures.append(f"{path}: psql exited with status {ran.returncode}:\n" + indent(shown(ran.stderr.split("\n")[-6:])))
    return failures


def shown(lines):
    """psql's output as a person would see it: without the script's place and verbose-only fields."""
    lines = [NOTICE_CODE.sub(r"\1:  ", PSQL_LOCATION.sub("", line)).rstrip() for line in lines]
    return [line for line in lines if line.strip() and not VERBOSE_ONLY.match(line)]


def prompted(text):
    """A statement's lines as psql prompts for them."""
    return "\n".join(("=# " if n == 0 else "-# ") + line for n, line in enumerate(text))


def indent(lines, prefix="  "):
    return "\n".join(prefix + line for line in lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parse-only", action="store_true")
    parser.add_argument(
        "--show-output", action="store_true",
        help="print what psql printed for every transcript statement (to write a new transcript)",
    )
    parser.add_argument("--psql")
    parser.add_argument("--host")
    parser.add_argument("--port", default="5432")
    parser.add_argument("--user", default="postgres")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    if not args.parse_only and not (args.psql and args.host):
        parser.error("--psql and --host are needed unless --parse-only")

    parsed = {}
    try:
        for path in args.files:
            parsed[path] = parse_blocks(path)
    except FormatError as error:
        print(f"doc-examples: {error}", file=sys.stderr)
        return 1
    for path, blocks in parsed.items():
        if os.path.relpath(path) == "README.md" and not any(block.runnable for block in blocks):
            print(f"doc-examples: {path}: no sql or psql block: the README's examples would go untested", file=sys.stderr)
            return 1

    failures, total = [], 0
    for index, (path, blocks) in enumerate(parsed.items()):
        ran = [block for block in blocks if block.runnable]
        counts = {tag: sum(block.tag == tag for block in ran) for tag in RUN_TAGS}
        others = {}
        for block in blocks:
            if not block.runnable:
                others[block.tag] = others.get(block.tag, 0) + 1
        not_run = ", ".join(f"{tag} {n}" for tag, n in sorted(others.items())) or "none"
        if args.parse_only:
            verb = "to run"
        else:
            file_failures = run_file(index, path, blocks, args)
            failures += file_failures
            verb = "ran" if not file_failures else f"run, {len(file_failures)} failed"
        total += len(ran)
        print(
            f"{path}: {len(ran)} blocks {verb} ({counts['psql']} psql, {counts['sql']} sql); "
            f"not run: {not_run}"
        )
    if failures:
        for failure in failures:
            print(f"\n{failure}", file=sys.stderr)
        print(f"\ndoc-examples: {len(failures)} failed, in {total} blocks of {len(parsed)} files", file=sys.stderr)
        return 1
    print(f"doc-examples: {total} blocks in {len(parsed)} files: {'format ok' if args.parse_only else 'ok'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
