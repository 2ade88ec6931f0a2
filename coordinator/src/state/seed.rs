//! The dataset `/initialize` restores, held as what it takes to build it again rather than
//! as the data. The coordinator needs the dataset only while it builds a generation or a
//! worker's reset (the conditions go to the workers); between those, keeping it cost more
//! than the generation itself: about 690 bytes an ISU, 0.69 GB at a million ISUs. So a
//! generated dataset is generated again (it is deterministic), a dump is parsed again from
//! its bytes (read once at start: the file may change or go later), and every use at one
//! time shares one copy, dropped with the last of them.
//!
//! A leaf: it uses no other module of the coordinator.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use shared::dataset::{Dataset, DatasetIsu, DatasetSource};

/// The dataset, built again on each use.
pub struct Seed {
    source: Source,
    /// The copy in use, if any.
    in_use: Mutex<Weak<Dataset>>,
}

enum Source {
    /// `generated` or `generated:N`.
    Generated(DatasetSource),
    /// An official dump's bytes.
    Dump(Vec<u8>),
    /// Kept whole, as given (tests).
    #[cfg(test)]
    Held(Arc<Dataset>),
}

impl Seed {
    /// Reads `source`: a dump's bytes, parsed once to check them (a generated dataset is
    /// built when first used).
    pub fn open(source: &DatasetSource) -> anyhow::Result<Seed> {
        let source = match source {
            DatasetSource::MysqlDump(path) => {
                let bytes =
                    std::fs::read(path).map_err(|error| anyhow::anyhow!("reading {}: {error}", path.display()))?;
                shared::dataset::mysql::import(&bytes)?;
                Source::Dump(bytes)
            }
            generated => Source::Generated(generated.clone()),
        };
        Ok(Seed {
            source,
            in_use: Mutex::new(Weak::new()),
        })
    }

    /// A seed that keeps `dataset` as it is.
    #[cfg(test)]
    pub fn held(dataset: Dataset) -> Seed {
        Seed {
            source: Source::Held(Arc::new(dataset)),
            in_use: Mutex::new(Weak::new()),
        }
    }

    /// The dataset: the copy in use if there is one, else built again (blocking: seconds at
    /// a million ISUs; call it off the async threads).
    pub fn load(&self) -> Arc<Dataset> {
        let mut in_use = self.in_use.lock();
        if let Some(dataset) = in_use.upgrade() {
            return dataset;
        }
        // Built from the same source that loaded at start: generation is deterministic and
        // the dump's bytes are those that parsed then, so this cannot fail.
        let dataset = Arc::new(build(&self.source).expect("a dataset that loaded once loads again"));
        *in_use = Arc::downgrade(&dataset);
        dataset
    }
}

impl Seed {
    /// The dataset's ISUs handed to `each` one at a time, then its users (blocking, as
    /// [`Seed::load`]): the copy in use if there is one, else a generated dataset generated
    /// again without being held whole, so that what `each` keeps is not scattered among the
    /// dataset's freed pieces.
    pub fn each_isu(&self, mut each: impl FnMut(&DatasetIsu)) -> Vec<String> {
        if let Some(dataset) = self.in_use.lock().upgrade() {
            dataset.isus.iter().for_each(each);
            return dataset.users.clone();
        }
        match &self.source {
            Source::Generated(source) => source
                .each_isu(|isu| each(&isu))
                .expect("a dataset that loaded once loads again"),
            _ => {
                let dataset = self.load();
                dataset.isus.iter().for_each(each);
                dataset.users.clone()
            }
        }
    }
}

fn build(source: &Source) -> anyhow::Result<Dataset> {
    match source {
        Source::Generated(source) => source.load(),
        Source::Dump(bytes) => shared::dataset::mysql::import(bytes),
        #[cfg(test)]
        Source::Held(dataset) => Ok((**dataset).clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uses_at_one_time_share_a_copy_and_a_later_use_builds_the_same_again() {
        let seed = Seed::open(&DatasetSource::GeneratedWithIsus(100)).unwrap();
        let first = seed.load();
        let again = seed.load();
        assert!(Arc::ptr_eq(&first, &again), "one copy while it is in use");
        drop((first, again));
        assert!(seed.in_use.lock().upgrade().is_none(), "dropped with its last use");
        let rebuilt = seed.load();
        assert_eq!(*rebuilt, shared::dataset::generated::generate_with_isu_count(100));
    }

    #[test]
    fn a_dump_is_parsed_again_from_the_bytes_read_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1_InitData.sql");
        let dump = "INSERT INTO `user` VALUES ('alice','2021-01-01 00:00:00.000000');\n";
        std::fs::write(&path, dump).unwrap();
        let seed = Seed::open(&DatasetSource::MysqlDump(path.clone())).unwrap();
        let users = seed.load().users.clone();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(seed.load().users, users, "the file is no longer needed");
        assert!(
            Seed::open(&DatasetSource::MysqlDump(path.clone())).is_err(),
            "a missing dump is an error at start"
        );
        std::fs::write(&path, "INSERT INTO `user` VALUES ('alice'").unwrap();
        assert!(
            Seed::open(&DatasetSource::MysqlDump(path)).is_err(),
            "so is one that does not parse"
        );
    }
}
