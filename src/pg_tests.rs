//! Tests that need a live, preloaded backend: shared memory and settings. The SQL surface as
//! a user sees it, error wording included, is pinned by the pg_regress files instead.

#[pgrx::pg_schema]
mod tests {
    use crate::postgres::{fixed_layout, reservation, settings, shmem};
    use pgrx::prelude::*;

    fn one_i64(query: &str) -> i64 {
        Spi::get_one::<i64>(query).unwrap().unwrap()
    }

    #[pg_test]
    fn the_state_lives_in_the_shared_slot_of_its_shard() {
        let id = one_i64("SELECT snowflake_nextval(5)");
        let layout = fixed_layout::get();
        let slot = shmem::slot(5).expect("preloaded, so shared memory exists");
        let counter = slot.last_issued.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(layout.id_of_counter(5, counter), id);
        // Another shard's slot is untouched by it.
        let other = shmem::slot(6).unwrap().last_issued.load(std::sync::atomic::Ordering::Relaxed);
        assert!(other < counter || other == 0);
        assert!(shmem::slot(layout.max_shard()).is_some());
        assert!(shmem::slot(layout.max_shard() + 1).is_none());
    }

    #[pg_test]
    fn issued_ids_stay_below_the_durable_reservation() {
        let id = one_i64("SELECT snowflake_nextval(12)");
        let time_part = fixed_layout::get().decode(id).unwrap().time_part;
        let reservation = shmem::reservation().expect("preloaded");
        assert!(time_part >= reservation.floor.load(std::sync::atomic::Ordering::Relaxed));
        assert!(time_part < reservation.ceiling.load(std::sync::atomic::Ordering::Relaxed));
        // The ceiling in use is already in the file a restart would read.
        assert!(reservation::restore::recorded_ceiling() > time_part);
    }

    #[pg_test]
    fn ids_of_a_shard_increase_and_decode_to_it() {
        let a = one_i64("SELECT snowflake_nextval(9)");
        let b = one_i64("SELECT snowflake_nextval(9)");
        let batch: Vec<i64> = Spi::connect(|client| {
            let rows = client.select("SELECT snowflake_nextvals(9, 1000)", None, &[]).unwrap();
            rows.map(|row| row.get::<i64>(1).unwrap().unwrap()).collect()
        });
        assert!(a < b);
        assert_eq!(batch.len(), 1000);
        assert!(b < batch[0]);
        assert!(batch.windows(2).all(|w| w[0] + 1 == w[1] || w[0] < w[1]));
        assert_eq!(Spi::get_one::<i32>(&format!("SELECT snowflake_shard({b})")), Ok(Some(9)));
    }

    #[pg_test]
    fn the_default_shard_setting_is_used_and_checked() {
        Spi::run("SET snowflake_id.shard = 7").unwrap();
        assert_eq!(Spi::get_one::<i32>("SELECT snowflake_shard(snowflake_nextval())"), Ok(Some(7)));
        assert_eq!(settings::default_shard(), Some(7));
        Spi::run("RESET snowflake_id.shard").unwrap();
        assert_eq!(settings::default_shard(), None);
    }

    #[pg_test(error = "invalid value for parameter \"snowflake_id.shard\": 1024")]
    fn a_default_shard_outside_the_layout_is_refused() {
        Spi::run("SET snowflake_id.shard = 1024").unwrap();
    }

    #[pg_test(error = "snowflake_id.shard is not set")]
    fn nextval_without_a_default_shard_is_refused() {
        Spi::run("SELECT snowflake_nextval()").unwrap();
    }

    #[pg_test(
        error = "parameter \"snowflake_id.shard_bits\" cannot be changed without restarting the server"
    )]
    fn the_layout_cannot_change_while_running() {
        Spi::run("SET snowflake_id.shard_bits = 13").unwrap();
    }

    #[pg_test(error = "parameter \"snowflake_id.max_lead_ms\" cannot be changed now")]
    fn the_clock_policy_is_set_by_reload_only() {
        Spi::run("SET snowflake_id.max_lead_ms = 10").unwrap();
    }

    #[pg_test]
    fn the_defaults_are_the_documented_ones() {
        assert_eq!(Spi::get_one::<&str>("SHOW snowflake_id.shard_bits"), Ok(Some("10")));
        assert_eq!(Spi::get_one::<&str>("SHOW snowflake_id.seq_bits"), Ok(Some("12")));
        assert_eq!(Spi::get_one::<&str>("SHOW snowflake_id.layout"), Ok(Some("")));
        assert_eq!(Spi::get_one::<&str>("SHOW snowflake_id.epoch"), Ok(Some("2024-01-01T00:00:00Z")));
        assert_eq!(Spi::get_one::<&str>("SHOW snowflake_id.max_lead_ms"), Ok(Some("2s")));
        assert_eq!(Spi::get_one::<&str>("SHOW snowflake_id.max_wait_ms"), Ok(Some("1s")));
        assert_eq!(Spi::get_one::<&str>("SHOW snowflake_id.max_reservation_wait_ms"), Ok(Some("5s")));
        assert_eq!(fixed_layout::get(), snowflake_core::layout::Layout::default());
    }
}
