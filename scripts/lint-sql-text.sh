#!/usr/bin/env bash
# Refuses SQL that a shell script makes by pasting text into it (docs/security.md, rule 7).
# The kits run their SQL as the superuser, and the text a script has in hand may come from a
# catalog, a table or a file that another role writes: a subscription's name, which a role
# granted pg_create_subscription chooses, pasted into `ALTER SUBSCRIPTION $sub ...` or
# `WHERE slot_name = '$sub'`, ran that role's `ALTER ROLE ... SUPERUSER` (0.8.0's mesh.sh). So
# text goes to psql as a variable (`psql -v name="$value"`, then :'name' a literal, :"name" an
# identifier, in SQL read from a file or a quoted heredoc), or the server quotes it
# (format('%I', ...) and \gexec); never through the shell into the SQL's text.
#
# Refused, in every shell script git knows under deploy/ and scripts/ (tracked, or new and not
# ignored; *.sh or a sh/bash shebang), or in the files named as arguments:
#   - a shell expansion ($name, ${...}, $(...), `...`) in the SQL of a command that runs psql:
#     the argument of -c/--command, a here-string, a heredoc whose delimiter is not quoted, and
#     what echo or printf write into a pipe to it. Commands that run psql are psql itself and
#     every shell function that passes "$@" to one (cluster_psql, node_sql, ...), found in the
#     files read and in scripts/lib.sh. Arithmetic ($((...))) is a number and allowed.
#   - a shell expansion in text run as a shell command: eval, and the -c of sh, bash, su and
#     runuser (pass values as positional parameters: sh -c '... "$1"' sh "$value").
# A function a command substitution runs is read too ($(node_sql ... -c "...")).
#
# Exempt, by file and expansion, with the reason: values that are the script's own (its
# constants, numbers it computed, paths it made), never text read from a catalog, a table or a
# file (EXEMPT below). deploy/ has none: the kits run against databases other roles use.
#
# Prints each finding as file:line and exits 1; prints `lint-sql-text: N files, M SQL commands: ok`.
set -euo pipefail
cd "$(dirname "$0")/.."

exec python3 - "$@" <<'PY'
import os
import re
import subprocess
import sys

# (file, expansion): why its value is never text read from a catalog, a table or a file.
# Every one is a throwaway cluster the script itself made, where no other role exists.
EXEMPT = {
    ("scripts/bench-ddl.sh", "$version"):
        "the extension version the script loops over, from its own list",
    ("scripts/bench-ddl.sh", "$schemas"):
        "one of the script's two constants ('' or app)",
    ("scripts/bench.sh", "$name"):
        "a contender's name from the script's own list (insert_<key>)",
    ("scripts/bench.sh", "$key"):
        "a key kind from the script's constant KEYS (bigserial snowflake uuid)",
    ("scripts/bench.sh", "${key}"):
        "a key kind from the script's constant KEYS (bigserial snowflake uuid)",
    ("scripts/bench.sh", "$(printf 'insert_%s,' \"${KEYS[@]}\" | sed 's/,$//')"):
        "the table names made from the script's constant KEYS",
    ("scripts/bench.sh", "$INDEX_ROWS"):
        "a number the script sets",
    ("scripts/bench.sh", "${CALL[$name]//:client_id/1}"):
        "the calls the script benchmarks, from its own table CALL",
    ("scripts/compare-builds.sh", "$IDS"):
        "the operator's argument, a count of IDs (the operator runs SQL on the cluster anyway)",
    ("scripts/demo.sh", "$conn"):
        "the loop's own numbers 1 to 4",
    ("scripts/image-test.sh", "$PREVIOUS"):
        "a version from the names of this repository's own sql/ scripts (full_script_versions)",
    ("scripts/layout-rate.sh", "$LAYOUT"):
        "the operator's argument, the layout being measured (the operator runs SQL on the cluster anyway)",
    ("scripts/profile.sh", "$PROFILE_DIR"):
        "the folder the script made (cluster_temp_dir), in a command run as the server's owner",
    ("scripts/profile.sh", "$PG_BIN"):
        "the PostgreSQL the script runs (lib.sh's use_major), in a command run as the server's owner",
    ("scripts/profile.sh", "${1//:n/$2}"):
        "the script's own queries, with its own number N (and a bigint the server returned)",
}

