//! The bit layout of an ID: the one place that knows the widths, shifts and masks.
//!
//! ```text
//!  63 .. W   W-1                    S+Q  S+Q-1         Q  Q-1          0
//! [ 0 .. 0 ][ T bits: ms since epoch ][ S bits: shard ][ Q bits: seq ]      T = W - S - Q
//! ```
//!
//! The split is configured (`snowflake_id.shard_bits` S, `snowflake_id.seq_bits` Q); the time
//! part gets what they leave of the ID's W bits: the 63 positive bits of a `bigint`, or fewer
//! (`snowflake_id.id_bits`), so that every ID stays at or below 2^W - 1: with W = 53, a number
//! JavaScript and JSON parsers that read doubles hold exactly. The default, 10 and 12 of 63,
//! leaves 41 bits of time: Twitter's layout. `NAMED_LAYOUTS` gives the splits and epochs of
//! schemes in use, and `js53`, this project's 53-bit layout.
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

/// The bits of a positive `bigint`: time, shard and sequence share them, unless a layout
/// narrows the ID (`MIN_ID_BITS..=ID_BITS`).
pub const ID_BITS: u32 = 63;
/// The narrowest ID a layout may have: 53 bits, the integers a double holds exactly
/// (`MAX_SAFE_INTEGER`). Narrower would buy no client anything.
pub const MIN_ID_BITS: u32 = 53;
/// The largest integer up to which a double (a JavaScript number, what many JSON parsers read
/// numbers into) holds every integer exactly: JavaScript's `Number.MAX_SAFE_INTEGER`, 2^53 - 1.
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;
/// The fewest time bits a split may leave: 2^38 ms is 8.7 years after the epoch.
pub const MIN_TIME_BITS: u32 = 38;
/// The most: 2^47 ms is 4,459 years, Mastodon's layout (Unix ms, 16 low bits). More would
/// only carry the IDs past the years a timestamp can show.
pub const MAX_TIME_BITS: u32 = 47;
/// Narrowest and widest shard fields `snowflake_id.shard_bits` accepts. The upper bound keeps
/// the shared state at 2^16 slots (4 MiB).
pub const MIN_SHARD_BITS: u32 = 0;
pub const MAX_SHARD_BITS: u32 = 16;
/// Narrowest and widest sequence fields `snowflake_id.seq_bits` accepts (the split must also
/// leave `MIN_TIME_BITS..=MAX_TIME_BITS` of time).
pub const MIN_SEQ_BITS: u32 = 0;
pub const MAX_SEQ_BITS: u32 = ID_BITS - MIN_TIME_BITS;
/// The default split: Twitter's, 1,024 shards of 4,096 IDs per millisecond, 41 bits of time.
pub const DEFAULT_SHARD_BITS: u32 = 10;
pub const DEFAULT_SEQ_BITS: u32 = 12;
/// The default epoch, 2024-01-01T00:00:00Z, in Unix milliseconds.
pub const DEFAULT_EPOCH_UNIX_MS: i64 = 1_704_067_200_000;

/// The layout of one cluster of shard servers: fixed when the servers start, never changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    epoch_unix_ms: i64,
    shard_bits: u32,
    seq_bits: u32,
    /// The ID's width: 63, or fewer for IDs that must stay below 2^id_bits.
    id_bits: u32,
    /// Worked out once from the widths, so that composing an ID and checking its time part
    /// cost the hot path no more than with fixed widths.
    time_shift: u32,
    max_time_part: u64,
}

/// Why a split of the 63 bits cannot be used. The extension turns each into a startup error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitError {
    /// The ID's width is outside `MIN_ID_BITS..=ID_BITS`.
    IdBits {
        id_bits: u32,
    },
    ShardBits {
        shard_bits: u32,
    },
    SeqBits {
        seq_bits: u32,
    },
    /// The time part would be narrower than `MIN_TIME_BITS` or wider than `MAX_TIME_BITS`.
    TimeBits {
        time_bits: i64,
    },
}

