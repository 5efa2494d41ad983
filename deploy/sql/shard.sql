-- Run once on every shard server, in database `fleet`, by deploy/fleet.sh.
--
-- A shard server holds several logical shards, one schema each (s0007 for logical shard 7),
-- and generates the IDs of those shards only: the logical shard number is the snowflake
-- shard id, so every ID says which schema stores it. The router (router.sql) calls the
-- functions of schema `fleet` below through PL/Proxy; applications never write to a shard
-- server directly.
--
-- Every function pins search_path to pg_catalog, pg_temp (docs/security.md, rule 3) and
-- names the kit's objects and the extension's functions (in schema public, where CREATE
-- EXTENSION put them) by their schema: a look-alike that a role left in schema public never
-- runs in their place.

CREATE EXTENSION IF NOT EXISTS snowflake_id;
CREATE SCHEMA fleet;

-- The logical shards this server holds. A shard has a row on exactly one server of the
-- fleet; the write functions below refuse a shard without an 'active' row here, so a router
-- with an out-of-date map can never make a second server generate IDs for it.
--   active  the server generates IDs and accepts writes for it
--   frozen  it is being copied to another server: readable, no writes, no new IDs
CREATE TABLE fleet.owned_shards (
    shard int PRIMARY KEY CHECK (shard >= 0),
    state text NOT NULL CHECK (state IN ('active', 'frozen')),
    since timestamptz NOT NULL DEFAULT now()
);

-- Lock key space of the per-shard advisory locks: writers hold the lock shared, a move takes
-- it exclusively to wait for writes in flight before it freezes the shard.
CREATE FUNCTION fleet.lock_space() RETURNS int IMMUTABLE LANGUAGE sql
SET search_path = pg_catalog, pg_temp AS 'SELECT 1718379891';

CREATE FUNCTION fleet.schema_of(p_shard int) RETURNS text IMMUTABLE STRICT LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 's' || lpad(p_shard::text, 4, '0') $$;

-- Creates the schema of a new logical shard, empty, and takes ownership of it. Each table's
-- id comes from its shard's generator; the CHECKs are a cheap guard that a row really
-- belongs to this schema's shard (a post lives on the shard of its user).
CREATE FUNCTION fleet.create_shard(p_shard int) RETURNS text LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    schema text := fleet.schema_of(p_shard);
BEGIN
    EXECUTE format($ddl$
        CREATE SCHEMA %1$I;
        CREATE TABLE %1$I.users (
            id         bigint PRIMARY KEY DEFAULT public.snowflake_nextval(%2$s) CHECK (public.snowflake_shard(id) = %2$s),
            username   text NOT NULL UNIQUE,
            created_at timestamptz NOT NULL DEFAULT clock_timestamp()
        );
        CREATE TABLE %1$I.posts (
            id         bigint PRIMARY KEY DEFAULT public.snowflake_nextval(%2$s) CHECK (public.snowflake_shard(id) = %2$s),
            user_id    bigint NOT NULL CHECK (public.snowflake_shard(user_id) = %2$s),
            body       text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT clock_timestamp()
        );
        CREATE INDEX ON %1$I.posts (user_id, id);
    $ddl$, schema, p_shard);
    INSERT INTO fleet.owned_shards (shard, state) VALUES (p_shard, 'active');
    RETURN schema;
END
$fn$;

-- The error of a request for logical shards this server does not hold.
CREATE FUNCTION fleet.raise_not_here(p_shards int[]) RETURNS void LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    RAISE EXCEPTION 'logical shard % is not on this server', array_to_string(p_shards, ', ')
        USING ERRCODE = 'object_not_in_prerequisite_state',
              DETAIL = format('Server %s holds logical shards %s.', current_setting('cluster_name'),
                              (SELECT coalesce(string_agg(shard::text, ', ' ORDER BY shard), 'none')
                               FROM fleet.owned_shards)),
              HINT = 'The router''s shard map is out of date: compare it with deploy/fleet.sh status.';
END
$fn$;

-- The schema of a logical shard this server may write to; raises otherwise. Holds the
-- shard's lock shared until the transaction ends, so a move waits for this write.
CREATE FUNCTION fleet.writable(p_shard int) RETURNS text LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    current text;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(fleet.lock_space(), p_shard);
    SELECT state INTO current FROM fleet.owned_shards WHERE shard = p_shard;
    IF current IS NULL THEN
        PERFORM fleet.raise_not_here(ARRAY[p_shard]);
    ELSIF current <> 'active' THEN
        RAISE EXCEPTION 'logical shard % is being moved to another server', p_shard
            USING ERRCODE = 'object_in_use',
                  DETAIL = 'Its rows are being copied; it accepts no writes and issues no IDs meanwhile.',
                  HINT = 'Retry once the move has finished (the router then sends the write to the new server).';
    END IF;
    RETURN fleet.schema_of(p_shard);
END
$fn$;

