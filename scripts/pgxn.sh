#!/usr/bin/env bash
# Builds the PGXN release of this checkout:
#
#   ./scripts/pgxn.sh   ->  target/pgxn/snowflake_id-<version>.zip
#
# A zip of the source, every file git tracks (or would: new files not ignored) as the working
# tree has them, in one folder snowflake_id-<version>/, as PGXN Manager asks; META.json at its
# top describes the release for PGXN, the Makefile builds and installs it (pgxn install), and
# CHANGELOG.md carries the release notes. META.json must name Cargo.toml's version and the
# majors tested (scripts/package.sh checks both). It prints the zip's path as its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | sed -n 1p)
python3 -m json.tool META.json >/dev/null
# The fields PGXN's meta spec (1.0.0) requires, and the version the release is.
python3 - "$VERSION" <<'PY'
import json, sys
meta = json.load(open("META.json"))
missing = [f for f in ("name", "version", "abstract", "maintainer", "license", "provides", "meta-spec") if f not in meta]
if missing:
    sys.exit(f"pgxn: META.json lacks {', '.join(missing)}")
for name, ext in meta["provides"].items():
    if ext.get("version") != sys.argv[1] or meta["version"] != sys.argv[1]:
        sys.exit(f"pgxn: META.json's versions of the release and of {name} must be {sys.argv[1]}")
PY

ZIP="$SNOWFLAKE_ROOT/target/pgxn/snowflake_id-${VERSION}.zip"
mkdir -p "$(dirname "$ZIP")"
rm -f "$ZIP"
# The commit's time on every entry, so that the same tree gives the same zip.
git ls-files -z --cached --others --exclude-standard |
  python3 -c '
import sys, time, zipfile, os
prefix, out, stamp = sys.argv[1], sys.argv[2], time.gmtime(int(sys.argv[3]))[:6]
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for path in sorted(p for p in sys.stdin.read().split("\0") if p and os.path.isfile(p)):
        info = zipfile.ZipInfo(f"{prefix}/{path}", stamp)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = (0o755 if os.access(path, os.X_OK) else 0o644) << 16
        with open(path, "rb") as f:
            z.writestr(info, f.read())
' "snowflake_id-${VERSION}" "$ZIP" "$(git log -1 --format=%ct)"
echo "$ZIP"
