//! The bench's own model of the domain: characters, sent conditions and levels (the JIA
//! simulator's, [`jia_sim::condition`], re-exported here) and the graph maths.
//!
//! Deliberately independent of the `shared` crate's maths: the validator recomputes every
//! expectation here, so a bug in the nodes' shared code cannot hide from the bench.

pub use jia_sim::condition::{
    character_for_uuid, condition_string, is_valid_condition_string, stable_hash, Level, SentCondition, CHARACTERS,
};
use serde::{Deserialize, Serialize};

/// A graph data point (`data` of one hour, §9.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphData {
    pub score: i64,
    pub percentage: GraphPercentage,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphPercentage {
    pub sitting: i64,
    pub is_broken: i64,
    pub is_dirty: i64,
    pub is_overweight: i64,
}

/// Expected `data` for the conditions of one hour; `None` when there are none.
pub fn expected_graph_data(conditions: &[SentCondition]) -> Option<GraphData> {
    if conditions.is_empty() {
        return None;
    }
    let count = conditions.len() as i64;
    let points: i64 = conditions
        .iter()
        .map(|condition| match condition.level() {
            Level::Info => 3,
            Level::Warning => 2,
            Level::Critical => 1,
        })
        .sum();
    let percent = |predicate: fn(&SentCondition) -> bool| {
        conditions.iter().filter(|condition| predicate(condition)).count() as i64 * 100 / count
    };
    Some(GraphData {
        // Two truncating divisions, in this order, as the contract prescribes.
        score: points * 100 / 3 / count,
        percentage: GraphPercentage {
            sitting: percent(|condition| condition.is_sitting),
            is_broken: percent(SentCondition::is_broken),
            is_dirty: percent(SentCondition::is_dirty),
            is_overweight: percent(SentCondition::is_overweight),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(is_sitting: bool, condition: &'static str) -> SentCondition {
        SentCondition {
            is_sitting,
            condition,
            message: "",
            timestamp: 0,
        }
    }

    #[test]
    fn graph_data_matches_the_worked_example_of_the_contract() {
        let conditions = [
            sent(true, condition_string(false, false, false)),
            sent(true, condition_string(true, false, false)),
            sent(false, condition_string(true, true, true)),
        ];
        let data = expected_graph_data(&conditions).unwrap();
        assert_eq!(data.score, 66);
        assert_eq!(
            data.percentage,
            GraphPercentage {
                sitting: 66,
                is_broken: 33,
                is_dirty: 66,
                is_overweight: 33
            }
        );
        assert_eq!(expected_graph_data(&[]), None);
    }
}
