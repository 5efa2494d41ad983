SELECT count(*) AS ids,
       count(*) FILTER (WHERE snowflake_shard(id) <> 0) AS other_shard,
       count(*) FILTER (WHERE snowflake_timestamp(id) <> to_timestamp((id >> 16) / 1000.0)) AS other_time,
       count(*) FILTER (WHERE snowflake_seq(id) <> id & 65535) AS other_seq
FROM statuses;
