//! Device condition batches (`POST /api/condition/:uuid`, contract §7): decoding and
//! validation as pure functions, with the limits that keep one request bounded.
//!
//! A batch is handled in two steps so that the contract's order holds: [`decode_batch`]
//! (undecodable, empty or oversized bodies), then the caller's unknown-ISU check (404),
//! then [`validate_batch`] (any invalid element rejects the whole batch).

use std::borrow::Cow;

use serde::Deserialize;

use crate::domain::{parse_condition, Flags};

/// Largest request body of a condition post, in bytes. The bench's batches (at most
/// 10 conditions) are about 1.3 KiB; [`MAX_CONDITIONS_PER_BATCH`] conditions with
/// [`MAX_MESSAGE_CHARS`]-character messages of 4-byte characters still fit.
pub const CONDITION_BODY_LIMIT: usize = 2 << 20;

/// Most conditions one batch may carry (the bench sends at most 10). A batch is stored
/// under one lock of its ISU, so this also bounds how long a post can hold that lock.
pub const MAX_CONDITIONS_PER_BATCH: usize = 1_000;

/// Longest `message`, in characters: the reference stores it in a `VARCHAR(255)`
/// (utf8mb4 counts characters) and fails the whole batch on a longer one.
pub const MAX_MESSAGE_CHARS: usize = 255;

/// One element of a batch as the device sent it; borrows from the request body.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PostedCondition<'a> {
    pub is_sitting: bool,
    #[serde(borrow)]
    pub condition: Cow<'a, str>,
    #[serde(borrow)]
    pub message: Cow<'a, str>,
    pub timestamp: i64,
}

/// A validated element: its flags (condition string parsed) and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidCondition<'a> {
    pub timestamp: i64,
    pub flags: Flags,
    pub message: &'a str,
}

/// Why a batch is refused. Every variant refuses the whole batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// Not a JSON array of condition objects with the four fields and their types (400).
    #[error("the body is not a JSON array of conditions")]
    Undecodable,
    /// `[]` (400, as the reference).
    #[error("the batch is empty")]
    Empty,
    /// More than [`MAX_CONDITIONS_PER_BATCH`] elements (413).
    #[error("more than {MAX_CONDITIONS_PER_BATCH} conditions in one batch")]
    TooManyConditions,
    /// A `condition` string that is not exactly `is_dirty=..,is_overweight=..,is_broken=..` (400).
    #[error("an invalid condition string")]
    InvalidCondition,
    /// A `message` longer than [`MAX_MESSAGE_CHARS`] characters (400).
    #[error("a message longer than {MAX_MESSAGE_CHARS} characters")]
    MessageTooLong,
}

thread_local! {
    /// simd-json's working buffers, kept per thread: a fresh set is four allocations (and a
    /// reallocation of the structural indexes) on every device post. They grow to the
    /// largest body a thread decoded, at most the body limit.
    static DECODE_BUFFERS: std::cell::RefCell<simd_json::Buffers> =
        std::cell::RefCell::new(simd_json::Buffers::new(4096));
}

/// Decodes a batch in place (simd-json rewrites the buffer; strings borrow from it).
pub fn decode_batch(body: &mut [u8]) -> Result<Vec<PostedCondition<'_>>, BatchError> {
    let posted: Vec<PostedCondition<'_>> = DECODE_BUFFERS
        .with_borrow_mut(|buffers| simd_json::serde::from_slice_with_buffers(body, buffers))
        .map_err(|_| BatchError::Undecodable)?;
    if posted.is_empty() {
        return Err(BatchError::Empty);
    }
    if posted.len() > MAX_CONDITIONS_PER_BATCH {
        return Err(BatchError::TooManyConditions);
    }
    Ok(posted)
}

