-- Run once on the router, in database `fleet`, by deploy/fleet.sh.
--
-- The router holds no data. Applications call the functions of schema `fleet` here; PL/Proxy
-- runs them on the shard server that holds the logical shard concerned (or on every server,
-- and the router merges). The map from logical shard to server is the table fleet.shard_map,
-- which PL/Proxy reads through the plproxy.get_cluster_* functions at the end of this file.
--
-- Every function pins search_path to pg_catalog, pg_temp (docs/security.md, rule 3) and
-- names the kit's objects and the extension's functions by their schema: a look-alike that
-- a role left in schema public never runs in their place. PL/Proxy functions take the clause
-- too (checked with PL/Proxy 2.10): it applies to what PL/Proxy runs here, the RUN ON
-- function and the plproxy.get_cluster_* functions, not to the call on the shard server,
-- whose functions pin their own (shard.sql).

CREATE EXTENSION plproxy;
-- For decoding only: a request is routed by the shard inside an ID (snowflake_shard). The
-- router generates no IDs.
CREATE EXTENSION snowflake_id;
CREATE SCHEMA fleet;
-- The PL/Proxy functions behind the SQL wrappers of `fleet` (not for applications).
CREATE SCHEMA fleet_proxy;

-- The number of logical shards, fixed when the fleet is created, forever: entities are
-- placed by it. A power of two, because PL/Proxy maps a hash to a partition with a bit mask;
-- here every logical shard is one PL/Proxy partition, and its number is the snowflake shard
-- id of its IDs. 16 spreads over up to 16 servers; a larger fleet starts with more (the
-- layout's 10 shard bits allow up to 1024).
CREATE FUNCTION fleet.shard_count() RETURNS int IMMUTABLE PARALLEL SAFE LANGUAGE sql
SET search_path = pg_catalog, pg_temp AS 'SELECT 16';

CREATE FUNCTION fleet.all_shards() RETURNS int[] IMMUTABLE PARALLEL SAFE LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT ARRAY(SELECT generate_series(0, fleet.shard_count() - 1)) $$;

-- The shard of a new user, from a hash of its username. Only placement uses the hash: from
-- then on the user's id carries its shard, and everything the user owns is routed by it.
CREATE FUNCTION fleet.shard_of_username(username text) RETURNS int IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$ SELECT hashtext(username) & (fleet.shard_count() - 1) $$;

CREATE TABLE fleet.servers (
    name    text PRIMARY KEY,
    connstr text NOT NULL UNIQUE
);

-- Which server holds each logical shard: the single source of truth for routing.
CREATE TABLE fleet.shard_map (
    shard  int PRIMARY KEY CHECK (shard >= 0 AND shard < fleet.shard_count()),
    server text NOT NULL REFERENCES fleet.servers
);

-- Bumped by every change of the map; PL/Proxy reloads the map when it sees a new version.
CREATE TABLE fleet.map_version (version int NOT NULL);
INSERT INTO fleet.map_version VALUES (1);

CREATE FUNCTION fleet.add_server(p_name text, p_connstr text) RETURNS void LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ INSERT INTO fleet.servers (name, connstr) VALUES (p_name, p_connstr) $$;

-- What a server says it holds, asked directly (not through the map, so that a server the map
-- has forgotten is asked too).
CREATE FUNCTION fleet_proxy.server_shards(connstr text) RETURNS TABLE (shard int, state text)
LANGUAGE plproxy SET search_path = pg_catalog, pg_temp AS $$
    CONNECT connstr;
    SELECT s.shard, s.state FROM fleet.server_shards() s;
$$;

-- Every logical shard: where the map sends it, which servers hold it and in which state.
-- `ok` when exactly one server holds it, active, and the map sends it there.
CREATE FUNCTION fleet.status()
RETURNS TABLE (shard int, mapped_to text, held_by text, state text, ok boolean) LANGUAGE sql
SET search_path = pg_catalog, pg_temp AS $$
    WITH held AS (
        SELECT s.name, h.shard, h.state
        FROM fleet.servers s CROSS JOIN LATERAL fleet_proxy.server_shards(s.connstr) h
    ), shards AS (
        SELECT generate_series(0, fleet.shard_count() - 1) AS shard UNION SELECT shard FROM held
    )
    SELECT n.shard, m.server, string_agg(h.name, ', ' ORDER BY h.name), string_agg(h.state, ', ' ORDER BY h.name),
           count(h.name) = 1 AND bool_and(h.name = m.server AND h.state = 'active')
    FROM shards n
    LEFT JOIN fleet.shard_map m ON m.shard = n.shard
    LEFT JOIN held h ON h.shard = n.shard
    GROUP BY n.shard, m.server
    ORDER BY n.shard
$$;

-- Points the map at the server that now holds a logical shard. Refuses unless that server
-- holds it active and no other server can still write it: two servers generating IDs for one
-- shard could issue the same ID.
CREATE FUNCTION fleet.assign_shard(p_shard int, p_server text) RETURNS void LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    writers text;
BEGIN
    -- One map change at a time.
    PERFORM FROM fleet.map_version FOR UPDATE;
    SELECT string_agg(s.name, ', ' ORDER BY s.name) INTO writers
    FROM fleet.servers s CROSS JOIN LATERAL fleet_proxy.server_shards(s.connstr) h
    WHERE h.shard = p_shard AND h.state = 'active';
    IF writers IS DISTINCT FROM p_server THEN
        RAISE EXCEPTION 'logical shard % cannot be mapped to server %', p_shard, p_server
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = format('Servers holding it writable: %s.', coalesce(writers, 'none')),
                  HINT = 'Exactly the target must hold the shard active: move it with deploy/fleet.sh move-shard.';
    END IF;
    INSERT INTO fleet.shard_map (shard, server) VALUES (p_shard, p_server)
        ON CONFLICT (shard) DO UPDATE SET server = excluded.server;
    UPDATE fleet.map_version SET version = version + 1;
END
$fn$;

-- The next logical shard to move to a new server so that shards stay evenly spread: the
-- highest shard of the fullest other server; NULL once the new server has its share.
CREATE FUNCTION fleet.next_shard_for(p_server text) RETURNS int LANGUAGE sql
SET search_path = pg_catalog, pg_temp AS $$
    SELECT max(m.shard) FROM fleet.shard_map m
    WHERE m.server = (SELECT server FROM fleet.shard_map WHERE server <> p_server
                      GROUP BY server ORDER BY count(*) DESC, server LIMIT 1)
      AND (SELECT count(*) FROM fleet.shard_map WHERE server = p_server)
          < fleet.shard_count() / (SELECT count(*) FROM fleet.servers)
$$;

------------------------------------------------------------------------------------------
-- The application's functions. Writes go to one logical shard per element; reads of a user
-- or an id go to the shard in the id; fleet-wide reads ask every server for its shards
-- (SPLIT of the list of all shards: each server gets exactly the shards the map gives it)
-- and merge.

CREATE FUNCTION fleet_proxy.create_users(shards int[], usernames text[])
RETURNS TABLE (id bigint, username text) LANGUAGE plproxy SET search_path = pg_catalog, pg_temp AS $$
    CLUSTER 'fleet';
    SPLIT shards, usernames;
    RUN ON shards;
    TARGET fleet.create_users;
$$;

-- New users, each on the shard of its username's hash; returns their ids.
CREATE FUNCTION fleet.create_users(usernames text[]) RETURNS TABLE (id bigint, username text)
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    SELECT * FROM fleet_proxy.create_users(
        ARRAY(SELECT fleet.shard_of_username(u) FROM unnest(usernames) WITH ORDINALITY t(u, n) ORDER BY n),
        usernames)
$$;

-- New posts, each on its user's shard; returns their ids.
CREATE FUNCTION fleet.insert_posts(user_ids bigint[], bodies text[]) RETURNS SETOF bigint
LANGUAGE plproxy SET search_path = pg_catalog, pg_temp AS $$
    CLUSTER 'fleet';
    SPLIT user_ids, bodies;
    RUN ON public.snowflake_shard(user_ids);
$$;

-- One new post; returns its id.
CREATE FUNCTION fleet.insert_post(p_user_id bigint, p_body text) RETURNS bigint LANGUAGE plproxy
SET search_path = pg_catalog, pg_temp AS $$
    CLUSTER 'fleet';
    RUN ON public.snowflake_shard(p_user_id);
$$;

-- One new post written after its writer saw the ID p_seen (a reply to post p_seen, say), on
-- whichever server: the post's ID is above p_seen, whatever the two servers' clocks say
-- (docs/causal-order.md). p_seen NULL: as without it.
CREATE FUNCTION fleet.insert_post(p_user_id bigint, p_body text, p_seen bigint) RETURNS bigint
LANGUAGE plproxy SET search_path = pg_catalog, pg_temp AS $$
    CLUSTER 'fleet';
    RUN ON public.snowflake_shard(p_user_id);
$$;

-- Posts by id, from wherever their shards are.
CREATE FUNCTION fleet.get_posts(ids bigint[])
RETURNS TABLE (id bigint, user_id bigint, body text, created_at timestamptz) LANGUAGE plproxy
SET search_path = pg_catalog, pg_temp AS $$
    CLUSTER 'fleet';
    SPLIT ids;
    RUN ON public.snowflake_shard(ids);
$$;

-- A user's newest posts, newest first (one shard: the user's).
CREATE FUNCTION fleet.user_posts(p_user_id bigint, p_limit int)
RETURNS TABLE (id bigint, user_id bigint, body text, created_at timestamptz) LANGUAGE plproxy
SET search_path = pg_catalog, pg_temp AS $$
    CLUSTER 'fleet';
    RUN ON public.snowflake_shard(p_user_id);
