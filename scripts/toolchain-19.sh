#!/usr/bin/env bash
# Brings, on Debian 12 and run as root, the toolchain snowflake_id builds with since it supports
# PostgreSQL 19 (scripts/setup.sh runs it), each in a folder of its own beside the PostgreSQL
# trees of scripts/setup.sh, so nothing else of the machine (its Rust, a cargo-pgrx in
# ~/.cargo/bin, Debian's own packages) changes. PostgreSQL 19 needs pgrx 0.19 or later, which
# needs Rust 1.96 or later; Debian 12 has neither.
#
#   1. Rust 1.97: rustup's toolchain 1.97 when rustup can install it (tried with a timeout);
#      otherwise Debian sid's rustc 1.97 packages, unpacked with the libraries they need. sid's
#      binaries need a newer glibc than Debian 12's, so they run through the folder's own
#      loader: <rust root>/bin/rustc and bin/rustdoc are wrappers doing that (with rustup they
#      simply run rustup's 1.97 toolchain), for RUSTC= and RUSTDOC=.
#   2. PostgreSQL 19 (19~rc1 today): Debian experimental's postgresql-19, postgresql-client-19,
#      postgresql-server-dev-19 and libpq5, with sid's libraries they need, unpacked; every
#      program and module is pointed at the folder's loader and libraries with patchelf (the
#      system's libraries come after, for what the folder lacks). Checked: pg_config's paths
#      (PostgreSQL finds them relative to its programs, so they name the folder), and a
#      throwaway cluster run as the postgres user answering SELECT version().
#   3. cargo-pgrx 0.19.3, built with that Rust (about 25 minutes on two cores beside other work)
#      into a folder of its own, which scripts/lib.sh puts first on PATH.
#
# The Debian packages come through an apt state of its own (a temporary folder: sources, lists
# and cache), from the Debian mirror the system's sources name, signatures checked against
# debian-archive-keyring; the system's apt state is not touched. Each step is skipped when its
# folder is complete (a marker written once its checks passed). At the end the paths a caller
# needs are printed as shell assignments.
#
# `--no-pg19`: Rust and cargo-pgrx only (the demo's setup, scripts/setup.sh --demo).
#
# Environment: SNOWFLAKE_PG_TREES (default /opt/snowflake_id) holds the three folders;
# SNOWFLAKE_RUST197_ROOT, SNOWFLAKE_PG19_ROOT and SNOWFLAKE_CARGO_PGRX19_ROOT choose each
# folder; SNOWFLAKE_RUST197_FROM=auto|rustup|debian (default auto: rustup when it can, else
# Debian); SNOWFLAKE_RUSTUP_TIMEOUT (seconds, default 300); SNOWFLAKE_DEBIAN_MIRROR (default:
# the system's). CPU-heavy work runs at nice 19.
set -euo pipefail

TREES=${SNOWFLAKE_PG_TREES:-/opt/snowflake_id}
RUST_ROOT=${SNOWFLAKE_RUST197_ROOT:-$TREES/rust-1.97}
PG_ROOT=${SNOWFLAKE_PG19_ROOT:-$TREES/postgresql-19}
PGRX_VERSION=0.19.3
PGRX_ROOT=${SNOWFLAKE_CARGO_PGRX19_ROOT:-$TREES/cargo-pgrx-$PGRX_VERSION}
RUST_FROM=${SNOWFLAKE_RUST197_FROM:-auto}
RUSTUP_TIMEOUT=${SNOWFLAKE_RUSTUP_TIMEOUT:-300}
RUST_MINOR=1.97
PG_MAJOR=19

MULTIARCH=usr/lib/x86_64-linux-gnu
LOADER=ld-linux-x86-64.so.2
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
MARKER=.toolchain-19          # in a folder: complete and checked; holds where it came from
PARTIAL=.toolchain-19.partial # in a folder: being made by this script (removed on a retry)

