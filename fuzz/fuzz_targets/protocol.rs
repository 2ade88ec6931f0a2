//! Fuzz target: the inter-node protocol decoder (`shared::protocol` messages as JSON, as
//! the internal routes decode them, and the binary latest batch). Whatever decodes encodes
//! again to a message that decodes to the same value.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;
use serde::Serialize;
use shared::protocol::{
    Health, LatestBatch, ProvisionalIsu, PublishIsu, ResetShard, RollbackIsu, UserSync, WireCondition,
};

/// Decodes `data` as `T`; if it decodes, the re-encoded message decodes to an equal JSON value.
fn round_trip<T: Serialize + DeserializeOwned>(data: &[u8]) {
    let Ok(message) = serde_json::from_slice::<T>(data) else {
        return;
    };
    let encoded = serde_json::to_vec(&message).expect("a decoded message encodes");
    let again: T = serde_json::from_slice(&encoded).expect("an encoded message decodes");
    assert_eq!(
        serde_json::to_value(&message).expect("to a value"),
        serde_json::to_value(&again).expect("to a value")
    );
}

fuzz_target!(|data: &[u8]| {
    round_trip::<ResetShard>(data);
    round_trip::<UserSync>(data);
    round_trip::<ProvisionalIsu>(data);
    round_trip::<PublishIsu>(data);
    round_trip::<RollbackIsu>(data);
    round_trip::<LatestBatch>(data);
    round_trip::<Health>(data);
    // The binary latest batch: whatever decodes encodes to exactly the same bytes.
    if let Ok((generation, items)) = shared::protocol::decode_latest(data) {
        assert_eq!(shared::protocol::encode_latest(generation, items), data);
    }
    if let Ok(condition) = serde_json::from_slice::<WireCondition>(data) {
        // Decoded flags never carry bits that would make the level disagree with the string.
        assert_eq!(condition.flags.0 & !15, 0);
    }
});
