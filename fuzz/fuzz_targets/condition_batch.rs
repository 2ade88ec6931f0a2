//! Fuzz target: a device's condition batch, decoded (simd-json, in place) and validated
//! exactly as the worker does for `POST /api/condition/:uuid` (`shared::ingest`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use shared::domain::parse_condition;
use shared::ingest::{decode_batch, validate_batch, MAX_CONDITIONS_PER_BATCH, MAX_MESSAGE_CHARS};

fuzz_target!(|data: &[u8]| {
    let mut body = data.to_vec();
    let Ok(posted) = decode_batch(&mut body) else {
        return;
    };
    assert!(!posted.is_empty() && posted.len() <= MAX_CONDITIONS_PER_BATCH);
    let Ok(valid) = validate_batch(&posted) else {
        return;
    };
    assert_eq!(valid.len(), posted.len());
    for (condition, original) in valid.iter().zip(&posted) {
        // What is stored rebuilds the posted condition string byte for byte.
        assert_eq!(condition.flags.condition_string(), original.condition);
        assert_eq!(
            parse_condition(&original.condition).map(|bits| bits | u8::from(original.is_sitting)),
            Some(condition.flags.0)
        );
        assert_eq!(condition.message, original.message);
        assert!(condition.message.chars().count() <= MAX_MESSAGE_CHARS);
        assert_eq!(condition.timestamp, original.timestamp);
    }
});