SHELLS = {"sh", "bash", "dash", "zsh", "su", "runuser"}
# Words that run the command after them (their own options skipped up to the command).
RUNNERS = {"as_pg_owner", "sudo", "exec", "command", "env", "nice", "time", "nohup", "as_root"}
KEYWORDS = {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}", "time"}


class Word:
    def __init__(self, line):
        self.line = line
        self.raw = []        # the source text
        self.value = []      # quotes removed, expansions kept as written
        self.quoted = False  # any quoting
        self.expansions = []  # (text, line) of expansions outside single quotes (not arithmetic)
        self.inner = []      # token lists of command and process substitutions

    def text(self):
        return "".join(self.value)


class Op:
    def __init__(self, op, line):
        self.op, self.line = op, line


class Redir:
    def __init__(self, op, line, target=None, body=None, body_line=None, quoted=False):
        self.op, self.line, self.target = op, line, target
        self.body, self.body_line, self.quoted = body, body_line, quoted


class Lexer:
    def __init__(self, text):
        self.s, self.n = text, len(text)
        self.line = 1
        self.pending = []  # heredocs whose bodies start at the next newline

    def error(self, message):
        raise SyntaxError(f"line {self.line}: {message}")

    def lex(self, i, close=None):
        """Tokens from i up to `close` (')' of a substitution, at depth 0) or the end."""
        s, n = self.s, self.n
        tokens = []
        while i < n:
            c = s[i]
            if c == "\n":
                tokens.append(Op("\n", self.line))
                self.line += 1
                i += 1
                if self.pending:
                    i = self.read_heredocs(i)
            elif c in " \t":
                i += 1
            elif c == "\\" and s.startswith("\\\n", i):
                self.line += 1
                i += 2
            elif c == "#":
                while i < n and s[i] != "\n":
                    i += 1
            elif close and c == close:
                return tokens, i + 1
            elif s.startswith("<<<", i):
                i += 3
                while i < n and s[i] in " \t":
                    i += 1
                word, i = self.word(i)
                tokens.append(Redir("<<<", self.line, target=word))
            elif s.startswith("<<", i) and not s.startswith("<<(", i):
                strip = s.startswith("<<-", i)
                i += 3 if strip else 2
                while i < n and s[i] in " \t":
                    i += 1
                word, i = self.word(i)
                redir = Redir("<<", self.line, quoted=word.quoted)
                self.pending.append((word.text(), strip, redir))
                tokens.append(redir)
            elif c in "<>" and not s.startswith("<(", i) and not s.startswith(">(", i):
                j = i
                while j < n and s[j] in "<>&|":
                    j += 1
                op = s[i:j]
                i = j
                while i < n and s[i] in " \t":
                    i += 1
                if op.endswith("&") and i < n and (s[i].isdigit() or s[i] == "-"):
                    word, i = self.word(i)
                    tokens.append(Redir(op, self.line, target=word))
                elif i < n and s[i] not in "\n;|&)":
                    word, i = self.word(i)
                    tokens.append(Redir(op, self.line, target=word))
                else:
                    tokens.append(Redir(op, self.line))
            elif c in ";|&()":
                two = s[i:i + 2]
                if two in (";;", "&&", "||", "|&", ";&"):
                    tokens.append(Op(two, self.line))
                    i += 2
                else:
                    tokens.append(Op(c, self.line))
                    i += 1
            else:
                word, i = self.word(i)
                # A file descriptor before a redirection (2>file) is not a word of the command.
                if i < n and s[i] in "<>" and re.fullmatch(r"[0-9]+", "".join(word.raw)):
                    continue
                tokens.append(word)
        if close:
            self.error(f"no closing {close}")
        return tokens, i

    def read_heredocs(self, i):
        s, n = self.s, self.n
        for delimiter, strip, redir in self.pending:
            redir.body_line = self.line
            body = []
            while True:
                if i >= n:
                    self.error(f"heredoc {delimiter} not closed")
                j = s.find("\n", i)
                j = n if j < 0 else j
                text = s[i:j]
                i = j + 1
                self.line += 1
                if (text.lstrip("\t") if strip else text) == delimiter:
                    break
                body.append(text)
            redir.body = "\n".join(body)
        self.pending = []
        return i

    def word(self, i):
        s, n = self.s, self.n
        word = Word(self.line)
        start = i
        while i < n:
            c = s[i]
            if c in " \t\n;|&()<>" :
                if c in "<>" and s.startswith("(", i + 1):
                    word.quoted = word.quoted  # a process substitution
                    word.value.append(c + "(")
                    inner, i = self.lex(i + 2, ")")
                    word.inner.append(inner)
                    word.expansions.append((s[start:i], word.line))
                    continue
                break
            if c == "\\":
                if s.startswith("\\\n", i):
                    self.line += 1
                else:
                    word.value.append(s[i + 1:i + 2])
                    word.quoted = True
                i += 2
            elif c == "'":
                j = s.find("'", i + 1)
                if j < 0:
                    self.error("unterminated '")
                word.value.append(s[i + 1:j])
                self.line += s.count("\n", i, j)
                word.quoted = True
                i = j + 1
            elif c == '"':
                word.quoted = True
                i += 1
                while True:
                    if i >= n:
                        self.error('unterminated "')
                    c = s[i]
                    if c == '"':
                        i += 1
                        break
                    if c == "\\" and i + 1 < n and s[i + 1] in '$`"\\\n':
                        if s[i + 1] == "\n":
                            self.line += 1
                        else:
                            word.value.append(s[i + 1])
                        i += 2
                    elif c in "$`":
                        i = self.expansion(i, word)
                    else:
                        if c == "\n":
                            self.line += 1
                        word.value.append(c)
                        i += 1
            elif c in "$`":
                i = self.expansion(i, word)
            else:
                word.value.append(c)
                i += 1
        word.raw.append(s[start:i])
        return word, i

    def closing(self, j, open_, close):
        """The index of the bracket closing the one at s[j] (backslashes escape)."""
        s, n, depth = self.s, self.n, 0
        while j < n:
            if s[j] == open_:
                depth += 1
            elif s[j] == close:
                depth -= 1
                if depth == 0:
                    return j
            elif s[j] == "\\":
                j += 1
            j += 1
        self.error(f"no closing {close}")

    def expansion(self, i, word):
        """An expansion at s[i] ($... or `...`), recorded in word; returns the index after it."""
        s, line = self.s, self.line
        if s.startswith("$((", i):
            j = self.closing(i + 1, "(", ")")
            word.value.append(s[i:j + 1])
            self.line += s.count("\n", i, j)
            return j + 1
        if s.startswith("$(", i):
            inner, j = self.lex(i + 2, ")")
            word.inner.append(inner)
        elif s.startswith("${", i):
            j = self.closing(i + 1, "{", "}") + 1
        elif s[i] == "`":
            j = s.find("`", i + 1)
            if j < 0:
                self.error("unterminated `")
            inner, _ = Lexer(s[i + 1:j]).lex(0)
            word.inner.append(inner)
            j += 1
        else:
            m = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])").match(s, i)
            if not m:
                word.value.append("$")
                return i + 1
            j = m.end()
        text = s[i:j]
        word.value.append(text)
        word.expansions.append((text, line))
        return j