# sid's libraries rustc needs besides its own packages (libllvm<N> is taken from
# libstd-rust-1.97's dependencies).
RUST_LIBS=(libc6 libstdc++6 libgcc-s1 libedit2 libffi8 libxml2-16 libz3-4 libzstd1 zlib1g
  libbsd0 libmd0 libtinfo6 libicu78 liblzma5)
# experimental's PostgreSQL packages, and sid's libraries they need that Debian 12 lacks or has
# too old (the rest, such as Kerberos, PAM and lz4, are the system's).
PG_PACKAGES=("postgresql-$PG_MAJOR" "postgresql-client-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR" libpq5)
PG_LIBS=(libc6 libicu78 libxml2-16 libzstd1 zlib1g liblzma5 libstdc++6 libgcc-s1 libldap2
  libsasl2-2 liburing2 libssl3t64 libnuma1)

say() { echo "toolchain-19: $*"; }
die() {
  echo "toolchain-19: $*" >&2
  exit 1
}

WORK=
CLUSTER=
cleanup() {
  if [ -n "$CLUSTER" ] && [ -f "$CLUSTER/data/postmaster.pid" ]; then
    runuser -u postgres -- "$PG_ROOT/usr/lib/postgresql/$PG_MAJOR/bin/pg_ctl" -D "$CLUSTER/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  if [ -n "$WORK" ]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT

work_dir() {
  if [ -z "$WORK" ]; then
    WORK=$(mktemp -d)
    chmod 755 "$WORK" # apt's _apt user writes downloads below it, the postgres user a cluster
  fi
}

# A folder this script makes: empty, with the partial marker. One left from an interrupted or
# failed run is removed; anything else found there is refused.
fresh_root() {
  local root=$1
  if [ -e "$root" ]; then
    if [ -e "$root/$MARKER" ] || [ -e "$root/$PARTIAL" ]; then
      rm -rf "$root"
    elif [ -n "$(ls -A "$root")" ]; then
      die "$root exists and was not made by this script: remove it or choose another folder"
    fi
  fi
  mkdir -p "$root"
  touch "$root/$PARTIAL"
}

finish_root() {
  local root=$1 origin=$2
  echo "$origin" >"$root/$MARKER"
  rm -f "$root/$PARTIAL"
}

# --- Debian sid and experimental, through an apt state of their own -------------------------

# The Debian archive the system's sources name (deb lines and deb822 URIs:), else Debian's CDN.
debian_mirror() {
  local files=() file mirror
  if [ -n "${SNOWFLAKE_DEBIAN_MIRROR:-}" ]; then
    echo "$SNOWFLAKE_DEBIAN_MIRROR"
    return
  fi
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    if [ -f "$file" ]; then files+=("$file"); fi
  done
  mirror=
  if [ ${#files[@]} -gt 0 ]; then
    mirror=$(awk '
      /^[[:space:]]*#/ { next }
      $1 == "deb" { sub(/\[[^]]*\]/, ""); if ($2 ~ /\/debian\/?$/) print $2 }
      $1 == "URIs:" { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) print $i }
    ' "${files[@]}" | sed -n 1p)
  fi
  echo "${mirror:-http://deb.debian.org/debian}"
}

APT_READY=
APT_OPTS=()
sid_apt() {
  [ -z "$APT_READY" ] || return 0
  work_dir
  local state=$WORK/apt mirror
  mirror=$(debian_mirror)
  mkdir -p "$state/lists/partial" "$state/cache/archives/partial"
  [ -f "$KEYRING" ] || die "$KEYRING is missing: apt-get install debian-archive-keyring"
  cat >"$state/sources.list" <<EOF
deb [arch=amd64 signed-by=$KEYRING] $mirror experimental main
deb [arch=amd64 signed-by=$KEYRING] $mirror sid main
EOF
  APT_OPTS=(
    -o "Dir::Etc::SourceList=$state/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$state/lists" -o "Dir::Cache=$state/cache"
    -o Dir::State::status=/dev/null
    -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null
    -o Acquire::Languages=none
    -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::DEP-11-icons-hidpi::DefaultEnabled=false
  )
  nice -n 19 apt-get "${APT_OPTS[@]}" -qq --error-on=any update >"$WORK/apt-update.log" 2>&1 ||
    die "apt-get update of sid and experimental from $mirror failed: $(cat "$WORK/apt-update.log")"
  APT_READY=1
}

# The newest version of a package in the lists whose version starts with a prefix.
newest_version() {
  local package=$1 prefix=$2
  apt-cache "${APT_OPTS[@]}" madison "$package" |
    awk -F' *[|] *' -v p="$prefix" 'index($2, p) == 1 { print $2 }' | sort -V | sed -n '$p'
}

# Downloads packages (apt-get download's names: pkg, pkg=version, pkg/suite) into a folder
# and unpacks each into a root.
download_unpack() {
  local root=$1 debs deb
  shift
  debs=$WORK/debs-$(basename "$root")
  rm -rf "$debs"
  mkdir -p "$debs"
  if id _apt >/dev/null 2>&1; then chown _apt "$debs"; fi
  (cd "$debs" && nice -n 19 apt-get "${APT_OPTS[@]}" -qq download "$@") >"$WORK/download.log" 2>&1 ||
    die "apt-get download $* failed: $(cat "$WORK/download.log")"
  for deb in "$debs"/*.deb; do
    nice -n 19 dpkg -x "$deb" "$root"
  done
  rm -rf "$debs"
}

# --- 1. Rust 1.97 -----------------------------------------------------------------------------

rust_ready() {
  [ -f "$RUST_ROOT/$MARKER" ] && [ -x "$RUST_ROOT/bin/rustc" ] &&
    [[ "$("$RUST_ROOT/bin/rustc" --version 2>/dev/null)" == "rustc $RUST_MINOR."* ]]
}

# rustup's toolchain 1.97, when rustup is there and can install it in time.
rustup_install() {
  command -v rustup >/dev/null || return 1
  work_dir
  if ! timeout "$RUSTUP_TIMEOUT" nice -n 19 rustup toolchain install "$RUST_MINOR" --profile minimal \
    --component rustfmt --component clippy >"$WORK/rustup.log" 2>&1; then
    say "rust: rustup could not install toolchain $RUST_MINOR within ${RUSTUP_TIMEOUT}s: $(tail -n 2 "$WORK/rustup.log" | tr '\n' ' ')"
    return 1
  fi
}

# rustfmt and clippy of rustup's toolchain, which the lint step runs: rust-toolchain.toml names
# them, but rustup adds them only when it installs the toolchain itself, so a toolchain installed
# before (or by an older version of this script) may lack them. Debian's rustc needs nothing
# here: lib.sh then runs cargo fmt and clippy of rustup's stable toolchain.
rustup_components() {
  local installed
  rustup run "$RUST_MINOR" rustc --version >/dev/null 2>&1 || return 0
  installed=$(rustup component list --toolchain "$RUST_MINOR" --installed)
  grep -q '^rustfmt' <<<"$installed" && grep -q '^clippy' <<<"$installed" && return 0
  work_dir
  timeout "$RUSTUP_TIMEOUT" nice -n 19 rustup component add --toolchain "$RUST_MINOR" rustfmt clippy \
    >"$WORK/rustup.log" 2>&1 ||
    die "rust: rustup could not add rustfmt and clippy to toolchain $RUST_MINOR: $(tail -n 2 "$WORK/rustup.log" | tr '\n' ' ')"
  say "rust: rustfmt and clippy added to rustup's toolchain $RUST_MINOR"
}

# The wrappers run rustup's toolchain.
rust_from_rustup() {
  local tool path
  fresh_root "$RUST_ROOT"
  mkdir -p "$RUST_ROOT/bin"
  for tool in rustc rustdoc; do
    path=$(rustup which --toolchain "$RUST_MINOR" "$tool" 2>/dev/null) || continue
    printf '#!/bin/sh\nexec "%s" "$@"\n' "$path" >"$RUST_ROOT/bin/$tool"
    chmod 755 "$RUST_ROOT/bin/$tool"
  done
  path=$(rustup which --toolchain "$RUST_MINOR" rustc)
  RUST_ORIGIN="rustup toolchain $RUST_MINOR (${path%/bin/rustc})"
}

# sid's packages, run through the folder's own loader.
rust_from_debian() {
  local version llvm tool
  sid_apt
  version=$(newest_version rustc "$RUST_MINOR.")
  [ -n "$version" ] || die "rust: Debian's sid and experimental have no rustc $RUST_MINOR"
  llvm=$(apt-cache "${APT_OPTS[@]}" show "libstd-rust-$RUST_MINOR=$version" |
    sed -n 's/^Depends:.*\b\(libllvm[0-9][0-9]*\)\b.*/\1/p' | sed -n 1p)
  [ -n "$llvm" ] || die "rust: found no libllvm among libstd-rust-$RUST_MINOR $version's dependencies"
  fresh_root "$RUST_ROOT"
  download_unpack "$RUST_ROOT" "rustc=$version" "libstd-rust-dev=$version" \
    "libstd-rust-$RUST_MINOR=$version" "$llvm" "${RUST_LIBS[@]}"
  mkdir -p "$RUST_ROOT/bin"
  for tool in rustc rustdoc; do
    [ -x "$RUST_ROOT/usr/bin/$tool" ] || continue
    cat >"$RUST_ROOT/bin/$tool" <<EOF
#!/bin/sh
R='$RUST_ROOT'
exec "\$R/$MULTIARCH/$LOADER" --library-path "\$R/$MULTIARCH:\$R/usr/lib/rustlib/x86_64-unknown-linux-gnu/lib" "\$R/usr/bin/$tool" "\$@"
EOF
    chmod 755 "$RUST_ROOT/bin/$tool"
  done
  RUST_ORIGIN="Debian sid rustc $version with $llvm"
}

# A program built with it must run on this system.
rust_check() {
  local dir=$WORK/hello
  mkdir -p "$dir"
  echo 'fn main() { let v: Vec<u32> = (1..4).collect(); println!("{v:?}"); }' >"$dir/main.rs"
  nice -n 19 "$RUST_ROOT/bin/rustc" --edition 2021 -o "$dir/main" "$dir/main.rs" >"$WORK/rustc.log" 2>&1 ||
    die "rust: $RUST_ROOT/bin/rustc failed to build a program: $(cat "$WORK/rustc.log")"
  [ "$("$dir/main")" = "[1, 2, 3]" ] || die "rust: a program built by $RUST_ROOT/bin/rustc does not run here"
}

step_rust() {
  local start=$SECONDS
  if rust_ready; then
    say "rust: skipped, $("$RUST_ROOT/bin/rustc" --version) in $RUST_ROOT is there ($(cat "$RUST_ROOT/$MARKER"))"
    rustup_components
    return
  fi
  RUST_ORIGIN=
  case $RUST_FROM in
  auto) if rustup_install; then rust_from_rustup; else rust_from_debian; fi ;;
  rustup) if rustup_install; then rust_from_rustup; else die "rust: rustup could not install toolchain $RUST_MINOR"; fi ;;
  debian) rust_from_debian ;;
  *) die "SNOWFLAKE_RUST197_FROM must be auto, rustup or debian, not $RUST_FROM" ;;
  esac
  work_dir
  rust_check
  finish_root "$RUST_ROOT" "$RUST_ORIGIN"
  say "rust: installed $("$RUST_ROOT/bin/rustc" --version) from $RUST_ORIGIN, wrappers in $RUST_ROOT/bin ($((SECONDS - start))s)"
}

