#!/usr/bin/env bash
# Runs the SQL examples of README.md and docs/ against a throwaway server with the
# extension preloaded, and compares what psql prints with the transcripts shown, so that a
# renamed function, column or setting, or a changed message or SQLSTATE, fails here rather
# than misleads a reader. The format of the examples and what is compared:
# docs/development.md, "Examples that are tested" (and scripts/doc_examples.py, which does it).
#
#   ./scripts/doc-examples.sh            builds and installs the extension (release), runs every file
#   ./scripts/doc-examples.sh FILE...    the files named only
#
# Prints one line per file (the blocks run and those not run) and a last line
# `doc-examples: N blocks in M files: ok`; a failing block is named by file and line, with
# the difference. Fails too when README.md has no runnable block, when the tree of
# docs/development.md and the files disagree, when a relative link or anchor is broken, when a
# module is missing from its module map, an integration test file from docs/development.md's
# "Test layers", or a page names majors other than scripts/lib.sh's SUPPORTED_MAJORS.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

FILES=("$@")
[ ${#FILES[@]} -gt 0 ] || FILES=(README.md docs/*.md docs/*/*.md)

# What needs no server first, so that it fails before anything is built: the tree of
# docs/development.md against the files, every relative link and anchor, every module in its
# module map, every integration test file in "Test layers", the majors the pages name against
# SUPPORTED_MAJORS, and the format of the blocks (docs/development.md, "The tree, checked").
python3 scripts/doc_check.py tree docs/development.md
python3 scripts/doc_check.py links README.md docs/*.md docs/*/*.md
python3 scripts/doc_check.py modules src/lib.rs src/*/mod.rs src/*/*/mod.rs crates/*/src/lib.rs
python3 scripts/doc_check.py tests docs/development.md
python3 scripts/doc_check.py majors README.md docs/*.md docs/*/*.md
python3 scripts/doc_examples.py --parse-only "${FILES[@]}" >/dev/null

install_extension
DIR=$(cluster_temp_dir doc-examples)
trap 'cluster_stop "$DIR"; rm -rf "$DIR"' EXIT

# Every session shows times in UTC and ISO, whatever this machine's zone, as the examples do.
cluster_init "$DIR" "timezone = 'UTC'" "datestyle = 'iso, mdy'"
cluster_start "$DIR"

python3 scripts/doc_examples.py --psql "$PG_BIN/psql" --host "$DIR" --port "$PG_PORT" --user postgres \
  "${FILES[@]}"
