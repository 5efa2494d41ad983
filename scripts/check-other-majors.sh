#!/usr/bin/env bash
# Type-checks the extension for the PostgreSQL majors supported in code but not tested here
# (16 and 17: no server headers for them can be had on this platform). pgrx ships the
# bindings it generated for every major it supports; with `DOCS_RS=1` its build script skips
# generating them from headers, and `--cfg docsrs`, given to pgrx-pg-sys alone by
# scripts/rustc-shipped-bindings, makes it use the shipped ones. This shows that every `cfg`
# of src/compat.rs compiles against the C API of its major; nothing is linked or run.
#
#   ./scripts/check-other-majors.sh          16 and 17
#   ./scripts/check-other-majors.sh 17       the majors named
set -euo pipefail
cd "$(dirname "$0")/.."

majors=("$@")
[ ${#majors[@]} -gt 0 ] || majors=(16 17)
for major in "${majors[@]}"; do
  echo "check-other-majors: PostgreSQL $major against pgrx's shipped bindings"
  DOCS_RS=1 RUSTC_WRAPPER="$PWD/scripts/rustc-shipped-bindings" CARGO_TARGET_DIR="$PWD/target/check-other-majors" \
    cargo check --quiet --lib --no-default-features --features "pg$major"
done
echo "check-other-majors: ${majors[*]}: ok"
