//! The bit layout of an ID: the one place that knows the widths, shifts and masks.
//!
//! ```text
//!  63  62                      22 21           22-S  22-S-1        0
//! [ 0 ][ 41 bits: ms since epoch ][ S bits: shard ][ 22-S bits: seq ]
//! ```
//!
//! Pure Rust in a crate without pgrx, so every rule here is tested by plain `#[test]`s.
//! Every method is `#[inline]`: they are a few instructions each, called on the extension's
//! hot path from another crate, where they are inlined only when marked so.
//!
//! Besides IDs, the generator works with a shard's *counter*: the time part and the sequence
//! packed without the shard bits, `time_part << seq_bits | seq`. Counters of one shard order
//! exactly like that shard's IDs, and `counter + 1` is the next ID: when a millisecond's
//! sequence is used up the carry moves into the time part, which is how the generator
//! "borrows" the next millisecond without a branch.

/// Bits of the time part. 2^41 ms is 69.7 years after the epoch.
pub const TIME_BITS: u32 = 41;
/// Bits shared by the shard id and the sequence; `shard_bits` decides the split.
pub const SHARD_AND_SEQ_BITS: u32 = 22;
/// The largest time part, in milliseconds after the epoch.
pub const MAX_TIME_PART: u64 = (1 << TIME_BITS) - 1;
/// Narrowest and widest shard fields `snowflake_id.shard_bits` accepts. The upper bound keeps
/// at least 64 IDs per millisecond per shard and the shared state at 2^16 slots (4 MiB).
pub const MIN_SHARD_BITS: u32 = 0;
pub const MAX_SHARD_BITS: u32 = 16;
/// The default: Twitter's split, 1,024 shards of 4,096 IDs per millisecond.
pub const DEFAULT_SHARD_BITS: u32 = 10;
/// The default epoch, 2024-01-01T00:00:00Z, in Unix milliseconds.
pub const DEFAULT_EPOCH_UNIX_MS: i64 = 1_704_067_200_000;

/// The layout of one cluster of shard servers: fixed when the servers start, never changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    epoch_unix_ms: i64,
    shard_bits: u32,
}

/// The three fields of an ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parts {
    /// Milliseconds after the epoch.
    pub time_part: u64,
    pub shard: u32,
    pub seq: u32,
}

/// Why a value does not fit the layout. `errors.rs` turns each into a SQL error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutError {
    ShardOutOfRange {
        shard: i64,
        max_shard: u32,
    },
    SeqOutOfRange {
        seq: i64,
        max_seq: u32,
    },
    NegativeId {
        id: i64,
    },
    /// A moment before the epoch (Unix ms given).
    BeforeEpoch {
        unix_ms: i64,
        epoch_unix_ms: i64,
    },
    /// A moment past the last millisecond 41 bits can hold (Unix ms given).
    PastEnd {
        unix_ms: i64,
        last_unix_ms: i64,
    },
}

impl Layout {
    /// A layout; `shard_bits` must lie in `MIN_SHARD_BITS..=MAX_SHARD_BITS` (the GUC enforces it).
    #[inline]
    pub const fn new(epoch_unix_ms: i64, shard_bits: u32) -> Self {
        assert!(shard_bits <= MAX_SHARD_BITS);
        Layout { epoch_unix_ms, shard_bits }
    }

    #[inline]
    pub const fn epoch_unix_ms(&self) -> i64 {
        self.epoch_unix_ms
    }
    #[inline]
    pub const fn shard_bits(&self) -> u32 {
        self.shard_bits
    }
    #[inline]
    pub const fn seq_bits(&self) -> u32 {
        SHARD_AND_SEQ_BITS - self.shard_bits
    }
    #[inline]
    pub const fn shard_count(&self) -> u32 {
        1 << self.shard_bits
    }
    #[inline]
    pub const fn max_shard(&self) -> u32 {
        self.shard_count() - 1
    }
    #[inline]
    pub const fn ids_per_ms(&self) -> u64 {
        1 << self.seq_bits()
    }
    #[inline]
    pub const fn max_seq(&self) -> u32 {
        (self.ids_per_ms() - 1) as u32
    }
    /// The last Unix millisecond an ID can carry.
    #[inline]
    pub const fn last_unix_ms(&self) -> i64 {
        self.epoch_unix_ms + MAX_TIME_PART as i64
    }

    /// Checks a shard id given by a caller.
    #[inline]
    pub fn check_shard(&self, shard: i64) -> Result<u32, LayoutError> {
        if (0..=self.max_shard() as i64).contains(&shard) {
            Ok(shard as u32)
        } else {
            Err(LayoutError::ShardOutOfRange { shard, max_shard: self.max_shard() })
        }
    }

