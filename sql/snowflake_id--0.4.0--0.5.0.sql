-- snowflake_id 0.4.0 -> 0.5.0: no object of the extension changes. The release is in the
-- library: the guards around the generator (pg_upgrade --check, the layout across pg_upgrade,
-- a promoted standby's floor made durable and its guard run once, a fence that reaches
-- statements already running, the reservation record's checksum, id 128 registered only
-- while WAL of 0.2.0 may remain) and the orderings of its shared state.
\echo Use "ALTER EXTENSION snowflake_id UPDATE TO '0.5.0'" to load this file. \quit
