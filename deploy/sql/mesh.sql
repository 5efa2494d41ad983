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

-- FOR TABLES IN SCHEMA: a table created later in the schema is published at once; the
-- subscribers take it after a REFRESH PUBLICATION (mesh.sh ddl does both).
CREATE PUBLICATION app FOR TABLES IN SCHEMA app;
CREATE PUBLICATION control FOR TABLES IN SCHEMA control;
