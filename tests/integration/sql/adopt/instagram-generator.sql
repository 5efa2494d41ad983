CREATE SCHEMA insta5;
CREATE SEQUENCE insta5.table_id_seq;

CREATE FUNCTION insta5.next_id(OUT result bigint) AS $$
DECLARE
    our_epoch bigint := 1546300800000;  -- 2019-01-01T00:00:00Z, in Unix milliseconds
    seq_id bigint;
    now_millis bigint;
    shard_id int := 5;
BEGIN
    SELECT nextval('insta5.table_id_seq') % 1024 INTO seq_id;
    SELECT FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) INTO now_millis;
    result := (now_millis - our_epoch) << 23;
    result := result | (shard_id << 10);
    result := result | (seq_id);
END;
$$ LANGUAGE PLPGSQL;

CREATE TABLE insta5.photos (
    id bigint NOT NULL DEFAULT insta5.next_id() PRIMARY KEY,
    caption text
);