def commands(tokens):
    """Simple commands: (words, redirections, the token index of its first token, tokens)."""
    result, words, redirs, first = [], [], [], None
    for k, token in enumerate(tokens):
        if isinstance(token, Op):
            if words or redirs:
                result.append((words, redirs, first))
            words, redirs, first = [], [], None
            continue
        if first is None:
            first = k
        if isinstance(token, Word):
            words.append(token)
        else:
            redirs.append(token)
    if words or redirs:
        result.append((words, redirs, first))
    return result


def command_word(words):
    """The index of the word naming the command run (past keywords, assignments, runners)."""
    k = 0
    while k < len(words):
        w = words[k]
        text = w.text()
        if re.match(r"[A-Za-z_][A-Za-z0-9_]*\+?=", "".join(w.raw)) or (not w.quoted and text in KEYWORDS):
            k += 1
        elif text in RUNNERS:
            k += 1
            while k < len(words) and words[k].text().startswith("-"):
                k += 1
        elif text == "runuser":
            # runuser -u USER -- COMMAND: the command after --; runuser -c is a shell.
            rest = [x.text() for x in words[k:]]
            if "--" in rest:
                k += rest.index("--") + 1
            else:
                return k
        else:
            return k
    return None


def basename(text):
    return text.rsplit("/", 1)[-1]


