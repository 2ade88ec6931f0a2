//! Scratch directories: one fresh directory per cluster or nginx, kept for inspection when
//! a test fails.

use std::path::PathBuf;

/// A fresh directory under the system temp dir, removed on drop unless a test failed.
pub struct ScratchDir {
    pub path: PathBuf,
}

impl ScratchDir {
    pub fn new(label: &str) -> ScratchDir {
        let path = std::env::temp_dir().join(format!("isu-{label}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&path).expect("creating a scratch dir");
        ScratchDir { path }
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept {} for inspection", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
