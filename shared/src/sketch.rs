//! Per-ISU counting in fixed memory: a count-min sketch with conservative update, and two
//! of them alternating over fixed windows (`docs/cells.md`, "Inside a cell: quota and lanes").
//!
//! A count-min sketch keeps `rows` rows of `width` counters; a key adds to one counter per
//! row (chosen by hashing) and its estimate is the smallest of them. It never underestimates,
//! and overestimates by more than `ε·N` (N: the total counted) with probability at most `δ`
//! for `width = ⌈e/ε⌉` and `rows = ⌈ln(1/δ)⌉`. Conservative update raises each of the key's
//! counters only as far as its new estimate, which keeps the error well under that bound.
//! Updates of one key are serialized by a striped lock (two concurrent updates of the same
//! key would otherwise both raise from the same minimum and lose one of them).

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Stripes of the update lock (a power of two).
const STRIPES: usize = 64;

/// A count-min sketch of `u32` counters (saturating), safe to share between threads.
pub struct CountMinSketch {
    rows: usize,
    /// `width - 1`; the width is a power of two.
    mask: u64,
    counters: Box<[AtomicU32]>,
    stripes: Box<[Mutex<()>]>,
    hasher: std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>,
    seed: u64,
}

impl CountMinSketch {
    /// `rows` rows of `width` counters (`width` rounded up to a power of two).
    pub fn new(rows: usize, width: usize, seed: u64) -> CountMinSketch {
        let rows = rows.max(1);
        let width = width.max(2).next_power_of_two();
        CountMinSketch {
            rows,
            mask: width as u64 - 1,
            counters: (0..rows * width).map(|_| AtomicU32::new(0)).collect(),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            hasher: Default::default(),
            seed,
        }
    }

    /// The sketch for error `epsilon` (relative to the total counted) with probability
    /// `1 - delta`: ε = 0.00005, δ = 0.00001 gives 12 rows of 65,536 counters.
    pub fn for_error(epsilon: f64, delta: f64, seed: u64) -> CountMinSketch {
        let width = (std::f64::consts::E / epsilon).ceil() as usize;
        let rows = (1.0 / delta).ln().ceil() as usize;
        CountMinSketch::new(rows, width, seed)
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn width(&self) -> usize {
        self.mask as usize + 1
    }

    /// Bytes of counters.
    pub fn memory(&self) -> usize {
        self.counters.len() * std::mem::size_of::<AtomicU32>()
    }

    /// Two independent 64-bit hashes of `key` (double hashing gives every row's index); the
    /// same for every sketch of the same seed and width.
    fn hashes(&self, key: &[u8]) -> (u64, u64) {
        let mut first = self.hasher.build_hasher();
        first.write_u64(self.seed);
        first.write(key);
        let h1 = first.finish();
        let mut second = self.hasher.build_hasher();
        second.write_u64(self.seed ^ 0x9e37_79b9_7f4a_7c15);
        second.write(key);
        // Odd, so the rows' indexes differ whenever h1 collides.
        (h1, second.finish() | 1)
    }

    fn slot(&self, row: usize, hashes: (u64, u64)) -> &AtomicU32 {
        let column = hashes.0.wrapping_add((row as u64).wrapping_mul(hashes.1)) & self.mask;
        &self.counters[row * self.width() + column as usize]
    }

    fn min_of(&self, hashes: (u64, u64)) -> u32 {
        (0..self.rows)
            .map(|row| self.slot(row, hashes).load(Ordering::Relaxed))
            .min()
            .unwrap_or(0)
    }

    /// The estimated count of `key`: never below its true count.
    pub fn estimate(&self, key: &[u8]) -> u32 {
        self.min_of(self.hashes(key))
    }

    /// Counts `count` more for `key` (conservative update); its new estimate.
    pub fn add(&self, key: &[u8], count: u32) -> u32 {
        self.add_hashed(self.hashes(key), count)
    }

    fn add_hashed(&self, hashes: (u64, u64), count: u32) -> u32 {
        let _serialized = self.stripes[hashes.0 as usize & (STRIPES - 1)]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let target = self.min_of(hashes).saturating_add(count);
        for row in 0..self.rows {
            self.slot(row, hashes).fetch_max(target, Ordering::Relaxed);
        }
        target
    }

    /// Every counter back to zero.
    pub fn clear(&self) {
        for counter in self.counters.iter() {
            counter.store(0, Ordering::Relaxed);
        }
    }
}

/// Two sketches alternating over windows of `window`: counts go to the current one; at
/// each window's end the older one is cleared and becomes current. A key's rate is judged
/// over the current and the previous window, so memory stays fixed and a key that was over
/// its quota a moment ago is still seen as such just after a boundary.
pub struct WindowedSketch {
    /// Twins (same seed and size), so a key is hashed once for both.
    sketches: [CountMinSketch; 2],
    current: AtomicUsize,
    window: Duration,
    started: Mutex<Instant>,
}

impl WindowedSketch {
    /// `sketch` and an empty twin of it (same seed and size) alternating every `window`.
    pub fn new(window: Duration, sketch: CountMinSketch) -> WindowedSketch {
        let twin = CountMinSketch::new(sketch.rows, sketch.width(), sketch.seed);
        WindowedSketch {
            sketches: [sketch, twin],
            current: AtomicUsize::new(0),
            window,
            started: Mutex::new(Instant::now()),
        }
    }

