//! The project's own deterministic default dataset (placeholder until filled).

use super::Dataset;

pub fn generate() -> Dataset {
    Dataset::default()
}
