#!/usr/bin/env bash
# Builds the extension image of one PostgreSQL major for CloudNativePG's image volume
# extensions: an OCI image holding only the extension's files, in the layout CloudNativePG
# mounts at /extensions/snowflake_id (docs/install.md cites its documentation):
#
#   lib/snowflake_id.so
#   share/extension/snowflake_id.control, and the install and upgrade scripts of every version
#   share/doc/snowflake_id/CHANGELOG.md  the release notes
#
#   PG_MAJOR=18 ./scripts/image.sh   ->  target/image/snowflake_id-<version>-pg18/  (an OCI image layout)
#                                        target/image/snowflake_id-<version>-pg18.tar  (the same, as one file)
#
# No daemon and no base image: the files come from the major's Debian package (so from the
# same release build, scripts/package.sh), the one layer is a tar made here, and the OCI
# layout (blobs named by their sha256, a manifest, a config, index.json) is written with
# sha256sum and jq. The layer's entries have fixed owners and times, so the same build gives the
# same digests. Only PostgreSQL 18 and later can use such an image (extension_control_path came
# in 18); the script builds the image of any major the package is built for. It prints the
# layout's path as its last line; its tag (the ref.name annotation) follows the convention of
# CloudNativePG's extension images: <major>-<version>-<Debian codename>.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

DEB=$(./scripts/package.sh | tail -n 1)
VERSION=$(dpkg-deb -f "$DEB" Version)
ARCH=$(dpkg-deb -f "$DEB" Architecture)
CODENAME=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release)
TAG="${PG_MAJOR}-${VERSION}-${CODENAME}"
OUT="$SNOWFLAKE_ROOT/target/image/snowflake_id-${VERSION}-pg${PG_MAJOR}"
# The commit's time, so that a rebuild of the same commit gives the same image.
CREATED=$(git log -1 --format=%cI 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
dpkg-deb -x "$DEB" "$STAGE/deb"
ROOT="$STAGE/root"
install -D -m 755 "$STAGE/deb/usr/lib/postgresql/$PG_MAJOR/lib/snowflake_id.so" "$ROOT/lib/snowflake_id.so"
install -d "$ROOT/share/extension"
install -m 644 "$STAGE/deb/usr/share/postgresql/$PG_MAJOR/extension/"* "$ROOT/share/extension/"
install -D -m 644 CHANGELOG.md "$ROOT/share/doc/snowflake_id/CHANGELOG.md"

rm -rf "$OUT" "$OUT.tar"
mkdir -p "$OUT/blobs/sha256"
# blob FILE: moves FILE into the layout under its digest and prints "sha256:<hex> <size>".
blob() {
  local hex size
  hex=$(sha256sum "$1" | cut -d ' ' -f 1)
  size=$(stat -c %s "$1")
  mv "$1" "$OUT/blobs/sha256/$hex"
  echo "sha256:$hex $size"
}

tar --sort=name --mtime="$CREATED" --owner=0 --group=0 --numeric-owner \
  -C "$ROOT" -cf "$STAGE/layer.tar" lib share
DIFF_ID="sha256:$(sha256sum "$STAGE/layer.tar" | cut -d ' ' -f 1)"
gzip -n -9 "$STAGE/layer.tar"
read -r LAYER_DIGEST LAYER_SIZE < <(blob "$STAGE/layer.tar.gz")

# The annotations and labels of the OCI image spec (the license by its SPDX name: META.json's
# "postgresql" is PGXN's); CloudNativePG's documentation asks for none.
LABELS=$(jq -n --arg version "$VERSION" --arg major "$PG_MAJOR" --arg created "$CREATED" \
  --arg description "$(python3 -c 'import json; print(json.load(open("META.json"))["abstract"])')" '{
    "org.opencontainers.image.title": "snowflake_id",
    "org.opencontainers.image.description": ($description + ", for PostgreSQL " + $major),
    "org.opencontainers.image.version": $version,
    "org.opencontainers.image.created": $created,
    "org.opencontainers.image.licenses": "PostgreSQL"
  }')

jq -n --arg arch "$ARCH" --arg diff_id "$DIFF_ID" --arg created "$CREATED" --argjson labels "$LABELS" '{
    architecture: $arch, os: "linux", created: $created,
    config: { Labels: $labels },
    rootfs: { type: "layers", diff_ids: [$diff_id] },
    history: [{ created: $created, created_by: "scripts/image.sh" }]
  }' >"$STAGE/config.json"
read -r CONFIG_DIGEST CONFIG_SIZE < <(blob "$STAGE/config.json")

jq -n --arg config "$CONFIG_DIGEST" --argjson config_size "$CONFIG_SIZE" \
  --arg layer "$LAYER_DIGEST" --argjson layer_size "$LAYER_SIZE" --argjson labels "$LABELS" '{
    schemaVersion: 2,
    mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: { mediaType: "application/vnd.oci.image.config.v1+json", digest: $config, size: $config_size },
    layers: [{ mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: $layer, size: $layer_size }],
    annotations: $labels
  }' >"$STAGE/manifest.json"
read -r MANIFEST_DIGEST MANIFEST_SIZE < <(blob "$STAGE/manifest.json")

jq -n --arg manifest "$MANIFEST_DIGEST" --argjson size "$MANIFEST_SIZE" --arg tag "$TAG" '{
    schemaVersion: 2,
    mediaType: "application/vnd.oci.image.index.v1+json",
    manifests: [{ mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $manifest,
                  size: $size, annotations: { "org.opencontainers.image.ref.name": $tag } }]
  }' >"$OUT/index.json"
echo '{"imageLayoutVersion": "1.0.0"}' >"$OUT/oci-layout"
# One file to hand around or copy to a registry (an oci-archive to skopeo).
tar --sort=name --mtime="$CREATED" --owner=0 --group=0 --numeric-owner -C "$OUT" -cf "$OUT.tar" .
echo "$OUT"
