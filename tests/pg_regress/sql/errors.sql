-- Bad input: every refusal with its SQLSTATE, message, detail and hint.
SET TimeZone = 'UTC';

\x on
-- Shards: NULL, negative, past 2^shard_bits - 1, unset default.
SELECT call, e.* FROM (VALUES
    ('SELECT snowflake_nextval(NULL)'),
    ('SELECT snowflake_nextval(-1)'),
    ('SELECT snowflake_nextval(1024)'),
    ('SELECT snowflake_nextval()'),
    ('SELECT snowflake_nextvals(NULL, 5)'),
    ('SELECT snowflake_advance(2000, 1)'),
    ('SELECT snowflake_horizon(NULL)'),
    ('SELECT snowflake_horizon(-1)'),
    ('SELECT snowflake_fence_allows(1024)'),
    ('SELECT snowflake_fence_allows(-1)')
) AS calls(call), regress.error_of(call) e;

-- Counts: NULL, zero, negative, more than the lead bound allows.
SELECT call, e.* FROM (VALUES
    ('SELECT snowflake_nextvals(1, NULL)'),
    ('SELECT snowflake_nextvals(1, 0)'),
    ('SELECT snowflake_nextvals(1, -5)'),
    ('SELECT snowflake_nextvals(1, 2000000000)')
) AS calls(call), regress.error_of(call) e;

-- Impossible IDs given to the decoders.
SELECT call, e.* FROM (VALUES
    ('SELECT snowflake_decode(-1)'),
    ('SELECT snowflake_timestamp(-42)'),
    ('SELECT snowflake_shard(-9223372036854775808)'),
    ('SELECT snowflake_seq(-1)'),
    ('SELECT snowflake_json(-1)'),
    ('SELECT snowflake_advance(1, -1)'),
    ('SELECT snowflake_advance(1, NULL)')
) AS calls(call), regress.error_of(call) e;

-- Timestamps before the epoch, past the 41-bit range, or infinite; parts out of range.
SELECT call, e.* FROM (VALUES
    ('SELECT snowflake_compose(''2023-12-31 23:59:59.999+00'', 0, 0)'),
    ('SELECT snowflake_min_id(''2020-01-01'')'),
    ('SELECT snowflake_max_id(''2093-09-06 15:47:35.552+00'')'),
    ('SELECT snowflake_min_id(''infinity'')'),
    ('SELECT snowflake_max_id(''-infinity'')'),
    ('SELECT snowflake_compose(''2024-06-01'', 1024, 0)'),
    ('SELECT snowflake_compose(''2024-06-01'', 0, 4096)'),
    ('SELECT snowflake_compose(''2024-06-01'', 0, -1)')
) AS calls(call), regress.error_of(call) e;

-- Settings: a default shard outside the layout; the layout itself while running.
SELECT call, e.* FROM (VALUES
    ('SET snowflake_id.shard = 1024'),
    ('SET snowflake_id.shard_bits = 13'),
    ('SET snowflake_id.epoch = ''2020-01-01'''),
    ('SET snowflake_id.max_lead_ms = 10')
) AS calls(call), regress.error_of(call) e;
\x off

-- Advancing a shard far ahead of the clock is refused (the lead in ms varies by run).
SELECT code, message ~ '^cannot advance shard 1 to an ID \d+ ms ahead of the wall clock$' AS message_ok, detail, hint
FROM regress.error_of('SELECT snowflake_advance(1, snowflake_compose(clock_timestamp() + interval ''1 hour'', 1, 0))');

-- As psql shows an error by default.
SELECT snowflake_nextval(5000);
SELECT snowflake_nextvals(1, 0);

-- Decoders of a named layout: a name that names no layout (22023, with the names), a negative ID.
\x on
SELECT call, e.* FROM (VALUES
    ('SELECT snowflake_decode(1, ''Discord'')'),
    ('SELECT snowflake_timestamp(1, ''snowflake'')'),
    ('SELECT snowflake_shard(-1, ''twitter'')')
) AS calls(call), regress.error_of(call) e;
\x off
