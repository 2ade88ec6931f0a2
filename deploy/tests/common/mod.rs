//! What the renderer's tests share: the checkout's root and the fixture comparison.

use std::path::{Path, PathBuf};

/// The checkout's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// `text` is fixture `name` of `tests/fixtures/<dir>` (rewritten instead with
/// `ISU_UPDATE_FIXTURES=1`).
#[track_caller]
pub fn assert_fixture(dir: &str, text: &str, name: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir)
        .join(name);
    if std::env::var_os("ISU_UPDATE_FIXTURES").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text, expected, "differs from {}", path.display());
}
