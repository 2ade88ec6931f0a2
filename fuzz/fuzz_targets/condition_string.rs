//! Fuzz target: the condition string parser (`shared::domain::parse_condition`).
//! A string parses exactly when it is one of the eight valid strings, and then the
//! flags rebuild the same bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shared::domain::{parse_condition, Flags};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let is_valid = (0..8u8).any(|bits| Flags(bits << 1).condition_string() == text);
    match parse_condition(text) {
        Some(bits) => {
            assert!(is_valid, "accepted {text:?}");
            assert_eq!(bits & !(Flags::DIRTY | Flags::OVERWEIGHT | Flags::BROKEN), 0);
            assert_eq!(Flags::new(false, bits).condition_string(), text);
        }
        None => assert!(!is_valid, "refused {text:?}"),
    }
});
