SELECT count(*) AS ids,
       count(*) FILTER (WHERE snowflake_shard(id) <> 5) AS other_shard,
       count(*) FILTER (WHERE snowflake_timestamp(id) <> to_timestamp(((id >> 23) + 1546300800000) / 1000.0)) AS other_time,
       count(*) FILTER (WHERE snowflake_seq(id) <> id & 1023) AS other_seq
FROM insta5.photos;
