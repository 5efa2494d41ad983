#!/usr/bin/env bash
# Refuses a function or procedure that does not pin search_path (docs/security.md, rule 3).
# A function that resolves names by its caller's search_path runs whatever look-alike a
# writable schema of that path holds (a public.format(text, regclass) beats
# pg_catalog.format(text, VARIADIC "any") by its exact types) with the rights of whoever calls
# it: a superuser running a deploy kit, say. So every CREATE [OR REPLACE] FUNCTION or
# PROCEDURE of a language with a body (PL/pgSQL, SQL, PL/Proxy, ...; not C or internal) must
# have a clause SET search_path = pg_catalog[, schemas of its own], pg_temp: pg_catalog first,
# pg_temp last.
#
# Read: every .sql file git knows (tracked, or new and not ignored) under sql/, src/ and
# deploy/, and the heredocs of the shell scripts under deploy/. A function written in a shell
# script anywhere but in a heredoc (a psql -c string) is refused: it cannot be read reliably,
# so it belongs in a .sql file or a heredoc. Nested definitions (in a dollar-quoted body: a DO
# block, an EXECUTE) are read too.
#
# In sql/, released scripts are history, never edited (sql/README.md): read are the newest
# full install script there and the update scripts to 0.7.0 and later; older ones were
# released before this check. Not read: the SQL that src/*.rs embeds with extension_sql!
# (generated into the full script, which is read once released; its SQL functions are the
# decoders exempt below).
#
# Exempt, by name, SQL-language functions only (never PL/pgSQL) whose body leaves nothing
# for a search_path to resolve (every function named by its schema, no operator), each with
# its reason (EXEMPT below).
#
# Prints each offending file:line and exits 1; prints `lint-sql: N files, M functions: ok`.
set -euo pipefail
cd "$(dirname "$0")/.."

# The other rule of SQL in this repository: no text pasted into SQL by a shell script
# (docs/security.md, rule 7), checked here so that the test command's lint step runs it.
./scripts/lint-sql-text.sh

exec python3 - <<'PY'
import re
import subprocess
import sys

# In sql/: update scripts to this version and later are read (with the newest full script).
FIRST_CHECKED = (0, 7, 0)
# SQL-language functions allowed without the clause, by name, with the reason.
EXEMPT = {
    # The extension's decoders (src/api/decoding.rs), so in every released full script.
    "snowflake_decode": "its body names each function with @extschema@ and has no operator",
}
# Languages whose functions have no body to resolve names in.
NO_BODY = {"c", "internal"}
CREATE_FUNCTION = re.compile(r"\bcreate\s+(or\s+replace\s+)?(function|procedure)\b", re.I)


class ParseError(Exception):
    def __init__(self, line, message):
        super().__init__(message)
        self.line = line