/// A layout in use elsewhere, by name (`snowflake_id.layout`, and the decoders' layout
/// argument). Sources of the figures: docs/adopting.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamedLayout {
    pub name: &'static str,
    pub layout: Layout,
}

/// The schemes the extension can take over or decode, with their own epochs and splits, and
/// `js53`.
pub const NAMED_LAYOUTS: [NamedLayout; 5] = [
    // Twitter's snowflake (IdWorker.scala: twepoch = 1288834974657L; 5 bits of datacenter and
    // 5 of worker, 12 of sequence).
    NamedLayout { name: "twitter", layout: Layout::new(1_288_834_974_657, 10, 12) },
    // Discord (developer docs, "Snowflakes": DISCORD_EPOCH 1420070400000, 2015-01-01; 5 bits
    // of worker and 5 of process, 12 of increment).
    NamedLayout { name: "discord", layout: Layout::new(1_420_070_400_000, 10, 12) },
    // Instagram ("Sharding & IDs at Instagram": 41 bits of time, 13 of shard, 10 of sequence;
    // its example epoch 1314220021721). Within 63 positive bits the time part has 40.
    NamedLayout { name: "instagram", layout: Layout::new(1_314_220_021_721, 13, 10) },
    // Mastodon (lib/mastodon/snowflake.rb, timestamp_id: Unix ms << 16, 16 low bits).
    NamedLayout { name: "mastodon", layout: Layout::new(0, 0, 16) },
    // This project's IDs for JavaScript and JSON: 53 bits, every ID at or below 2^53 - 1.
    // 41 bits of milliseconds from 2024-01-01 last as long as the default layout's (69.7
    // years, to 2093); the 12 left are split evenly: 64 shards (0 to 63), 64 IDs per
    // millisecond per shard (64,000 a second, past which the clock policy borrows the next
    // milliseconds). The split PgDog's JavaScript-safe mode chose too (41 + 6 + 6).
    NamedLayout { name: "js53", layout: Layout::new_narrow(DEFAULT_EPOCH_UNIX_MS, 6, 6, 53) },
];

/// A named layout; `None` for a name not in `NAMED_LAYOUTS` (names are lowercase).
pub fn named_layout(name: &str) -> Option<Layout> {
    NAMED_LAYOUTS.iter().find(|named| named.name == name).map(|named| named.layout)
}

/// The names of `NAMED_LAYOUTS`, for messages: `twitter, discord, instagram, mastodon, js53`.
pub fn layout_names() -> String {
    NAMED_LAYOUTS.map(|named| named.name).join(", ")
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
    /// A moment past the last millisecond the time bits can hold (Unix ms given).
    PastEnd {
        unix_ms: i64,
        last_unix_ms: i64,
    },
    /// An ID wider than a narrow layout's IDs: above its largest, 2^id_bits - 1.
    AboveLayout {
        id: i64,
        max_id: i64,
    },
}

impl Layout {
    /// A layout of 63-bit IDs whose split is known to be valid (a constant, or checked by
    /// `try_new`).
    #[inline]
    pub const fn new(epoch_unix_ms: i64, shard_bits: u32, seq_bits: u32) -> Self {
        Layout::new_narrow(epoch_unix_ms, shard_bits, seq_bits, ID_BITS)
    }

    /// A layout of `id_bits`-bit IDs whose split is known to be valid.
    #[inline]
    pub const fn new_narrow(epoch_unix_ms: i64, shard_bits: u32, seq_bits: u32, id_bits: u32) -> Self {
        match Layout::try_new_narrow(epoch_unix_ms, shard_bits, seq_bits, id_bits) {
            Ok(layout) => layout,
            Err(_) => panic!("a split of the ID's bits outside the accepted ranges"),
        }
    }