    /// Checks a sequence number given by a caller.
    #[inline]
    pub fn check_seq(&self, seq: i64) -> Result<u32, LayoutError> {
        if (0..=self.max_seq() as i64).contains(&seq) {
            Ok(seq as u32)
        } else {
            Err(LayoutError::SeqOutOfRange { seq, max_seq: self.max_seq() })
        }
    }

    /// The time part of a Unix millisecond, refused outside the 41-bit range.
    #[inline]
    pub fn time_part(&self, unix_ms: i64) -> Result<u64, LayoutError> {
        if unix_ms < self.epoch_unix_ms {
            Err(LayoutError::BeforeEpoch { unix_ms, epoch_unix_ms: self.epoch_unix_ms })
        } else if unix_ms > self.last_unix_ms() {
            Err(LayoutError::PastEnd { unix_ms, last_unix_ms: self.last_unix_ms() })
        } else {
            Ok((unix_ms - self.epoch_unix_ms) as u64)
        }
    }

    /// The Unix millisecond of a time part.
    #[inline]
    pub const fn unix_ms(&self, time_part: u64) -> i64 {
        self.epoch_unix_ms + time_part as i64
    }

    /// Packs the three fields. They must be in range (see `check_*`); a time part that is
    /// not is a broken invariant, caught here rather than turned into a negative ID.
    #[inline]
    pub const fn compose(&self, parts: Parts) -> i64 {
        assert!(parts.time_part <= MAX_TIME_PART);
        ((parts.time_part << SHARD_AND_SEQ_BITS)
            | ((parts.shard as u64) << self.seq_bits())
            | parts.seq as u64) as i64
    }

    /// Splits an ID into its fields. Every non-negative `bigint` is a valid ID.
    #[inline]
    pub fn decode(&self, id: i64) -> Result<Parts, LayoutError> {
        if id < 0 {
            return Err(LayoutError::NegativeId { id });
        }
        let id = id as u64;
        Ok(Parts {
            time_part: id >> SHARD_AND_SEQ_BITS,
            shard: ((id >> self.seq_bits()) & self.max_shard() as u64) as u32,
            seq: (id & self.max_seq() as u64) as u32,
        })
    }

    /// The smallest ID of a millisecond (shard 0, seq 0).
    #[inline]
    pub const fn min_id(&self, time_part: u64) -> i64 {
        self.compose(Parts { time_part, shard: 0, seq: 0 })
    }

    /// The largest ID of a millisecond (last shard, last seq).
    #[inline]
    pub const fn max_id(&self, time_part: u64) -> i64 {
        self.compose(Parts { time_part, shard: self.max_shard(), seq: self.max_seq() })
    }

    /// The first counter of a millisecond.
    #[inline]
    pub const fn counter_at(&self, time_part: u64) -> u64 {
        time_part << self.seq_bits()
    }

    /// The time part of a counter.
    #[inline]
    pub const fn counter_time_part(&self, counter: u64) -> u64 {
        counter >> self.seq_bits()
    }

    /// The ID a shard's counter stands for.
    #[inline]
    pub const fn id_of_counter(&self, shard: u32, counter: u64) -> i64 {
        self.compose(Parts {
            time_part: self.counter_time_part(counter),
            shard,
            seq: (counter & self.max_seq() as u64) as u32,
        })
    }

    /// The smallest counter whose ID on `shard` is greater than `id`; what
    /// `snowflake_advance` needs. `id` may come from any shard.
    #[inline]
    pub fn first_counter_above(&self, shard: u32, id: i64) -> Result<u64, LayoutError> {
        let parts = self.decode(id)?;
        let same_ms = self.counter_at(parts.time_part);
        Ok(match shard.cmp(&parts.shard) {
            // Our shard bits are larger: every ID of this millisecond is above `id`.
            std::cmp::Ordering::Greater => same_ms,
            std::cmp::Ordering::Equal => same_ms + parts.seq as u64 + 1,
            // Our shard bits are smaller: only the next millisecond is above `id`.
            std::cmp::Ordering::Less => self.counter_at(parts.time_part + 1),
        })
    }
}

