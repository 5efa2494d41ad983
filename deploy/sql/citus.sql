-- snowflake_id on Citus (docs/citus.md). Run once on the coordinator, after CREATE EXTENSION
-- snowflake_id (which Citus runs on every node, and on every node added later): Citus creates
-- these functions on every node as well.
--
-- A node's shard is its Citus group id: 0 for the coordinator, and a number the coordinator
-- gives each node it adds (from its sequence pg_dist_groupid_seq), never given twice, kept by
-- the node's streaming standbys (secondaries), which take its place on failover. Two nodes can
-- therefore not hold the same number, and no one picks it by hand. Two things must agree
-- before a node issues an ID: the group id it reads at the call (snowflake_node_shard()) and
-- the fence its configuration holds (snowflake_id.shards, set by snowflake_citus_fence()).
-- A node that disagrees refuses with 55000, whatever copied one or the other: a data directory
-- cloned from a node and then added (a new group id, the old fence), or a default naming a
-- constant shard copied to every node (the fence of one node only names it).

-- The shard of this node, read at every call: the column default of every table,
-- DEFAULT snowflake_nextval(snowflake_node_shard()). A SQL function reading one row of a
-- catalog table: about a microsecond per call (a bare snowflake_nextval takes a tenth of that),
-- and about as much again for its pinned search_path, which every function of the kits has
-- (docs/security.md, rule 3): one look-alike left in a schema of a caller's path must not run
-- in a superuser's INSERT.
CREATE FUNCTION snowflake_node_shard() RETURNS integer
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT groupid FROM pg_catalog.pg_dist_local_group $$;

-- Sets every node's fence to its group id (ALTER SYSTEM, then a reload, on each node in turn),
-- and returns the nodes and their shards. Run after citus_add_node; until then a new node,
-- which starts with snowflake_id.shards = 'none', issues nothing. ALTER SYSTEM cannot run in a
-- function or a transaction, so each node is sent the command on a connection of its own
-- (master_run_on_worker), as the calling role, which must be a superuser.
CREATE FUNCTION snowflake_citus_fence()
RETURNS TABLE (nodename text, nodeport integer, shard integer)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    node record;
    outcome record;
BEGIN
    FOR node IN
        SELECT n.nodename, n.nodeport, n.groupid FROM pg_catalog.pg_dist_node n
        WHERE n.isactive ORDER BY n.groupid, n.nodeid
    LOOP
        FOR outcome IN
            SELECT * FROM pg_catalog.master_run_on_worker(
                ARRAY[node.nodename, node.nodename], ARRAY[node.nodeport, node.nodeport],
                ARRAY[format('ALTER SYSTEM SET snowflake_id.shards = %L', node.groupid),
                      'SELECT pg_catalog.pg_reload_conf()'],
                false)
        LOOP
            IF NOT outcome.success THEN
                RAISE EXCEPTION 'snowflake_citus_fence: node %:% refused: %',
                    node.nodename, node.nodeport, outcome.result;
            END IF;
        END LOOP;
        nodename := node.nodename;
        nodeport := node.nodeport;
        shard := node.groupid;
        RETURN NEXT;
    END LOOP;
END
$$;
REVOKE EXECUTE ON FUNCTION snowflake_citus_fence() FROM PUBLIC;
