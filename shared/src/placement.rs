//! The mission's placement rule, kept as the reference the default two-cell placement map
//! ([`crate::placement_map`]) must reproduce: the parity of the UUID's first hex digit.

use serde::{Deserialize, Serialize};

/// A worker shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum Shard {
    /// Owns UUIDs whose first hex digit is even.
    A,
    /// Owns UUIDs whose first hex digit is odd.
    B,
}

/// The shard owning `uuid`: parity of its first hex digit. A UUID that does
/// not start with a hex digit (never registered with JIA) goes to A, which is
/// also what nginx's default route does.
pub fn shard_of(uuid: &str) -> Shard {
    let digit = uuid.as_bytes().first().and_then(|byte| (*byte as char).to_digit(16));
    match digit {
        Some(value) if value % 2 == 1 => Shard::B,
        _ => Shard::A,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parity_of_first_hex_digit() {
        for (prefix, shard) in [
            ('0', Shard::A),
            ('1', Shard::B),
            ('8', Shard::A),
            ('9', Shard::B),
            ('a', Shard::A),
            ('b', Shard::B),
            ('A', Shard::A),
            ('F', Shard::B),
            ('f', Shard::B),
            ('e', Shard::A),
        ] {
            assert_eq!(
                shard_of(&format!("{prefix}b104b95-3532-4828-8550-89da717b9667")),
                shard,
                "{prefix}"
            );
        }
    }

    #[test]
    fn odd_inputs_fall_back_to_a() {
        assert_eq!(shard_of(""), Shard::A);
        assert_eq!(shard_of("zzz"), Shard::A);
        assert_eq!(shard_of("é"), Shard::A);
    }
}