------------------------------------------------------------------------------------------
-- Called by the router through PL/Proxy, which sends each server only the elements of the
-- logical shards it maps to that server (PL/Proxy's SPLIT). An element's shard is in its
-- id (or its user's id), except for new users, whose shard the router passes alongside.

-- New users; returns their ids, which carry their shard.
CREATE FUNCTION fleet.create_users(shards int[], usernames text[])
RETURNS TABLE (id bigint, username text) LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    s int;
BEGIN
    FOR s IN SELECT DISTINCT unnest(shards) LOOP
        RETURN QUERY EXECUTE format(
            'INSERT INTO %I.users AS u (username) SELECT t.n FROM unnest($1, $2) t(s, n) WHERE t.s = $3
             RETURNING u.id, u.username', fleet.writable(s))
            USING shards, usernames, s;
    END LOOP;
END
$fn$;

-- New posts, each stored on its user's shard; returns their ids.
CREATE FUNCTION fleet.insert_posts(user_ids bigint[], bodies text[])
RETURNS SETOF bigint LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    s int;
BEGIN
    FOR s IN SELECT DISTINCT public.snowflake_shard(u) FROM unnest(user_ids) u LOOP
        RETURN QUERY EXECUTE format(
            'INSERT INTO %I.posts AS p (user_id, body)
             SELECT t.u, t.b FROM unnest($1, $2) t(u, b) WHERE public.snowflake_shard(t.u) = $3
             RETURNING p.id', fleet.writable(s))
            USING user_ids, bodies, s;
    END LOOP;
END
$fn$;

-- One new post.
CREATE FUNCTION fleet.insert_post(p_user_id bigint, p_body text) RETURNS bigint LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    result bigint;
BEGIN
    EXECUTE format('INSERT INTO %I.posts (user_id, body) VALUES ($1, $2) RETURNING id',
                   fleet.writable(public.snowflake_shard(p_user_id)))
        INTO result USING p_user_id, p_body;
    RETURN result;
END
$fn$;

-- The same, after observing the causality token p_seen (the last ID its writer saw, from any
-- server): the new ID is above it. Observed before the write, in its transaction.
CREATE FUNCTION fleet.insert_post(p_user_id bigint, p_body text, p_seen bigint) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    PERFORM public.snowflake_observe(p_seen);
    RETURN fleet.insert_post(p_user_id, p_body);
END
$fn$;

-- The schemas of the given logical shards, each checked to be on this server (active or
-- frozen: a frozen shard is complete until the router points elsewhere).
CREATE FUNCTION fleet.readable(p_shards int[]) RETURNS SETOF text LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    missing int[];
BEGIN
    SELECT array_agg(w.s ORDER BY w.s) INTO missing
    FROM (SELECT DISTINCT unnest(p_shards) AS s) w
    WHERE NOT EXISTS (SELECT FROM fleet.owned_shards o WHERE o.shard = w.s);
    IF missing IS NOT NULL THEN
        PERFORM fleet.raise_not_here(missing);
    END IF;
    RETURN QUERY SELECT DISTINCT fleet.schema_of(s) FROM unnest(p_shards) s;
END
$fn$;

-- Posts by id.
CREATE FUNCTION fleet.get_posts(ids bigint[])
RETURNS TABLE (id bigint, user_id bigint, body text, created_at timestamptz) LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    schema text;
BEGIN
    FOR schema IN SELECT fleet.readable(array_agg(DISTINCT public.snowflake_shard(i))) FROM unnest(ids) i LOOP
        RETURN QUERY EXECUTE format(
            'SELECT p.id, p.user_id, p.body, p.created_at FROM %I.posts p WHERE p.id = ANY($1)', schema)
            USING ids;
    END LOOP;
END
$fn$;

-- A user's newest posts, newest first.
CREATE FUNCTION fleet.user_posts(p_user_id bigint, p_limit int)
RETURNS TABLE (id bigint, user_id bigint, body text, created_at timestamptz) LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    schema text := fleet.readable(ARRAY[public.snowflake_shard(p_user_id)]);
BEGIN
    RETURN QUERY EXECUTE format(
        'SELECT p.id, p.user_id, p.body, p.created_at FROM %I.posts p WHERE p.user_id = $1
         ORDER BY p.id DESC LIMIT $2', schema)
        USING p_user_id, p_limit;
END
$fn$;

-- Up to p_limit posts with an id above p_after from each given shard: the router merges
-- them and keeps the p_limit lowest, which are the next page of the whole fleet.
CREATE FUNCTION fleet.posts_after(shards int[], p_after bigint, p_limit int)
RETURNS TABLE (id bigint, user_id bigint) LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    schema text;
BEGIN
    FOR schema IN SELECT fleet.readable(shards) LOOP
        RETURN QUERY EXECUTE format(
            'SELECT p.id, p.user_id FROM %I.posts p WHERE p.id > $1 ORDER BY p.id LIMIT $2', schema)
            USING p_after, p_limit;
    END LOOP;
END
$fn$;

-- The newest p_limit posts of each given shard (the router keeps the newest overall).
CREATE FUNCTION fleet.newest_posts(shards int[], p_limit int)
RETURNS TABLE (id bigint, user_id bigint, body text, created_at timestamptz) LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    schema text;
BEGIN
    FOR schema IN SELECT fleet.readable(shards) LOOP
        RETURN QUERY EXECUTE format(
            'SELECT p.id, p.user_id, p.body, p.created_at FROM %I.posts p ORDER BY p.id DESC LIMIT $1', schema)
            USING p_limit;
    END LOOP;
END
$fn$;

-- This server's logical shards (for the router's ownership check).
CREATE FUNCTION fleet.server_shards() RETURNS TABLE (shard int, state text) LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT o.shard, o.state FROM fleet.owned_shards o ORDER BY o.shard $$;

------------------------------------------------------------------------------------------
-- Moving a logical shard to another server (deploy/fleet.sh move-shard), in this order:
-- freeze on the source, copy the schema, adopt on the target, point the router at the
-- target, drop on the source. At no moment may both servers write the shard.

-- Source, step 1: waits for writes in flight, then refuses new ones.
CREATE FUNCTION fleet.freeze_shard(p_shard int) RETURNS void LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    PERFORM pg_advisory_xact_lock(fleet.lock_space(), p_shard);
    UPDATE fleet.owned_shards SET state = 'frozen', since = now() WHERE shard = p_shard AND state = 'active';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'logical shard % is not active on this server', p_shard
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = format('Its state here: %s.',
                                  coalesce((SELECT state FROM fleet.owned_shards WHERE shard = p_shard), 'absent')),
                  HINT = 'Move a shard from the server that holds it (deploy/fleet.sh status).';
    END IF;
END
$fn$;

-- Source, to cancel a move that failed before the router was switched.
CREATE FUNCTION fleet.thaw_shard(p_shard int) RETURNS void LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ UPDATE fleet.owned_shards SET state = 'active', since = now() WHERE shard = p_shard $$;

-- Source and target: what must be equal on both before the target takes over.
CREATE FUNCTION fleet.shard_fingerprint(p_shard int) RETURNS text LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    result text;
BEGIN
    EXECUTE format(
        'SELECT format(''users %%s (sum %%s), posts %%s (sum %%s)'',
                       (SELECT count(*) FROM %1$I.users), (SELECT coalesce(sum(id), 0) FROM %1$I.users),
                       (SELECT count(*) FROM %1$I.posts), (SELECT coalesce(sum(id), 0) FROM %1$I.posts))',
        fleet.schema_of(p_shard)) INTO result;
    RETURN result;
END
$fn$;

-- Target, before the copy: the shard must be new here.
CREATE FUNCTION fleet.expect_absent(p_shard int) RETURNS void LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF EXISTS (SELECT FROM fleet.owned_shards WHERE shard = p_shard)
       OR EXISTS (SELECT FROM pg_namespace WHERE nspname = fleet.schema_of(p_shard)) THEN
        RAISE EXCEPTION 'logical shard % is already on this server', p_shard
            USING ERRCODE = 'duplicate_schema',
                  HINT = 'Drop the leftover schema of an earlier failed move first, or choose another server.';
    END IF;
END
$fn$;

-- Target, after the copy: every later ID of the shard sorts above the copied ones and above
-- p_above, the end of the source's reservation (every ID it handed out, stored or not, lies
-- below it; the source's generator may have run ahead of this server's clock), then take
-- ownership. snowflake_advance is an operator's function: this runs as a superuser.
CREATE FUNCTION fleet.adopt_shard(p_shard int, p_above bigint DEFAULT NULL) RETURNS bigint LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    highest bigint;
BEGIN
    EXECUTE format('SELECT greatest((SELECT max(id) FROM %1$I.users), (SELECT max(id) FROM %1$I.posts), $1)',
                   fleet.schema_of(p_shard)) INTO highest USING p_above;
    IF highest IS NOT NULL THEN
        PERFORM public.snowflake_advance(p_shard, highest);
    END IF;
    INSERT INTO fleet.owned_shards (shard, state) VALUES (p_shard, 'active');
    RETURN highest;
END
$fn$;

-- Source, last step: the old copy goes, so nothing here can generate for the shard again.
CREATE FUNCTION fleet.drop_shard(p_shard int) RETURNS void LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning AS $fn$
BEGIN
    IF NOT EXISTS (SELECT FROM fleet.owned_shards WHERE shard = p_shard AND state = 'frozen') THEN
        RAISE EXCEPTION 'logical shard % is not frozen on this server', p_shard
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Only the source of a finished move drops its copy.';
    END IF;
    EXECUTE format('DROP SCHEMA %I CASCADE', fleet.schema_of(p_shard));
    DELETE FROM fleet.owned_shards WHERE shard = p_shard;
END
$fn$;