impl Default for Layout {
    #[inline]
    fn default() -> Self {
        Layout::new(DEFAULT_EPOCH_UNIX_MS, DEFAULT_SHARD_BITS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWITTER: Layout = Layout::new(DEFAULT_EPOCH_UNIX_MS, 10);
    const INSTAGRAM: Layout = Layout::new(DEFAULT_EPOCH_UNIX_MS, 13);

    #[test]
    fn widths_of_the_published_layouts() {
        assert_eq!((TWITTER.max_shard(), TWITTER.ids_per_ms()), (1023, 4096));
        assert_eq!((INSTAGRAM.max_shard(), INSTAGRAM.ids_per_ms()), (8191, 512));
        let one_shard = Layout::new(0, 0);
        assert_eq!((one_shard.max_shard(), one_shard.ids_per_ms()), (0, 1 << 22));
    }

    #[test]
    fn compose_and_decode_are_inverse_at_the_edges() {
        for layout in [TWITTER, INSTAGRAM, Layout::new(0, 0), Layout::new(0, MAX_SHARD_BITS)] {
            for time_part in [0, 1, 12_345_678_901, MAX_TIME_PART] {
                for shard in [0, layout.max_shard() / 2, layout.max_shard()] {
                    for seq in [0, 1, layout.max_seq()] {
                        let parts = Parts { time_part, shard, seq };
                        let id = layout.compose(parts);
                        assert!(id >= 0, "{parts:?} gave a negative id");
                        assert_eq!(layout.decode(id), Ok(parts));
                    }
                }
            }
        }
    }

    #[test]
    fn the_largest_id_is_the_largest_bigint() {
        assert_eq!(TWITTER.max_id(MAX_TIME_PART), i64::MAX);
        assert_eq!(TWITTER.min_id(0), 0);
    }

    #[test]
    fn known_id_matches_the_twitter_arithmetic() {
        // 1 ms after the epoch, shard 3, seq 5: (1 << 22) | (3 << 12) | 5.
        let id = TWITTER.compose(Parts { time_part: 1, shard: 3, seq: 5 });
        assert_eq!(id, 4_194_304 + 12_288 + 5);
    }

    #[test]
    fn negative_ids_are_refused() {
        assert_eq!(TWITTER.decode(-1), Err(LayoutError::NegativeId { id: -1 }));
    }

    #[test]
    fn shard_and_seq_ranges_follow_the_split() {
        assert_eq!(TWITTER.check_shard(1023), Ok(1023));
        assert_eq!(
            TWITTER.check_shard(1024),
            Err(LayoutError::ShardOutOfRange { shard: 1024, max_shard: 1023 })
        );
        assert!(TWITTER.check_shard(-1).is_err());
        assert_eq!(INSTAGRAM.check_shard(8191), Ok(8191));
        assert_eq!(INSTAGRAM.check_seq(511), Ok(511));
        assert!(INSTAGRAM.check_seq(512).is_err());
        assert!(TWITTER.check_seq(-5).is_err());
    }

    #[test]
    fn time_part_is_refused_outside_41_bits() {
        let epoch = TWITTER.epoch_unix_ms();
        assert_eq!(TWITTER.time_part(epoch), Ok(0));
        assert_eq!(TWITTER.time_part(epoch + 1500), Ok(1500));
        assert!(matches!(TWITTER.time_part(epoch - 1), Err(LayoutError::BeforeEpoch { .. })));
        assert_eq!(TWITTER.time_part(TWITTER.last_unix_ms()), Ok(MAX_TIME_PART));
        assert!(matches!(TWITTER.time_part(TWITTER.last_unix_ms() + 1), Err(LayoutError::PastEnd { .. })));
    }

    #[test]
    fn counters_carry_the_sequence_into_the_next_millisecond() {
        let last_of_ms = TWITTER.counter_at(7) + TWITTER.max_seq() as u64;
        assert_eq!(TWITTER.counter_time_part(last_of_ms), 7);
        assert_eq!(TWITTER.counter_time_part(last_of_ms + 1), 8);
        let a = TWITTER.id_of_counter(5, last_of_ms);
        let b = TWITTER.id_of_counter(5, last_of_ms + 1);
        assert!(b > a);
        assert_eq!(TWITTER.decode(b), Ok(Parts { time_part: 8, shard: 5, seq: 0 }));
    }

    #[test]
    fn first_counter_above_an_id_of_any_shard() {
        let id = TWITTER.compose(Parts { time_part: 100, shard: 5, seq: 9 });
        for shard in [0, 4, 5, 6, 1023] {
            let counter = TWITTER.first_counter_above(shard, id).unwrap();
            assert!(TWITTER.id_of_counter(shard, counter) > id, "shard {shard}");
            // ... and it is the smallest such counter.
            assert!(TWITTER.id_of_counter(shard, counter - 1) <= id, "shard {shard}");
        }
    }
}
