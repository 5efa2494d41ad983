//! A small PRNG of our own (no new dependency): splitmix64 to spread a seed over the state,
//! xoshiro256** to draw. Identical on every platform, so a seed is a run, byte for byte.

/// One step of splitmix64: also how a seed becomes a state, and how a base becomes seeds.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A random base for the seeds: the kernel's, else the time (the drivers only, never a run).
pub fn random_base() -> u64 {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    if std::fs::File::open("/dev/urandom").and_then(|mut file| file.read_exact(&mut bytes)).is_ok() {
        return u64::from_le_bytes(bytes) >> 1;
    }
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    (nanos as u64) >> 1
}

/// xoshiro256**.
#[derive(Clone)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// `stream` separates independent draws of one seed (the configuration, the schedule, the
    /// background): removing an event while shrinking must not change the configuration.
    pub fn new(seed: u64, stream: u64) -> Self {
        let mut state = seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03);
        let s =
            [splitmix64(&mut state), splitmix64(&mut state), splitmix64(&mut state), splitmix64(&mut state)];
        Rng { s }
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in `0..n` (0 when `n` is 0), by multiply-shift: no modulo bias worth a thought
    /// at these ranges.
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// An index drawn by weight.
    pub fn weighted(&mut self, weights: &[u64]) -> usize {
        let mut draw = self.below(weights.iter().sum());
        for (index, &weight) in weights.iter().enumerate() {
            if draw < weight {
                return index;
            }
            draw -= weight;
        }
        weights.len() - 1
    }
}