    /// The layout with its derived fields worked out; the split was checked by `try_new_narrow`.
    #[inline]
    const fn with_widths(epoch_unix_ms: i64, shard_bits: u32, seq_bits: u32, id_bits: u32) -> Self {
        let time_shift = shard_bits + seq_bits;
        let max_time_part = (1 << (id_bits - time_shift)) - 1;
        Layout { epoch_unix_ms, shard_bits, seq_bits, id_bits, time_shift, max_time_part }
    }

    /// A layout of 63-bit IDs, or why its split cannot be used.
    #[inline]
    pub const fn try_new(epoch_unix_ms: i64, shard_bits: u32, seq_bits: u32) -> Result<Self, SplitError> {
        Layout::try_new_narrow(epoch_unix_ms, shard_bits, seq_bits, ID_BITS)
    }

    /// A layout of `id_bits`-bit IDs, or why its split cannot be used: the time part gets
    /// `id_bits - shard_bits - seq_bits`, which must lie in `MIN_TIME_BITS..=MAX_TIME_BITS`.
    #[inline]
    pub const fn try_new_narrow(
        epoch_unix_ms: i64,
        shard_bits: u32,
        seq_bits: u32,
        id_bits: u32,
    ) -> Result<Self, SplitError> {
        let time_bits = id_bits as i64 - shard_bits as i64 - seq_bits as i64;
        if id_bits < MIN_ID_BITS || id_bits > ID_BITS {
            Err(SplitError::IdBits { id_bits })
        } else if shard_bits > MAX_SHARD_BITS {
            Err(SplitError::ShardBits { shard_bits })
        } else if seq_bits > MAX_SEQ_BITS {
            Err(SplitError::SeqBits { seq_bits })
        } else if time_bits < MIN_TIME_BITS as i64 || time_bits > MAX_TIME_BITS as i64 {
            Err(SplitError::TimeBits { time_bits })
        } else {
            Ok(Layout::with_widths(epoch_unix_ms, shard_bits, seq_bits, id_bits))
        }
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
        self.seq_bits
    }
    /// The ID's width: 63, or fewer for a narrow layout.
    #[inline]
    pub const fn id_bits(&self) -> u32 {
        self.id_bits
    }
    #[inline]
    pub const fn time_bits(&self) -> u32 {
        self.id_bits - self.time_shift
    }
    /// The largest ID of the layout, 2^id_bits - 1 (`i64::MAX` for 63 bits).
    #[inline]
    pub const fn largest_id(&self) -> i64 {
        ((1_u64 << self.id_bits) - 1) as i64
    }
    /// Whether every ID of the layout is a number a double holds exactly (`js53`), so that
    /// JavaScript and JSON readers may take IDs as numbers.
    #[inline]
    pub const fn ids_fit_a_double(&self) -> bool {
        self.largest_id() <= MAX_SAFE_INTEGER
    }
    /// Where the time part starts: the bits below it are the shard's and the sequence's.
    #[inline]
    const fn time_shift(&self) -> u32 {
        self.time_shift
    }
    /// The largest time part, in milliseconds after the epoch.
    #[inline]
    pub const fn max_time_part(&self) -> u64 {
        self.max_time_part
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
        self.epoch_unix_ms + self.max_time_part() as i64
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

    /// The time part of a Unix millisecond, refused outside the range of the time bits.
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
        assert!(parts.time_part <= self.max_time_part());
        ((parts.time_part << self.time_shift())
            | ((parts.shard as u64) << self.seq_bits())
            | parts.seq as u64) as i64
    }