def tokenize(text, first_line=1):
    """SQL as psql reads it: tokens (kind, value, line) with kind one of word, qident,
    string, dollar (a dollar-quoted string), punct, comment and end (a top-level ';').
    psql's backslash commands run to the end of their line and are dropped."""
    tokens = []
    i, n, line = 0, len(text), first_line
    word = re.compile(r"[A-Za-z_\x80-\uffff][A-Za-z0-9_$\x80-\uffff]*")
    dollar = re.compile(r"\$([A-Za-z_\x80-\uffff][A-Za-z0-9_\x80-\uffff]*)?\$")
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif text.startswith("--", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            tokens.append(("comment", text[i + 2:j], line))
            i = j
        elif text.startswith("/*", i):
            start, depth, j = line, 1, i + 2
            while depth:
                if j >= n:
                    raise ParseError(start, "unterminated /* comment")
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            tokens.append(("comment", text[i + 2:j - 2], start))
            line += text.count("\n", i, j)
            i = j
        elif c == "'" or (c in "eE" and text.startswith("'", i + 1)
                          and (i == 0 or not re.match(r"[A-Za-z0-9_$]", text[i - 1]))):
            escapes = c != "'"
            j = i + (2 if escapes else 1)
            value = []
            while True:
                if j >= n:
                    raise ParseError(line, "unterminated string")
                if escapes and text[j] == "\\":
                    value.append(text[j:j + 2])
                    j += 2
                elif text[j] == "'":
                    if text.startswith("''", j):
                        value.append("'")
                        j += 2
                    else:
                        j += 1
                        break
                else:
                    value.append(text[j])
                    j += 1
            tokens.append(("string", "".join(value), line))
            line += text.count("\n", i, j)
            i = j
        elif c == '"':
            j = i + 1
            while True:
                k = text.find('"', j)
                if k < 0:
                    raise ParseError(line, "unterminated quoted identifier")
                if text.startswith('""', k):
                    j = k + 2
                    continue
                break
            tokens.append(("qident", text[i + 1:k].replace('""', '"'), line))
            line += text.count("\n", i, k)
            i = k + 1
        elif c == "$" and (m := dollar.match(text, i)):
            tag = m.group(0)
            k = text.find(tag, m.end())
            if k < 0:
                raise ParseError(line, f"unterminated {tag} string")
            body_line = line
            tokens.append(("dollar", text[m.end():k], body_line))
            line += text.count("\n", i, k + len(tag))
            i = k + len(tag)
        elif c == "\\":
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c == ";":
            tokens.append(("end", ";", line))
            i += 1
        elif m := word.match(text, i):
            tokens.append(("word", m.group(0).lower(), line))
            i = m.end()
        elif m := re.compile(r"\$[0-9]+").match(text, i):
            tokens.append(("punct", m.group(0), line))
            i = m.end()
        else:
            tokens.append(("punct", c, line))
            i += 1
    return tokens


def statements(tokens):
    current = []
    for token in tokens:
        if token[0] == "end":
            if current:
                yield current
            current = []
        else:
            current.append(token)
    if current:
        yield current


def search_path_value(code, k):
    """The schemas of a SET search_path clause whose name is code[k], or None when the
    clause is not `= list` / `TO list` (FROM CURRENT keeps the creator's path)."""
    if k + 1 >= len(code) or code[k + 1][1] not in ("=", "to"):
        return None
    items, part, j = [], "", k + 2
    while j < len(code):
        kind, value, _ = code[j]
        if kind == "string":
            items.extend(s.strip() for s in value.split(","))
        elif kind in ("word", "qident") or (kind == "punct" and value == "@"):
            part += value
            if kind == "word" and j + 1 < len(code) and code[j + 1][1] == "@":
                part += "@"
                j += 1
            if j + 1 < len(code) and code[j + 1][1] == ",":
                items.append(part)
                part = ""
                j += 2
                continue
            items.append(part)
            break
        else:
            break
        if j + 1 < len(code) and code[j + 1][1] == ",":
            j += 2
            continue
        break
    return [item for item in items if item]


def check_function(stmt, start):
    """(language, name, line, problem or None) of the CREATE FUNCTION at stmt[start]."""
    line = stmt[start][2]
    code = [t for t in stmt[start:] if t[0] != "comment"]
    k = 2 if code[1][1] == "or" else 0
    k += 2  # past CREATE [OR REPLACE] FUNCTION
    name = []
    while k < len(code) and code[k][1] != "(":
        if code[k][0] in ("word", "qident"):
            name.append(code[k][1])
        k += 1
    name = name[-1] if name else "?"
    depth, language, pins, problem = 0, None, None, None
    while k < len(code):
        kind, value, _ = code[k]
        if kind == "punct" and value == "(":
            depth += 1
        elif kind == "punct" and value == ")":
            depth -= 1
        elif depth == 0 and kind == "word":
            if value == "language" and k + 1 < len(code):
                language = code[k + 1][1].lower()
            elif value == "set" and k + 1 < len(code) and code[k + 1][1] == "search_path":
                pins = search_path_value(code, k + 1)
                if pins is None:
                    problem = "SET search_path takes no explicit list (FROM CURRENT?)"
        k += 1
    # Without a LANGUAGE clause, only a body in SQL (BEGIN ATOMIC, RETURN) is accepted.
    language = language or "sql"
    if language in NO_BODY:
        return language, name, line, None
    if problem is None and pins is None:
        if language != "plpgsql" and name in EXEMPT:
            return language, name, line, None
        problem = "no SET search_path clause"
    elif problem is None:
        if pins[0].lower() != "pg_catalog" or pins[-1].lower() != "pg_temp":
            problem = f"search_path = {', '.join(pins)}: pg_catalog must come first, pg_temp last"
    return language, name, line, problem


def lint_sql(text, first_line=1):
    """Findings (line, message) and the number of functions with a body in text."""
    findings, count = [], 0
    tokens = tokenize(text, first_line)
    for stmt in statements(tokens):
        for i, token in enumerate(stmt):
            if token[0] != "word" or token[1] != "create":
                continue
            rest = [t[1] for t in stmt[i + 1:i + 4] if t[0] != "comment"]
            if rest[:1] in (["function"], ["procedure"]) or rest[:3] in (
                    ["or", "replace", "function"], ["or", "replace", "procedure"]):
                language, name, line, problem = check_function(stmt, i)
                if language not in NO_BODY:
                    count += 1
                if problem:
                    findings.append((line, f"function {name} (LANGUAGE {language}): {problem}"))
        for token in stmt:
            if token[0] in ("dollar", "string") and CREATE_FUNCTION.search(token[1]):
                if token[0] == "string":
                    findings.append((token[2], "a function defined in a quoted string: "
                                     "write it in a dollar-quoted one, which this check reads"))
                    continue
                inner, inner_count = lint_sql(token[1], token[2])
                findings += inner
                count += inner_count
    return findings, count


HEREDOC = re.compile(r"(?<!<)<<(-?)[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")


def lint_shell(text):
    """The heredocs of a shell script linted as SQL; a function outside them refused."""
    lines = text.split("\n")
    findings, count, outside, i = [], 0, [], 0
    while i < len(lines):
        outside.append((i + 1, lines[i]))
        pending = HEREDOC.findall(lines[i])
        i += 1
        for strip, _, word in pending:
            body_start = i + 1
            body = []
            while i < len(lines) and (lines[i].lstrip("\t") if strip else lines[i]) != word:
                body.append(lines[i])
                i += 1
            i += 1
            text_of_body = "\n".join(body)
            if CREATE_FUNCTION.search(text_of_body):
                try:
                    found, n = lint_sql(text_of_body, body_start)
                except ParseError as error:
                    found, n = [(error.line, f"cannot read the heredoc: {error}")], 0
                findings += found
                count += n
    for number, line in outside:
        if CREATE_FUNCTION.search(line) and not line.lstrip().startswith("#"):
            findings.append((number, "a function defined outside a heredoc: put it in a .sql "
                             "file or a heredoc, where this check reads it"))
    return findings, count


def version(text):
    return tuple(int(part) for part in text.split("."))


SCRIPT = re.compile(r"sql/snowflake_id--([0-9.]+?)(?:--([0-9.]+))?\.sql")


def selected(path, newest_full):
    """Whether path is read, and how: 'sql', 'shell' or None."""
    if path.startswith("deploy/") and path.endswith(".sh"):
        return "shell"
    if not path.endswith(".sql") or not path.startswith(("sql/", "src/", "deploy/")):
        return None
    m = SCRIPT.fullmatch(path)
    if m and m.group(2):
        return "sql" if version(m.group(2)) >= FIRST_CHECKED else None
    if m:
        return "sql" if version(m.group(1)) >= FIRST_CHECKED or m.group(1) == newest_full else None
    return "sql"


def main():
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            check=True, capture_output=True).stdout.decode().split("\0")
    paths = sorted(set(p for p in listed if p))
    full = [m.group(1) for m in map(SCRIPT.fullmatch, paths) if m and not m.group(2)]
    newest_full = max(full, key=version, default=None)
    files, functions, failures = 0, 0, []
    for path in paths:
        how = selected(path, newest_full)
        if how is None:
            continue
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            continue  # deleted in the work tree
        files += 1
        try:
            found, n = (lint_shell if how == "shell" else lint_sql)(text)
        except ParseError as error:
            found, n = [(error.line, f"cannot read the file: {error}")], 0
        functions += n
        failures += [f"{path}:{line}: {message}" for line, message in found]
    if failures:
        print("lint-sql: functions without a pinned search_path (docs/security.md, rule 3):",
              file=sys.stderr)
        for failure in failures:
            print(failure, file=sys.stderr)
        sys.exit(1)
    print(f"lint-sql: {files} files, {functions} functions: ok")


main()
PY
