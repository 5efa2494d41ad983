CREATE EXTENSION snowflake_id;