    /// Splits an ID into its fields. Every `bigint` from 0 to `largest_id()` is a valid ID.
    #[inline]
    pub fn decode(&self, id: i64) -> Result<Parts, LayoutError> {
        if id < 0 {
            return Err(LayoutError::NegativeId { id });
        }
        if id > self.largest_id() {
            return Err(LayoutError::AboveLayout { id, max_id: self.largest_id() });
        }
        let id = id as u64;
        Ok(Parts {
            time_part: id >> self.time_shift(),
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
        Layout::new(DEFAULT_EPOCH_UNIX_MS, DEFAULT_SHARD_BITS, DEFAULT_SEQ_BITS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWITTER: Layout = Layout::new(DEFAULT_EPOCH_UNIX_MS, 10, 12);
    const INSTAGRAM: Layout = Layout::new(DEFAULT_EPOCH_UNIX_MS, 13, 10);
    const MASTODON: Layout = Layout::new(0, 0, 16);

    #[test]
    fn widths_of_the_published_layouts() {
        assert_eq!((TWITTER.max_shard(), TWITTER.ids_per_ms(), TWITTER.time_bits()), (1023, 4096, 41));
        assert_eq!((INSTAGRAM.max_shard(), INSTAGRAM.ids_per_ms(), INSTAGRAM.time_bits()), (8191, 1024, 40));
        assert_eq!((MASTODON.max_shard(), MASTODON.ids_per_ms(), MASTODON.time_bits()), (0, 65536, 47));
        assert_eq!(Layout::default(), TWITTER);
    }

    #[test]
    fn a_split_must_leave_8_years_of_time_and_fit_shared_memory() {
        assert_eq!(Layout::try_new(0, 13, 12), Ok(Layout::new(0, 13, 12)));
        assert_eq!(Layout::try_new(0, 14, 12), Err(SplitError::TimeBits { time_bits: 37 }));
        assert_eq!(Layout::try_new(0, 0, 15), Err(SplitError::TimeBits { time_bits: 48 }));
        assert_eq!(Layout::try_new(0, 17, 8), Err(SplitError::ShardBits { shard_bits: 17 }));
        assert_eq!(Layout::try_new(0, 0, 26), Err(SplitError::SeqBits { seq_bits: 26 }));
        // 2^38 ms is 8.7 years; 2^47 ms 4,459 years.
        let shortest = Layout::new(0, 13, 12);
        assert!(shortest.last_unix_ms() > 8 * 365 * 86_400_000);
        assert!(MASTODON.last_unix_ms() > 4_000 * 365 * 86_400_000);
    }

    #[test]
    fn the_named_layouts_follow_their_formulas() {
        assert_eq!(named_layout("instagram"), Some(Layout::new(1_314_220_021_721, 13, 10)));
        assert_eq!(named_layout("Instagram"), None);
        assert_eq!(layout_names(), "twitter, discord, instagram, mastodon, js53");
        // Instagram: ((ms - epoch) << 23) | (shard << 10) | (seq % 1024).
        let instagram = named_layout("instagram").unwrap();
        let id = (1234_i64 << 23) | (5 << 10) | 1000;
        assert_eq!(instagram.decode(id), Ok(Parts { time_part: 1234, shard: 5, seq: 1000 }));
        // Mastodon: (unix_ms << 16) | tail.
        let unix_ms = 1_700_000_000_123_i64;
        let id = (unix_ms << 16) | 0xbeef;
        let parts = MASTODON.decode(id).unwrap();
        assert_eq!((MASTODON.unix_ms(parts.time_part), parts.seq), (unix_ms, 0xbeef));
        // Twitter's first tweet ID of 2010-11-04 era: time part 1 ms after twepoch is 1 << 22.
        let twitter = named_layout("twitter").unwrap();
        assert_eq!(twitter.decode(1 << 22), Ok(Parts { time_part: 1, shard: 0, seq: 0 }));
    }

    #[test]
    fn compose_and_decode_are_inverse_at_the_edges() {
        for layout in [
            TWITTER,
            INSTAGRAM,
            MASTODON,
            Layout::new(0, 0, 22),
            Layout::new(0, MAX_SHARD_BITS, 6),
            named_layout("js53").unwrap(),
            Layout::new_narrow(0, 0, 15, 53),
        ] {
            for time_part in [0, 1, 12_345_678_901, layout.max_time_part()] {
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
        for layout in [TWITTER, INSTAGRAM, MASTODON] {
            assert_eq!(layout.max_id(layout.max_time_part()), i64::MAX);
        }
        assert_eq!(TWITTER.min_id(0), 0);
    }

    #[test]
    fn known_id_matches_the_twitter_arithmetic() {
        // 1 ms after the epoch, shard 3, seq 5: (1 << 22) | (3 << 12) | 5.
        let id = TWITTER.compose(Parts { time_part: 1, shard: 3, seq: 5 });
        assert_eq!(id, 4_194_304 + 12_288 + 5);
    }

    #[test]
    fn js53_keeps_every_id_a_double_holds_exactly() {
        let js53 = named_layout("js53").unwrap();
        assert_eq!((js53.id_bits(), js53.time_bits(), js53.shard_bits(), js53.seq_bits()), (53, 41, 6, 6));
        assert_eq!((js53.max_shard(), js53.ids_per_ms()), (63, 64));
        assert_eq!(js53.epoch_unix_ms(), DEFAULT_EPOCH_UNIX_MS);
        // JavaScript's Number.MAX_SAFE_INTEGER, and every ID up to it survives a double.
        assert_eq!(js53.largest_id(), 9_007_199_254_740_991);
        assert_eq!(js53.largest_id(), MAX_SAFE_INTEGER);
        assert!(js53.ids_fit_a_double());
        assert!(!Layout::default().ids_fit_a_double());
        assert!(!Layout::new_narrow(0, 6, 6, 54).ids_fit_a_double());
        assert_eq!(js53.max_id(js53.max_time_part()), js53.largest_id());
        let last = js53.max_id(js53.max_time_part());
        assert_eq!(last as f64 as i64, last);
        // It lasts as long as the default layout: 41 bits of ms from 2024, to 2093.
        assert_eq!(js53.last_unix_ms(), Layout::default().last_unix_ms());
        // An ID wider than the layout is refused, not decoded into a time past its end.
        assert_eq!(js53.decode(last + 1), Err(LayoutError::AboveLayout { id: last + 1, max_id: last }));
        assert_eq!(js53.decode(last), Ok(Parts { time_part: js53.max_time_part(), shard: 63, seq: 63 }));
    }

    #[test]
    fn a_narrow_layout_must_keep_53_bits_and_8_years_of_time() {
        assert_eq!(Layout::try_new_narrow(0, 6, 6, 53), Ok(Layout::new_narrow(0, 6, 6, 53)));
        assert_eq!(Layout::try_new_narrow(0, 6, 6, 52), Err(SplitError::IdBits { id_bits: 52 }));
        assert_eq!(Layout::try_new_narrow(0, 6, 6, 64), Err(SplitError::IdBits { id_bits: 64 }));
        assert_eq!(Layout::try_new_narrow(0, 8, 8, 53), Err(SplitError::TimeBits { time_bits: 37 }));
        assert_eq!(Layout::try_new_narrow(0, 10, 12, 63), Ok(Layout::new(0, 10, 12)));
        // The 63-bit constructor is the narrow one at 63.
        assert_eq!(Layout::new(0, 10, 12), Layout::new_narrow(0, 10, 12, ID_BITS));
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
        assert_eq!(INSTAGRAM.check_seq(1023), Ok(1023));
        assert!(INSTAGRAM.check_seq(1024).is_err());
        assert!(TWITTER.check_seq(-5).is_err());
    }

    #[test]
    fn time_part_is_refused_outside_the_time_bits() {
        let epoch = TWITTER.epoch_unix_ms();
        assert_eq!(TWITTER.time_part(epoch), Ok(0));
        assert_eq!(TWITTER.time_part(epoch + 1500), Ok(1500));
        assert!(matches!(TWITTER.time_part(epoch - 1), Err(LayoutError::BeforeEpoch { .. })));
        assert_eq!(TWITTER.time_part(TWITTER.last_unix_ms()), Ok((1 << 41) - 1));
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