# --- 2. PostgreSQL 19 -------------------------------------------------------------------------

pg_bin() { echo "$PG_ROOT/usr/lib/postgresql/$PG_MAJOR/bin"; }

pg_ready() {
  [ -f "$PG_ROOT/$MARKER" ] && [ -x "$(pg_bin)/pg_config" ] &&
    [[ "$("$(pg_bin)/pg_config" --version 2>/dev/null)" == "PostgreSQL $PG_MAJOR"* ]] &&
    # pg_regress, below lib/pgxs, was left unpatched by an earlier version of this script.
    "$(pg_regress)" --version >/dev/null 2>&1
}
pg_regress() { echo "$PG_ROOT/usr/lib/postgresql/$PG_MAJOR/lib/pgxs/src/test/regress/pg_regress"; }

# Every ELF file of the server's folder: programs, modules, and the test programs below
# lib/pgxs (pg_regress, pg_isolation_regress).
pg_elf_files() {
  local file
  while IFS= read -r -d '' file; do
    if is_elf "$file"; then printf '%s\0' "$file"; fi
  done < <(find "$PG_ROOT/usr/lib/postgresql/$PG_MAJOR" -type f -print0)
}

is_elf() { [ -f "$1" ] && [ ! -L "$1" ] && [ "$(od -An -c -N4 "$1" | tr -d ' ')" = '177ELF' ]; }

