//! Graph maths: hour alignment and the data point of one hour (integer, truncating division).

use serde::Serialize;

use crate::domain::Flags;

pub const HOUR: i64 = 3600;
/// A graph always has this many hourly points.
pub const GRAPH_HOURS: usize = 24;

/// Start of the hour containing `timestamp` (floor, also for negative values).
pub fn hour_of(timestamp: i64) -> i64 {
    timestamp.div_euclid(HOUR) * HOUR
}

/// Running totals of the conditions of one hour.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HourTotals {
    pub count: i64,
    raw_points: i64,
    sitting: i64,
    dirty: i64,
    overweight: i64,
    broken: i64,
}

impl HourTotals {
    pub fn add(&mut self, flags: Flags) {
        self.count += 1;
        self.raw_points += match flags.bad_count() {
            0 => 3,
            3 => 1,
            _ => 2,
        };
        self.sitting += i64::from(flags.is_sitting());
        self.dirty += i64::from(flags.is_dirty());
        self.overweight += i64::from(flags.is_overweight());
        self.broken += i64::from(flags.is_broken());
    }

    /// The hour's data point, or `None` when no condition was added.
    pub fn data_point(&self) -> Option<DataPoint> {
        let n = self.count;
        if n == 0 {
            return None;
        }
        Some(DataPoint {
            // Two truncating divisions, in this order, as the contract requires.
            score: self.raw_points * 100 / 3 / n,
            percentage: Percentage {
                sitting: self.sitting * 100 / n,
                is_broken: self.broken * 100 / n,
                is_dirty: self.dirty * 100 / n,
                is_overweight: self.overweight * 100 / n,
            },
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DataPoint {
    pub score: i64,
    pub percentage: Percentage,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Percentage {
    pub sitting: i64,
    pub is_broken: i64,
    pub is_dirty: i64,
    pub is_overweight: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{parse_condition, Flags};

    fn flags(sitting: bool, condition: &str) -> Flags {
        Flags::new(sitting, parse_condition(condition).unwrap())
    }

    #[test]
    fn hours_are_floored() {
        assert_eq!(hour_of(7200), 7200);
        assert_eq!(hour_of(7199), 3600);
        assert_eq!(hour_of(1628348400 + 59), 1628348400);
        assert_eq!(hour_of(-1), -3600);
        assert_eq!(hour_of(-3600), -3600);
    }

    #[test]
    fn worked_example_of_the_contract() {
        let mut totals = HourTotals::default();
        totals.add(flags(true, "is_dirty=false,is_overweight=false,is_broken=false"));
        totals.add(flags(true, "is_dirty=true,is_overweight=false,is_broken=false"));
        totals.add(flags(false, "is_dirty=true,is_overweight=true,is_broken=true"));
        let point = totals.data_point().unwrap();
        assert_eq!(point.score, 66);
        assert_eq!(point.percentage.sitting, 66);
        assert_eq!(point.percentage.is_dirty, 66);
        assert_eq!(point.percentage.is_overweight, 33);
        assert_eq!(point.percentage.is_broken, 33);
    }

    #[test]
    fn mixed_hour_truncates_every_division() {
        // raw = 4*2 + 3*3 = 17 over n = 7: 1700/3 = 566, 566/7 = 80.
        let mut totals = HourTotals::default();
        for _ in 0..4 {
            totals.add(flags(false, "is_dirty=true,is_overweight=false,is_broken=false"));
        }
        for _ in 0..3 {
            totals.add(flags(true, "is_dirty=false,is_overweight=false,is_broken=false"));
        }
        let point = totals.data_point().unwrap();
        assert_eq!(point.score, 80);
        assert_eq!(point.percentage.sitting, 42);
        assert_eq!(point.percentage.is_dirty, 57);
    }

    #[test]
    fn all_critical_and_all_info() {
        let mut worst = HourTotals::default();
        worst.add(flags(false, "is_dirty=true,is_overweight=true,is_broken=true"));
        assert_eq!(worst.data_point().unwrap().score, 33);
        let mut best = HourTotals::default();
        best.add(flags(true, "is_dirty=false,is_overweight=false,is_broken=false"));
        assert_eq!(best.data_point().unwrap().score, 100);
        assert_eq!(best.data_point().unwrap().percentage.sitting, 100);
    }

    #[test]
    fn empty_hour_has_no_data_point() {
        assert_eq!(HourTotals::default().data_point(), None);
    }
}
