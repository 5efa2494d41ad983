#!/usr/bin/env bash
# Tests the extension image of the current major (scripts/image.sh) the way CloudNativePG uses
# it, on PostgreSQL 18 or later (image volumes need extension_control_path):
#
#   1. skopeo reads the layout (and checks every blob against its digest), as a registry copy
#      would; the image is then unpacked as a container runtime does, from index.json through
#      the manifest to each layer, each checked against its digest, into
#      <dir>/extensions/snowflake_id, read-only;
#   2. a PostgreSQL of the major without the extension of its own (the major's tree copied, its
#      snowflake_id files left out, as CloudNativePG's minimal operand images have none) starts
#      with the settings CloudNativePG writes: its defaults, then the image's folders, appended
#      to extension_control_path and dynamic_library_path; the library preloaded; and the shard
#      set for the cluster (snowflake_id.shard);
#   3. the postmaster has the image's library mapped (/proc/<pid>/maps); the versions offered
#      are those the image carries; the extension is created at the previous release from the
#      image's scripts, issues and decodes IDs, is updated in place to this version, and goes
#      on issuing above its earlier IDs.
#
# It installs nothing into any PostgreSQL and never needs a Kubernetes cluster: what it checks
# is the image and PostgreSQL's use of it, not the operator.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

if [ "$PG_MAJOR" -lt 18 ]; then
  echo "skipped on PostgreSQL $PG_MAJOR: the CloudNativePG extension image (image volume extensions need extension_control_path, PostgreSQL 18 or later)"
  exit 0
fi
fail() { echo "image-test: FAILED: $*" >&2; exit 1; }

LAYOUT=$(./scripts/image.sh | tail -n 1)
# The release before this one: the newest full install script kept in sql/ (sql/README.md).
PREVIOUS=$(full_script_versions sql | tail -n 1)

DIR=$(cluster_temp_dir image)
trap 'cluster_stop "$DIR"; as_root rm -rf "$DIR"' EXIT

# 1. The image, unpacked as a runtime does.
blob_of() { # blob_of DIGEST: the blob's path, once its content is checked against the digest
  local path="$LAYOUT/blobs/sha256/${1#sha256:}"
  [ "sha256:$(sha256sum "$path" | cut -d ' ' -f 1)" = "$1" ] || fail "blob $1 does not match its digest"
  echo "$path"
}
MOUNT="$DIR/extensions/snowflake_id"
mkdir -p "$MOUNT"
skopeo inspect "oci:$LAYOUT" >/dev/null || fail "skopeo cannot read $LAYOUT"
manifest=$(blob_of "$(jq -r '.manifests[0].digest' "$LAYOUT/index.json")")
VERSION=$(jq -r '.annotations."org.opencontainers.image.version"' "$manifest")
for layer in $(jq -r '.layers[].digest' "$manifest"); do
  tar xzf "$(blob_of "$layer")" -C "$MOUNT" --no-same-owner
done
# Nothing but the layout CloudNativePG expects, read-only as an image volume is.
found=$(cd "$MOUNT" && find . -type f | sort | tr '\n' ' ')
expected=$(cd "$MOUNT" && printf './lib/snowflake_id.so ./share/doc/snowflake_id/CHANGELOG.md '; find ./share/extension -type f | sort | tr '\n' ' ')
[ "$found" = "$expected" ] || fail "the image holds $found"
[ -f "$MOUNT/share/extension/snowflake_id--$PREVIOUS.sql" ] || fail "the image lacks the install script of $PREVIOUS"
chmod -R a-w,a+rX "$DIR/extensions"

# 2. A PostgreSQL of the major with no snowflake_id of its own.
copy_bin=$(copy_postgresql "$DIR/postgresql")
rm -f "$("$copy_bin/pg_config" --pkglibdir)/snowflake_id.so" \
  "$("$copy_bin/pg_config" --sharedir)/extension/"snowflake_id*
chmod -R a+rX "$DIR/postgresql"
PG_BIN=$copy_bin
cluster_init "$DIR" \
  "extension_control_path = '\$system:$MOUNT/share'" \
  "dynamic_library_path = '\$libdir:$MOUNT/lib'" \
  "snowflake_id.shard = 7"
cluster_start "$DIR"

# 3. The image's files are the ones in use.
grep -q " $MOUNT/lib/snowflake_id.so$" "/proc/$(cluster_postmaster_pid "$DIR")/maps" ||
  fail "the postmaster did not load $MOUNT/lib/snowflake_id.so"
offered=$(cluster_psql "$DIR" -qtA -d postgres -c \
  "SELECT string_agg(version, ' ' ORDER BY string_to_array(version, '.')::int[]) FROM pg_available_extension_versions WHERE name = 'snowflake_id'")
image_versions=$(full_script_versions "$MOUNT/share/extension" | tr '\n' ' ')
[ "$offered " = "$image_versions" ] || fail "PostgreSQL offers versions '$offered', the image carries '$image_versions'"

result=$(cluster_psql "$DIR" -qtA -d postgres <<SQL
CREATE EXTENSION snowflake_id VERSION '$PREVIOUS';
CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), note text);
INSERT INTO orders (note) SELECT 'before ' || g FROM generate_series(1, 1000) g;
ALTER EXTENSION snowflake_id UPDATE;
INSERT INTO orders (note) SELECT 'after ' || g FROM generate_series(1, 1000) g;
SELECT extversion FROM pg_extension WHERE extname = 'snowflake_id';
SELECT count(DISTINCT id) || ' ' || bool_and((snowflake_decode(id)).shard = 7)
  || ' ' || bool_and((snowflake_decode(id)).ts <= now() + interval '10 seconds')
  FROM orders;
SELECT (SELECT min(id) FROM orders WHERE note LIKE 'after%') > (SELECT max(id) FROM orders WHERE note LIKE 'before%');
SELECT pg_typeof(snowflake_decode(snowflake_nextval()));
SQL
)
[ "$result" = "$VERSION
2000 true true
t
snowflake_parts" ] || fail "expected $PREVIOUS updated to $VERSION, 2000 distinct IDs of shard 7 in order, decoded; got: $result"
echo "image-test: $(basename "$LAYOUT") ($(jq -r '.manifests[0].annotations."org.opencontainers.image.ref.name"' "$LAYOUT/index.json")) mounted into PostgreSQL $PG_MAJOR as CloudNativePG does, created at $PREVIOUS, updated to $VERSION, 2000 IDs of shard 7: ok"
