-- The example shown by `deploy/fleet.sh up`, run on the router: users and posts written and
-- read through PL/Proxy, with the IDs decoded to show which logical shard issued them.

\echo '== the shard map: 16 logical shards, each held by one server'
SELECT server, count(*) AS logical_shards, string_agg(shard::text, ' ' ORDER BY shard) AS shards
FROM fleet.shard_map GROUP BY server ORDER BY server;

\echo '== new users: the router picks the shard by a hash of the username; the shard''s server generates the id'
CREATE TEMP TABLE example_users AS
SELECT * FROM fleet.create_users(ARRAY['ada', 'grace', 'ken', 'margaret', 'john', 'frances', 'radia', 'leslie']);
SELECT u.username, u.id, snowflake_shard(u.id) AS shard, m.server
FROM example_users u JOIN fleet.shard_map m ON m.shard = snowflake_shard(u.id) ORDER BY m.server, u.username;

\echo '== three posts each, in one call: each post goes to its user''s shard, routed by the shard in the user''s id'
SELECT count(*) AS posts_inserted
FROM fleet.insert_posts(
    ARRAY(SELECT u.id FROM example_users u, generate_series(1, 3) g ORDER BY g, u.username),
    ARRAY(SELECT u.username || '''s post ' || g FROM example_users u, generate_series(1, 3) g ORDER BY g, u.username));

\echo '== ada''s latest posts (one shard)'
SELECT p.id, d.ts, d.shard, d.seq, p.body
FROM fleet.user_posts((SELECT id FROM example_users WHERE username = 'ada'), 2) p, snowflake_decode(p.id) d;

\echo '== the newest posts of the whole fleet (every server asked, merged by the router)'
SELECT p.id, d.ts, d.shard, m.server, p.body
FROM fleet.newest_posts(4) p, snowflake_decode(p.id) d JOIN fleet.shard_map m ON m.shard = d.shard;

\echo '== paging through all posts in id order: first page of 5, then the page after its last id'
SELECT p.id, snowflake_shard(p.id) AS shard FROM fleet.posts_after(0, 5) p;
SELECT p.id, snowflake_shard(p.id) AS shard
FROM fleet.posts_after((SELECT max(id) FROM fleet.posts_after(0, 5)), 5) p;
