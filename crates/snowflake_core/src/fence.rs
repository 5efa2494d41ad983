//! The shard fence: which shards one server may issue IDs for.
//!
//! The shard is an argument of every generator, so nothing but a fence stops a second server
//! from issuing a shard that another server owns (a copied `DEFAULT snowflake_nextval(7)`, a
//! restored dump). The extension reads it from `snowflake_id.shards`: a list of shard numbers
//! and ranges such as `0-5,9`; empty means every shard (no fence), `none` means no shard.

use std::fmt;

/// A set of shard numbers, as one bit per shard up to the largest named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardFence {
    /// No fence: every shard of the layout may be issued.
    Open,
    /// Only these shards (possibly none).
    Only(Vec<u64>),
}

impl ShardFence {
    /// Parses a setting's text; every number must lie in `0..=max_shard`. Ranges are
    /// inclusive (`3-5` is 3, 4 and 5); spaces around items are allowed.
    pub fn parse(text: &str, max_shard: u32) -> Result<ShardFence, String> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(ShardFence::Open);
        }
        let mut bits = Vec::new();
        if text.eq_ignore_ascii_case("none") {
            return Ok(ShardFence::Only(bits));
        }
        for item in text.split(',') {
            let item = item.trim();
            let (low, high) = match item.split_once('-') {
                Some((low, high)) => (parse_shard(low, max_shard)?, parse_shard(high, max_shard)?),
                None => {
                    let shard = parse_shard(item, max_shard)?;
                    (shard, shard)
                }
            };
            if low > high {
                return Err(format!("The range \"{item}\" runs backwards."));
            }
            for shard in low..=high {
                let word = shard as usize / 64;
                if bits.len() <= word {
                    bits.resize(word + 1, 0);
                }
                bits[word] |= 1 << (shard % 64);
            }
        }
        Ok(ShardFence::Only(bits))
    }

    /// Whether `shard` may be issued.
    #[inline(always)]
    pub fn allows(&self, shard: u32) -> bool {
        match self {
            ShardFence::Open => true,
            ShardFence::Only(bits) => {
                bits.get(shard as usize / 64).is_some_and(|word| word & (1 << (shard % 64)) != 0)
            }
        }
    }
}

fn parse_shard(text: &str, max_shard: u32) -> Result<u32, String> {
    let text = text.trim();
    let shard: u32 = match text.parse() {
        Ok(shard) if text.bytes().all(|b| b.is_ascii_digit()) => shard,
        _ => {
            return Err(format!(
                "\"{text}\" is not a shard number: expected numbers and ranges such as 0-5,9."
            ))
        }
    };
    if shard > max_shard {
        return Err(format!("Shard {shard} is outside the layout, whose shards are 0 to {max_shard}."));
    }
    Ok(shard)
}

/// The canonical text: ranges merged, in order (`0-5,9`), `none`, or empty for no fence.
impl fmt::Display for ShardFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ShardFence::Only(bits) = self else { return Ok(()) };
        let shards: Vec<u32> = (0..bits.len() as u32 * 64).filter(|&s| self.allows(s)).collect();
        if shards.is_empty() {
            return f.write_str("none");
        }
        let mut ranges: Vec<(u32, u32)> = Vec::new();
        for shard in shards {
            match ranges.last_mut() {
                Some((_, high)) if *high + 1 == shard => *high = shard,
                _ => ranges.push((shard, shard)),
            }
        }
        let items: Vec<String> = ranges
            .iter()
            .map(|&(low, high)| if low == high { low.to_string() } else { format!("{low}-{high}") })
            .collect();
        f.write_str(&items.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_open_and_none_is_closed() {
        for text in ["", "  "] {
            let fence = ShardFence::parse(text, 1023).unwrap();
            assert_eq!(fence, ShardFence::Open);
            assert!(fence.allows(0) && fence.allows(1023));
        }
        let none = ShardFence::parse("none", 1023).unwrap();
        assert!((0..1024).all(|s| !none.allows(s)));
        assert_eq!(none.to_string(), "none");
    }

    #[test]
    fn lists_and_ranges_allow_exactly_what_they_name() {
        let fence = ShardFence::parse(" 0-5, 9 ,64,200-201", 1023).unwrap();
        let allowed: Vec<u32> = (0..1024).filter(|&s| fence.allows(s)).collect();
        assert_eq!(allowed, [0, 1, 2, 3, 4, 5, 9, 64, 200, 201]);
        assert_eq!(fence.to_string(), "0-5,9,64,200-201");
        assert_eq!(ShardFence::parse("3,1,2", 7).unwrap().to_string(), "1-3");
    }

    #[test]
    fn bad_text_is_refused_with_the_reason() {
        for (text, reason) in [
            ("7,x", "is not a shard number"),
            ("-1", "is not a shard number"),
            ("5-3", "runs backwards"),
            ("1024", "outside the layout"),
            ("0-1024", "outside the layout"),
            ("1,,2", "is not a shard number"),
            ("+3", "is not a shard number"),
        ] {
            let error = ShardFence::parse(text, 1023).unwrap_err();
            assert!(error.contains(reason), "{text:?}: {error}");
        }
    }
}
