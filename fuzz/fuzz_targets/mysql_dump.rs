//! Fuzz target: the MySQL dump importer (`shared::dataset::mysql::import`). Any input is
//! an error or a dataset; a dataset has ISUs in strictly increasing id order with unique
//! UUIDs, each with its conditions sorted by timestamp.

#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(dataset) = shared::dataset::mysql::import(data) else {
        return;
    };
    assert!(dataset.isus.windows(2).all(|pair| pair[0].id < pair[1].id));
    let uuids: HashSet<&str> = dataset.isus.iter().map(|isu| isu.uuid.as_str()).collect();
    assert_eq!(uuids.len(), dataset.isus.len());
    let users: HashSet<&str> = dataset.users.iter().map(String::as_str).collect();
    assert_eq!(users.len(), dataset.users.len());
    for isu in &dataset.isus {
        assert!(isu
            .conditions
            .windows(2)
            .all(|pair| pair[0].timestamp <= pair[1].timestamp));
        for condition in &isu.conditions {
            assert_eq!(condition.flags.0 & !15, 0);
        }
    }
});