def is_sql(text, wrappers):
    return basename(text) == "psql" or text in wrappers


def function_bodies(tokens):
    """(name, body tokens) of each function defined as name() { ...; }."""
    found = []
    for k in range(len(tokens) - 3):
        a, b, c, d = tokens[k:k + 4]
        if (isinstance(a, Word) and isinstance(b, Op) and b.op == "(" and isinstance(c, Op)
                and c.op == ")" and isinstance(d, Word) and d.text() == "{" and not d.quoted):
            depth, j = 0, k + 3
            while j < len(tokens):
                t = tokens[j]
                if isinstance(t, Word) and not t.quoted and t.text() in ("{", "}"):
                    depth += 1 if t.text() == "{" else -1
                    if depth == 0:
                        break
                j += 1
            found.append((a.text(), tokens[k + 4:j]))
    return found


def all_token_lists(tokens):
    yield tokens
    for token in tokens:
        words = [token] if isinstance(token, Word) else [token.target] if isinstance(token, Redir) and token.target else []
        for w in words:
            for inner in w.inner:
                yield from all_token_lists(inner)


def sql_arguments(words):
    """The words of a psql command line that are SQL (the -c / --command arguments)."""
    out, k = [], 0
    while k < len(words):
        text = words[k].text()
        if text in ("-c", "--command") or re.fullmatch(r"-[A-Za-z]*c", text) and not text.startswith("--"):
            if k + 1 < len(words):
                out.append(words[k + 1])
            k += 2
            continue
        if text.startswith("--command="):
            out.append(words[k])
        k += 1
    return out


HEREDOC_EXPANSION = re.compile(r"(?<!\\)(\$\(\(|\$\{[^}]*\}|\$\([^)]*\)?|\$[A-Za-z_][A-Za-z0-9_]*|\$[0-9@*#?$!-]|`[^`]*`?)")


def check(path, tokens, wrappers, findings, counter):
    for token_list in all_token_lists(tokens):
        for words, redirs, first in commands(token_list):
            k = command_word(words)
            name = words[k].text() if k is not None else None
            args = words[k + 1:] if k is not None else []
            problems = []  # (line, expansion, where)
            if name and is_sql(name, wrappers):
                counter[0] += 1
                for w in sql_arguments(args):
                    problems += [(line, text, "in the SQL of -c") for text, line in w.expansions]
                for r in redirs:
                    if r.op == "<<<" and r.target:
                        problems += [(line, text, "in a here-string to psql") for text, line in r.target.expansions]
                    elif r.op == "<<" and not r.quoted and r.body is not None:
                        for n, body_line in enumerate(r.body.split("\n")):
                            for m in HEREDOC_EXPANSION.finditer(body_line):
                                if m.group(1) != "$((":
                                    problems.append((r.body_line + n, m.group(1),
                                                     "in a heredoc to psql whose delimiter is not quoted"))
                # What echo or printf write into a pipe to it.
                if first is not None and first > 0 and isinstance(token_list[first - 1], Op) \
                        and token_list[first - 1].op == "|":
                    problems += piped_in(token_list, first - 1)
            elif name and basename(name) in SHELLS:
                for w in sql_arguments(args):
                    problems += [(line, text, f"in the command of {basename(name)} -c") for text, line in w.expansions]
            elif name == "eval":
                for w in args:
                    problems += [(line, text, "in eval") for text, line in w.expansions]
            for line, text, where in problems:
                if (path, text) in EXEMPT:
                    continue
                findings.append(f"{path}:{line}: {text} {where}")