# Every program and module runs with the folder's loader and finds the folder's libraries
# first (an RPATH, not a RUNPATH, so it holds for the libraries they load too).
pg_patch() {
  local lib=$PG_ROOT/usr/lib/postgresql/$PG_MAJOR file count=0
  local rpath=$PG_ROOT/$MULTIARCH:$lib/lib:/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
  command -v patchelf >/dev/null ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends patchelf >/dev/null
  while IFS= read -r -d '' file; do
    if patchelf --print-interpreter "$file" >/dev/null 2>&1; then
      patchelf --set-interpreter "$PG_ROOT/$MULTIARCH/$LOADER" "$file"
    fi
    patchelf --force-rpath --set-rpath "$rpath" "$file"
    count=$((count + 1))
  done < <(pg_elf_files)
  PG_PATCHED=$count
}

# No program or module may miss a library.
pg_check_libraries() {
  local file missing=
  while IFS= read -r -d '' file; do
    missing+=$("$PG_ROOT/$MULTIARCH/$LOADER" --list "$file" 2>&1 | sed -n "/not found/s|^|$file: |p")
  done < <(pg_elf_files)
  [ -z "$missing" ] || die "postgresql: libraries not found: $missing"
}

# pgrx takes the server's headers, modules and share folder from pg_config: they must be
# absolute paths inside the folder, and there.
pg_check_config() {
  local option path
  for option in --includedir-server --pkglibdir --sharedir --bindir; do
    path=$("$(pg_bin)/pg_config" "$option")
    say "postgresql: pg_config $option = $path"
    if [[ "$path" != "$PG_ROOT/"* ]] || [ ! -d "$path" ]; then
      die "postgresql: pg_config $option gives $path, not a folder inside $PG_ROOT"
    fi
  done
  [ -f "$("$(pg_bin)/pg_config" --includedir-server)/postgres.h" ] ||
    die "postgresql: postgres.h is not in pg_config --includedir-server"
}