$$;

CREATE FUNCTION fleet_proxy.posts_after(shards int[], p_after bigint, p_limit int)
RETURNS TABLE (id bigint, user_id bigint) LANGUAGE plproxy SET search_path = pg_catalog, pg_temp AS $$
    CLUSTER 'fleet';
    SPLIT shards;
    RUN ON shards;
    TARGET fleet.posts_after;
$$;

-- One page of all posts of the fleet in id order: the next p_limit after the cursor p_after
-- (0 for the first page, then the last id of the previous page).
CREATE FUNCTION fleet.posts_after(p_after bigint, p_limit int) RETURNS TABLE (id bigint, user_id bigint)
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    SELECT p.id, p.user_id FROM fleet_proxy.posts_after(fleet.all_shards(), p_after, p_limit) p
    ORDER BY p.id LIMIT p_limit
$$;

CREATE FUNCTION fleet_proxy.newest_posts(shards int[], p_limit int)
RETURNS TABLE (id bigint, user_id bigint, body text, created_at timestamptz) LANGUAGE plproxy
SET search_path = pg_catalog, pg_temp AS $$
    CLUSTER 'fleet';
    SPLIT shards;
    RUN ON shards;
    TARGET fleet.newest_posts;
$$;

-- The newest posts of the whole fleet, newest first.
CREATE FUNCTION fleet.newest_posts(p_limit int)
RETURNS TABLE (id bigint, user_id bigint, body text, created_at timestamptz) LANGUAGE sql
SET search_path = pg_catalog, pg_temp AS $$
    SELECT p.* FROM fleet_proxy.newest_posts(fleet.all_shards(), p_limit) p ORDER BY p.id DESC LIMIT p_limit