    /// Counts `count` for `key` in the current window; the larger of its estimate there and
    /// in the previous window.
    pub fn add(&self, key: &[u8], count: u32) -> u32 {
        let current = self.current.load(Ordering::Acquire);
        let hashes = self.sketches[current].hashes(key);
        let now = self.sketches[current].add_hashed(hashes, count);
        now.max(self.sketches[1 - current].min_of(hashes))
    }

    /// The larger of `key`'s estimates in the two windows, counting nothing.
    pub fn estimate(&self, key: &[u8]) -> u32 {
        let hashes = self.sketches[0].hashes(key);
        self.sketches[0].min_of(hashes).max(self.sketches[1].min_of(hashes))
    }

    /// Starts a new window if the current one is over (`now` past its end): the previous
    /// window's counts are dropped. Returns whether it rotated.
    pub fn rotate_if_due(&self, now: Instant) -> bool {
        let mut started = self.started.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if now.saturating_duration_since(*started) < self.window {
            return false;
        }
        let current = self.current.load(Ordering::Acquire);
        self.sketches[1 - current].clear();
        self.current.store(1 - current, Ordering::Release);
        *started = now;
        true
    }

    /// Both windows emptied (a reset).
    pub fn clear(&self) {
        for sketch in &self.sketches {
            sketch.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issue_s_error_bounds_give_twelve_rows_of_65536() {
        let sketch = CountMinSketch::for_error(0.00005, 0.00001, 7);
        assert_eq!((sketch.rows(), sketch.width()), (12, 65_536));
        assert_eq!(sketch.memory(), 12 * 65_536 * 4);
    }

    #[test]
    fn counts_add_up_and_clear_empties() {
        let sketch = CountMinSketch::new(4, 1024, 1);
        assert_eq!(sketch.add(b"a", 5), 5);
        assert_eq!(sketch.add(b"a", 7), 12);
        assert_eq!(sketch.estimate(b"a"), 12);
        assert_eq!(sketch.estimate(b"b"), 0);
        sketch.clear();
        assert_eq!(sketch.estimate(b"a"), 0);
    }

    #[test]
    fn windows_keep_the_previous_count_for_one_window_then_drop_it() {
        let windows = WindowedSketch::new(Duration::from_secs(10), CountMinSketch::new(4, 1024, 5));
        let start = Instant::now();
        assert_eq!(windows.add(b"isu", 100), 100);
        assert!(!windows.rotate_if_due(start));
        assert!(windows.rotate_if_due(start + Duration::from_secs(11)));
        // The new window counts from zero, but the last one still speaks.
        assert_eq!(windows.add(b"isu", 1), 100);
        assert!(windows.rotate_if_due(start + Duration::from_secs(22)));
        // Two windows on, the 100 is forgotten: 1 here, 1 in the window before.
        assert_eq!(windows.add(b"isu", 1), 1);
        assert_eq!(windows.estimate(b"isu"), 1);
    }

    #[test]
    fn concurrent_updates_of_one_key_lose_nothing() {
        let sketch = std::sync::Arc::new(CountMinSketch::new(12, 65_536, 3));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let sketch = sketch.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        sketch.add(b"flooding-isu", 1);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(sketch.estimate(b"flooding-isu"), 40_000);
    }
}
