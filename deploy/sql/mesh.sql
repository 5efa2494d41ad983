-- Run by `deploy/mesh.sh up` on every node of the mesh, the same on each: logical replication
-- carries rows, not DDL, so every node gets the schema from here (later changes: mesh.sh ddl).
--
-- Keys come from snowflake_nextval(), which issues the node's own shard (snowflake_id.shard,
-- set per node in its postgresql.conf): one DDL for every node, and a row inserted on node2
-- carries a key of shard 2 wherever it is replicated to. The apply workers insert the
-- replicated key as it is; only the node that writes a row issues its key.

CREATE EXTENSION snowflake_id;

-- Everything in schema app is replicated over the mesh (publication app): tables keyed by
-- snowflake IDs only.
CREATE SCHEMA app;

CREATE TABLE app.orders (
    id bigint PRIMARY KEY DEFAULT snowflake_nextval(),
    -- the node that wrote the row (its cluster_name), kept where the row is replicated to
    node text NOT NULL DEFAULT current_setting('cluster_name'),
    customer text NOT NULL,
    amount numeric(12, 2) NOT NULL,
    status text NOT NULL DEFAULT 'new',
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The control: the same table keyed by bigserial, in schema control, published on its own
-- (publication control, subscriptions control_*), so that its conflicts halt only its own
-- subscriptions. Every node's sequence starts at 1: the second node to insert a row sends a
-- key the others have already used.
CREATE SCHEMA control;

CREATE TABLE control.orders (
    id bigserial PRIMARY KEY,
    node text NOT NULL DEFAULT current_setting('cluster_name'),
    customer text NOT NULL,
    amount numeric(12, 2) NOT NULL,
    status text NOT NULL DEFAULT 'new',
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Causal order (docs/causal-order.md): a row applied from another node is observed before it
-- becomes visible here, so every key this node issues after a reader could see the row is
-- above the row's key, even with this node's clock behind the writer's. A BEFORE INSERT row
-- trigger on every table of schema app, ENABLE REPLICA: it fires in the apply workers only
-- (they run with session_replication_role = replica), not for the node's own writes. An ID
-- further ahead of this clock than snowflake_id.max_lead_ms is refused (55000), and nothing
-- moves: the row is applied all the same, with a WARNING, for a refusal here would stop
-- replication from that node. Since PostgreSQL 16 the apply worker runs as the table's owner,
-- who must be allowed to execute snowflake_observe (revoked from PUBLIC; the kit's owner is a
-- superuser).
CREATE FUNCTION public.mesh_observe_applied() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    PERFORM public.snowflake_observe(NEW.id);
    RETURN NEW;
EXCEPTION WHEN object_not_in_prerequisite_state THEN
    RAISE WARNING 'applied %.% row % without observing its key: %', TG_TABLE_SCHEMA, TG_TABLE_NAME,
        NEW.id, SQLERRM
        USING DETAIL = 'Keys this node issues from now on may sort below it until its clock catches up.',
              HINT = 'Check that the clocks of the nodes agree within snowflake_id.max_lead_ms.';
    RETURN NEW;
END
$fn$;
-- Only as a trigger, and only where the kit puts it.
REVOKE ALL ON FUNCTION public.mesh_observe_applied() FROM PUBLIC;

-- Puts the trigger on every table of schema app that has a bigint id and lacks it; returns
-- the tables it was added to. Run by mesh.sh up and mesh.sh ddl, in the DDL's transaction.
-- Like every function of the kits, it pins search_path (docs/security.md, rule 3): run by a
-- superuser, it must not call a look-alike such as public.format(text, regclass) that a role
-- allowed to create objects in schema public left there.
CREATE FUNCTION public.mesh_observe_tables() RETURNS SETOF regclass LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    t regclass;
BEGIN
    FOR t IN
        SELECT c.oid::regclass FROM pg_class c
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'id' AND NOT a.attisdropped
            AND a.atttypid = 'bigint'::regtype
        WHERE c.relnamespace = 'app'::regnamespace AND c.relkind IN ('r', 'p')
            AND NOT EXISTS (SELECT FROM pg_trigger g
                            WHERE g.tgrelid = c.oid AND g.tgname = 'mesh_observe_applied')
        ORDER BY 1
    LOOP
        EXECUTE format('CREATE TRIGGER mesh_observe_applied BEFORE INSERT ON %s
                        FOR EACH ROW EXECUTE FUNCTION public.mesh_observe_applied()', t);
        EXECUTE format('ALTER TABLE %s ENABLE REPLICA TRIGGER mesh_observe_applied', t);
        RETURN NEXT t;
    END LOOP;
END
$fn$;
DO $$ BEGIN PERFORM public.mesh_observe_tables(); END $$;

-- FOR TABLES IN SCHEMA: a table created later in the schema is published at once; the
-- subscribers take it after a REFRESH PUBLICATION (mesh.sh ddl does both).
CREATE PUBLICATION app FOR TABLES IN SCHEMA app;
CREATE PUBLICATION control FOR TABLES IN SCHEMA control;