# initdb refuses root: a throwaway cluster as the postgres user, on a Unix socket only.
pg_check_server() {
  local bin version
  bin=$(pg_bin)
  id postgres >/dev/null 2>&1 ||
    useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
  work_dir
  CLUSTER=$WORK/cluster
  mkdir -p "$CLUSTER"
  chown postgres "$CLUSTER"
  (cd / && runuser -u postgres -- nice -n 19 "$bin/initdb" -D "$CLUSTER/data" -A trust -U postgres \
    --no-locale -E UTF8 --no-sync) >"$WORK/initdb.log" 2>&1 ||
    die "postgresql: initdb failed: $(cat "$WORK/initdb.log")"
  (cd / && runuser -u postgres -- "$bin/pg_ctl" -D "$CLUSTER/data" -l "$CLUSTER/log" -w \
    -o "-k $CLUSTER -c listen_addresses=" start) >/dev/null 2>&1 ||
    die "postgresql: the server did not start: $(cat "$CLUSTER/log" 2>/dev/null)"
  version=$(cd / && runuser -u postgres -- "$bin/psql" -h "$CLUSTER" -d postgres -XAtc 'SELECT version()')
  (cd / && runuser -u postgres -- "$bin/pg_ctl" -D "$CLUSTER/data" -m fast -w stop) >/dev/null
  rm -rf "$CLUSTER"
  CLUSTER=
  [[ "$version" == "PostgreSQL $PG_MAJOR"* ]] || die "postgresql: SELECT version() gave: $version"
  say "postgresql: a throwaway cluster answered: $version"
}

