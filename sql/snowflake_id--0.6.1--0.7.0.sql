-- snowflake_id 0.6.1 -> 0.7.0 (CHANGELOG.md)
\echo Use "ALTER EXTENSION snowflake_id UPDATE TO '0.7.0'" to load this file. \quit