$$;

------------------------------------------------------------------------------------------
-- PL/Proxy's cluster configuration (see PL/Proxy's config documentation): cluster 'fleet'
-- has one partition per logical shard, in shard order, each the connection string of the
-- server holding it. Partitions on one server share one connection.

CREATE SCHEMA plproxy;

CREATE FUNCTION plproxy.get_cluster_version(cluster_name text) RETURNS int LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF cluster_name <> 'fleet' THEN
        RAISE EXCEPTION 'unknown PL/Proxy cluster %', cluster_name USING ERRCODE = 'undefined_object';
    END IF;
    RETURN (SELECT version FROM fleet.map_version);
END
$fn$;

CREATE FUNCTION plproxy.get_cluster_partitions(cluster_name text) RETURNS SETOF text LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF (SELECT count(*) FROM fleet.shard_map) <> fleet.shard_count() THEN
        RAISE EXCEPTION 'the shard map is incomplete'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = format('%s of %s logical shards are mapped to a server.',
                                  (SELECT count(*) FROM fleet.shard_map), fleet.shard_count()),
                  HINT = 'Map every shard with fleet.assign_shard (deploy/fleet.sh up does).';
    END IF;
    RETURN QUERY SELECT s.connstr FROM fleet.shard_map m JOIN fleet.servers s ON s.name = m.server
                 ORDER BY m.shard;
END
$fn$;

CREATE FUNCTION plproxy.get_cluster_config(cluster_name text, OUT key text, OUT val text)
RETURNS SETOF record LANGUAGE sql
SET search_path = pg_catalog, pg_temp AS $$
    -- Connections to shard servers are reopened after 30 minutes.
    SELECT 'connection_lifetime'::text, '1800'::text
$$;
