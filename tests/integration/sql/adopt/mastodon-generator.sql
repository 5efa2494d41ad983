CREATE SEQUENCE statuses_id_seq;

-- Unix milliseconds in the high 48 bits; in the low 16, the table's sequence added to a
-- base hashed from the table, a secret and the millisecond, so that IDs do not show how
-- many rows a table has.
CREATE FUNCTION timestamp_id(table_name text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    time_part bigint := (date_part('epoch', now()) * 1000)::bigint << 16;
    base bigint := ('x' || substr(md5(table_name || 'b3c1d9e07a5f4a28' || time_part::text), 1, 4))::bit(16)::bigint;
BEGIN
    RETURN time_part | ((base + nextval(table_name || '_id_seq')) & 65535);
END
$$;

CREATE TABLE statuses (
    id bigint PRIMARY KEY DEFAULT timestamp_id('statuses'),
    text text
);
