# Builds and installs snowflake_id for the PostgreSQL whose pg_config is given, as PGXN's client
# runs it (`pgxn install snowflake_id`, or `pgxn install <zip> --pg_config <path>`: make, then
# make install) and as anyone may by hand:
#
#   make PG_CONFIG=/usr/lib/postgresql/16/bin/pg_config
#   sudo make install PG_CONFIG=/usr/lib/postgresql/16/bin/pg_config
#
# This is not PGXS: the extension is Rust, built in release mode by cargo-pgrx 0.19.3 (which
# needs Rust 1.96 or later and libclang, and `cargo pgrx init --pg<major> <pg_config>` once), for
# the major pg_config names (15 to 19). `make install` puts the library into pg_config's --pkglibdir and,
# into its --sharedir's extension folder, the control file, this version's install script and
# the install and upgrade scripts of every earlier version (sql/README.md), as the Debian
# package does. CARGO_TARGET_DIR is honoured, so a build already made is reused.

PG_CONFIG ?= pg_config
EXTENSION = snowflake_id
PG_MAJOR := $(shell $(PG_CONFIG) --version | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
PKGLIBDIR := $(shell $(PG_CONFIG) --pkglibdir)
EXTDIR := $(shell $(PG_CONFIG) --sharedir)/extension
# cargo pgrx package writes the files under their installed paths below this folder.
STAGE = pgxn-build/pg$(PG_MAJOR)

.PHONY: all install uninstall clean

all:
	@test -n "$(PG_MAJOR)" || { echo "$(PG_CONFIG) names no PostgreSQL major" >&2; exit 1; }
	cargo pgrx package --pg-config "$(PG_CONFIG)" --no-default-features --features "pg$(PG_MAJOR)" --out-dir "$(STAGE)"

# The library is removed before the new one is written: a running server that preloads it has
# it mapped, and a file rewritten in place under it makes that server crash; unlinked, the old
# file lives on for it until it restarts.
install:
	@test -f "$(STAGE)$(PKGLIBDIR)/$(EXTENSION).so" || { echo "run make first (PG_CONFIG=$(PG_CONFIG))" >&2; exit 1; }
	rm -f "$(DESTDIR)$(PKGLIBDIR)/$(EXTENSION).so"
	install -D -m 755 "$(STAGE)$(PKGLIBDIR)/$(EXTENSION).so" "$(DESTDIR)$(PKGLIBDIR)/$(EXTENSION).so"
	install -d "$(DESTDIR)$(EXTDIR)"
	install -m 644 sql/$(EXTENSION)--*.sql "$(DESTDIR)$(EXTDIR)/"
	install -m 644 "$(STAGE)$(EXTDIR)/"$(EXTENSION)* "$(DESTDIR)$(EXTDIR)/"

uninstall:
	rm -f "$(DESTDIR)$(PKGLIBDIR)/$(EXTENSION).so" "$(DESTDIR)$(EXTDIR)/$(EXTENSION).control" \
	  "$(DESTDIR)$(EXTDIR)/"$(EXTENSION)--*.sql

clean:
	rm -rf pgxn-build