step_pg() {
  local start=$SECONDS version
  if pg_ready; then
    say "postgresql: skipped, $("$(pg_bin)/pg_config" --version) in $PG_ROOT is there ($(cat "$PG_ROOT/$MARKER"))"
    return
  fi
  sid_apt
  version=$(newest_version "postgresql-$PG_MAJOR" "")
  [ -n "$version" ] || die "postgresql: Debian's sid and experimental have no postgresql-$PG_MAJOR"
  fresh_root "$PG_ROOT"
  # Pinned to one version: experimental's libpq5, not sid's older one, comes with it.
  download_unpack "$PG_ROOT" "${PG_PACKAGES[@]/%/=$version}" "${PG_LIBS[@]}"
  pg_patch
  pg_check_libraries
  "$(pg_bin)/pg_config" --version >/dev/null || die "postgresql: pg_config does not answer"
  pg_check_config
  pg_check_server
  finish_root "$PG_ROOT" "Debian postgresql-$PG_MAJOR $version"
  say "postgresql: installed $("$(pg_bin)/pg_config" --version) from Debian $version into $PG_ROOT, $PG_PATCHED programs and modules patched ($((SECONDS - start))s)"
}

# --- 3. cargo-pgrx 0.19.3 ---------------------------------------------------------------------

pgrx_ready() {
  [ -x "$PGRX_ROOT/bin/cargo-pgrx" ] &&
    [ "$("$PGRX_ROOT/bin/cargo-pgrx" pgrx --version 2>/dev/null)" = "cargo-pgrx $PGRX_VERSION" ]
}

step_pgrx() {
  local start=$SECONDS rustdoc=()
  if pgrx_ready; then
    say "cargo-pgrx: skipped, $("$PGRX_ROOT/bin/cargo-pgrx" pgrx --version) in $PGRX_ROOT is there"
    return
  fi
  command -v cargo >/dev/null || die "cargo-pgrx: no cargo on PATH (any recent one builds it with RUSTC=$RUST_ROOT/bin/rustc)"
  if [ -x "$RUST_ROOT/bin/rustdoc" ]; then rustdoc=(RUSTDOC="$RUST_ROOT/bin/rustdoc"); fi
  work_dir
  say "cargo-pgrx: building $PGRX_VERSION with $("$RUST_ROOT/bin/rustc" --version) at nice 19 (about 25 minutes)"
  env RUSTC="$RUST_ROOT/bin/rustc" "${rustdoc[@]}" nice -n 19 \
    cargo install cargo-pgrx --version "$PGRX_VERSION" --locked --root "$PGRX_ROOT" >"$WORK/cargo-install.log" 2>&1 ||
    die "cargo-pgrx: cargo install failed: $(tail -n 30 "$WORK/cargo-install.log")"
  pgrx_ready || die "cargo-pgrx: $PGRX_ROOT/bin/cargo-pgrx does not answer cargo-pgrx $PGRX_VERSION"
  say "cargo-pgrx: installed $("$PGRX_ROOT/bin/cargo-pgrx" pgrx --version) into $PGRX_ROOT ($((SECONDS - start))s)"
}

[ "$(id -u)" -eq 0 ] || die "run as root (it writes below $TREES and runs a server as postgres)"
step_rust
[ "${1:-}" = --no-pg19 ] || step_pg
step_pgrx
echo "RUSTC=$RUST_ROOT/bin/rustc"
echo "PG19_PG_CONFIG=$(pg_bin)/pg_config"
echo "CARGO_PGRX_19=$PGRX_ROOT/bin/cargo-pgrx"