/// Validates every element; one invalid element refuses the batch.
pub fn validate_batch<'a>(posted: &'a [PostedCondition<'_>]) -> Result<Vec<ValidCondition<'a>>, BatchError> {
    posted
        .iter()
        .map(|condition| {
            let bits = parse_condition(&condition.condition).ok_or(BatchError::InvalidCondition)?;
            // Cheap byte test first: a message of at most this many bytes cannot have more characters.
            if condition.message.len() > MAX_MESSAGE_CHARS && condition.message.chars().count() > MAX_MESSAGE_CHARS {
                return Err(BatchError::MessageTooLong);
            }
            Ok(ValidCondition {
                timestamp: condition.timestamp,
                flags: Flags::new(condition.is_sitting, bits),
                message: &condition.message,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Level;

    const INFO: &str = "is_dirty=false,is_overweight=false,is_broken=false";

    fn item(condition: &str, message: &str) -> String {
        serde_json::json!({"is_sitting": true, "condition": condition, "message": message, "timestamp": 7}).to_string()
    }

    fn decode_and_validate(body: &str) -> Result<usize, BatchError> {
        let mut buffer = body.as_bytes().to_vec();
        let posted = decode_batch(&mut buffer)?;
        Ok(validate_batch(&posted)?.len())
    }

    #[test]
    fn a_valid_batch_keeps_every_field() {
        let mut body = format!(
            "[{},{}]",
            item(INFO, "ok"),
            item("is_dirty=true,is_overweight=true,is_broken=true", "")
        )
        .into_bytes();
        let posted = decode_batch(&mut body).unwrap();
        let valid = validate_batch(&posted).unwrap();
        assert_eq!(valid.len(), 2);
        assert_eq!((valid[0].timestamp, valid[0].message), (7, "ok"));
        assert!(valid[0].flags.is_sitting());
        assert_eq!(valid[0].flags.level(), Level::Info);
        assert_eq!(valid[1].flags.level(), Level::Critical);
    }

    #[test]
    fn refusals_name_their_reason() {
        assert_eq!(decode_and_validate("[]"), Err(BatchError::Empty));
        assert_eq!(decode_and_validate("{}"), Err(BatchError::Undecodable));
        assert_eq!(decode_and_validate(""), Err(BatchError::Undecodable));
        assert_eq!(
            decode_and_validate(r#"[{"is_sitting":1,"condition":"","message":"","timestamp":1}]"#),
            Err(BatchError::Undecodable)
        );
        assert_eq!(
            decode_and_validate(&format!("[{},{}]", item(INFO, ""), item("is_dirty=true", ""))),
            Err(BatchError::InvalidCondition)
        );
        let many = vec![item(INFO, "m"); MAX_CONDITIONS_PER_BATCH + 1].join(",");
        assert_eq!(
            decode_and_validate(&format!("[{many}]")),
            Err(BatchError::TooManyConditions)
        );
        let most = vec![item(INFO, "m"); MAX_CONDITIONS_PER_BATCH].join(",");
        assert_eq!(decode_and_validate(&format!("[{most}]")), Ok(MAX_CONDITIONS_PER_BATCH));
    }

    #[test]
    fn messages_are_limited_in_characters_not_bytes() {
        let longest = "椅".repeat(MAX_MESSAGE_CHARS);
        assert_eq!(decode_and_validate(&format!("[{}]", item(INFO, &longest))), Ok(1));
        let too_long = "a".repeat(MAX_MESSAGE_CHARS + 1);
        assert_eq!(
            decode_and_validate(&format!("[{}]", item(INFO, &too_long))),
            Err(BatchError::MessageTooLong)
        );
    }

    #[test]
    fn the_largest_allowed_batch_fits_the_body_limit() {
        let message = "𝄞".repeat(MAX_MESSAGE_CHARS);
        let body = format!("[{}]", vec![item(INFO, &message); MAX_CONDITIONS_PER_BATCH].join(","));
        assert!(body.len() <= CONDITION_BODY_LIMIT, "{} bytes", body.len());
    }
}