def piped_in(tokens, k):
    """Expansions in the echo/printf commands of the pipeline stages before tokens[k] ('|')."""
    depth, j = 0, k - 1
    while j >= 0:
        t = tokens[j]
        if isinstance(t, Op) and t.op in (";", "\n", "&&", "||", "&", ";;", "(") and depth <= 0:
            break
        if isinstance(t, Word) and not t.quoted and t.text() == "}":
            depth += 1
        if isinstance(t, Word) and not t.quoted and t.text() == "{":
            depth -= 1
            if depth <= 0:
                j -= 1
                break
        j -= 1
    problems = []
    for words, _, _ in commands(tokens[j + 1:k]):
        c = command_word(words)
        if c is not None and words[c].text() in ("echo", "printf"):
            for w in words[c + 1:]:
                problems += [(line, text, f"in what {words[c].text()} writes into a pipe to psql")
                             for text, line in w.expansions]
    return problems


def shell_scripts():
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                             "deploy", "scripts"], check=True, capture_output=True).stdout.decode()
    paths = []
    for path in sorted(set(p for p in listed.split("\0") if p)):
        if not os.path.isfile(path):
            continue
        if path.endswith(".sh"):
            paths.append(path)
            continue
        with open(path, "rb") as f:
            first = f.readline().decode("utf-8", "replace")
        if re.match(r"#!(/usr/bin/env |/bin/|/usr/bin/)(ba)?sh(\s|$)", first):
            paths.append(path)
    return paths


def main():
    paths = sys.argv[1:] or shell_scripts()
    parsed, failures = {}, []
    for path in sorted(set(paths) | {"scripts/lib.sh"}):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        try:
            parsed[path] = Lexer(text).lex(0)[0]
        except SyntaxError as error:
            failures.append(f"{path}: cannot read it: {error}")
    # The functions that pass "$@" to psql, or to one of them.
    wrappers = set()
    bodies = [fb for tokens in parsed.values() for fb in function_bodies(tokens)]
    while True:
        grown = False
        for name, body in bodies:
            if name in wrappers:
                continue
            for token_list in all_token_lists(body):
                for words, _, _ in commands(token_list):
                    k = command_word(words)
                    if k is not None and is_sql(words[k].text(), wrappers) and any(
                            w.text() == "$@" and w.quoted for w in words[k + 1:]):
                        wrappers.add(name)
                        grown = True
        if not grown:
            break
    counter = [0]
    for path in paths:
        if path in parsed:
            check(path, parsed[path], wrappers, failures, counter)
    failures.sort(key=lambda f: (f.split(":")[0], int(f.split(":")[1]) if f.split(":")[1].isdigit() else 0))
    if failures:
        print("lint-sql-text: text pasted into SQL or a shell command by the shell (pass it as a psql "
              "variable, -v name=value, :'name' or :\"name\"; docs/security.md, rule 7):", file=sys.stderr)
        for failure in failures:
            print(failure, file=sys.stderr)
        sys.exit(1)
    print(f"lint-sql-text: {len(paths)} files, {counter[0]} SQL commands: ok")


main()
PY
