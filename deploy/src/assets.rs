//! The front end's precompressed files: a `.gz` beside each compressible file, made once at
//! the best level, so that nginx sends it as it is (`gzip_static`) instead of compressing the
//! same file again for every client that accepts gzip.
//!
//! One rule for every place a front end is served from: `isuctl web build` (web/dist, in
//! place), `isuctl cluster up --static-dir DIR` (a copy in the run directory keyed by the
//! folder's content, [`served_copy`]: a user's folder is never written) and the deploy's
//! bundle (in memory, [`plan`]). A `.gz` is *fresh* when its modification time is the one of
//! its source: it is written with that time, so nginx gives both forms the same
//! `Last-Modified`, and a source rebuilt since makes it stale. A `.gz` is only written when it
//! is smaller than its source (nginx would otherwise send more bytes, not fewer); a stale one
//! that no longer pays is removed. Brotli is left out: the bench's clients, like Go's HTTP
//! client the official bench uses, accept gzip only, so `.br` files would never be sent.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sha2::{Digest as _, Sha256};

/// Extensions of the files worth compressing: text (HTML, CSS, JavaScript, JSON, source
/// maps, SVG, plain text, XML) and WebAssembly. Images and fonts are compressed already.
pub const COMPRESSIBLE: [&str; 11] = [
    "html", "htm", "css", "js", "mjs", "json", "map", "svg", "txt", "xml", "wasm",
];

/// Why a front end could not be precompressed.
#[derive(Debug, thiserror::Error)]
pub enum AssetsError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{0}: more than {MAX_DEPTH} folders deep (a symbolic link loop?)")]
    TooDeep(PathBuf),
}

/// How deep a front end's folders may nest.
pub const MAX_DEPTH: usize = 32;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> AssetsError + '_ {
    move |source| AssetsError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Whether `path` names a file worth a `.gz` (by its extension).
pub fn is_compressible(path: &Path) -> bool {
    path.extension()
        .and_then(|extension| extension.to_str())
        .is_some_and(|extension| COMPRESSIBLE.contains(&extension.to_ascii_lowercase().as_str()))
}

/// The `.gz` beside `path`.
pub fn companion_of(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".gz");
    PathBuf::from(name)
}

/// `content` gzipped at the best level, with no name and no time in its header: the same
/// input always gives the same bytes (a render stays byte for byte the same).
pub fn gzip(content: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::with_capacity(content.len() / 3), flate2::Compression::best());
    encoder.write_all(content).expect("writing to a Vec cannot fail");
    encoder.finish().expect("writing to a Vec cannot fail")
}

/// What one compressible file's `.gz` needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Companion {
    /// There, with the source's modification time: nothing to do.
    Fresh,
    /// Missing or stale: these bytes, written with the source's modification time.
    Write(Vec<u8>),
    /// Gzip does not make this file smaller: no `.gz` (`stale`: one is there, to remove).
    NotWorthIt { stale: bool },
}

/// One compressible file of a tree and what its `.gz` needs.
#[derive(Debug, Clone)]
pub struct Planned {
    /// Relative to the tree's root.
    pub source: PathBuf,
    pub bytes: u64,
    pub modified: SystemTime,
    pub companion: Companion,
}

impl Planned {
    /// The `.gz`, relative to the tree's root.
    pub fn companion_path(&self) -> PathBuf {
        companion_of(&self.source)
    }
}

/// Every regular file under `root`, relative to it, sorted (symbolic links are followed, as
/// nginx follows them; a tree deeper than [`MAX_DEPTH`], a link loop, is refused).
pub fn files(root: &Path) -> Result<Vec<PathBuf>, AssetsError> {
    let mut found = Vec::new();
    let mut pending = vec![(root.to_owned(), 0)];
    while let Some((dir, depth)) = pending.pop() {
        if depth > MAX_DEPTH {
            return Err(AssetsError::TooDeep(dir));
        }
        for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let path = entry.map_err(io(&dir))?.path();
            let metadata = std::fs::metadata(&path).map_err(io(&path))?;
            if metadata.is_dir() {
                pending.push((path, depth + 1));
            } else if metadata.is_file() {
                found.push(path.strip_prefix(root).expect("found under root").to_owned());
            }
        }
    }
    found.sort();
    Ok(found)
}

fn modified(path: &Path) -> Result<SystemTime, AssetsError> {
    std::fs::metadata(path)
        .and_then(|metadata| metadata.modified())
        .map_err(io(path))
}

/// What each compressible file of `root` needs, sorted by path; only files without a fresh
/// `.gz` are read and compressed.
pub fn plan(root: &Path) -> Result<Vec<Planned>, AssetsError> {
    let mut planned = Vec::new();
    for source in files(root)?.into_iter().filter(|path| is_compressible(path)) {
        let path = root.join(&source);
        let metadata = std::fs::metadata(&path).map_err(io(&path))?;
        let modified = metadata.modified().map_err(io(&path))?;
        let existing = root.join(companion_of(&source));
        let existing_modified = existing.is_file().then(|| modified_or_none(&existing)).flatten();
        let content = std::fs::read(&path).map_err(io(&path))?;
        // The time alone is not enough: a copy that keeps times (cp -p, rsync -t) or a
        // reproducible build gives a new source an old time. The trailer's CRC and length
        // must be the source's too.
        let companion = if existing_modified == Some(modified) && trailer_matches(&existing, &content) {
            Companion::Fresh
        } else {
            let compressed = gzip(&content);
            if compressed.len() < content.len() {
                Companion::Write(compressed)
            } else {
                Companion::NotWorthIt {
                    stale: existing_modified.is_some(),
                }
            }
        };
        planned.push(Planned {
            source,
            bytes: metadata.len(),
            modified,
            companion,
        });
    }
    Ok(planned)
}

/// Whether the gzip file at `path` ends with the CRC-32 and length of `content` (its
/// trailer: CRC-32 then the length modulo 2^32, little-endian).
fn trailer_matches(path: &Path, content: &[u8]) -> bool {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let mut trailer = [0u8; 8];
    let read = std::fs::File::open(path).and_then(|mut file| {
        file.seek(SeekFrom::End(-8))?;
        file.read_exact(&mut trailer)
    });
    if read.is_err() {
        return false;
    }
    let mut crc = flate2::Crc::new();
    crc.update(content);
    trailer[..4] == crc.sum().to_le_bytes() && trailer[4..] == (content.len() as u32).to_le_bytes()
}

fn modified_or_none(path: &Path) -> Option<SystemTime> {
    modified(path).ok()
}

/// Whether every compressible file of `root` has what it needs already (nothing to write or
/// remove).
pub fn is_precompressed(plan: &[Planned]) -> bool {
    plan.iter().all(|planned| {
        matches!(
            planned.companion,
            Companion::Fresh | Companion::NotWorthIt { stale: false }
        )
    })
}

/// What [`precompress`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Precompressed {
    /// Compressible files in the tree.
    pub compressible: usize,
    /// `.gz` files written now (missing or stale).
    pub written: usize,
    /// Stale `.gz` files removed (gzip no longer pays for their source).
    pub removed: usize,
}

/// Brings every compressible file of `root` its fresh `.gz`, in place: only for a tree this
/// project owns (web/dist, a copy in the run directory), never a user's folder.
pub fn precompress(root: &Path) -> Result<Precompressed, AssetsError> {
    let plan = plan(root)?;
    let mut done = Precompressed {
        compressible: plan.len(),
        ..Precompressed::default()
    };
    for planned in &plan {
        let target = root.join(planned.companion_path());
        match &planned.companion {
            Companion::Fresh | Companion::NotWorthIt { stale: false } => {}
            Companion::Write(bytes) => {
                write_with_time(&target, bytes, planned.modified)?;
                done.written += 1;
            }
            Companion::NotWorthIt { stale: true } => {
                std::fs::remove_file(&target).map_err(io(&target))?;
                done.removed += 1;
            }
        }
    }
    Ok(done)
}

/// Writes `bytes` to `path` (through a temporary file and a rename: nginx never sends a
/// half-written file) with `modified` as its modification time.
fn write_with_time(path: &Path, bytes: &[u8], modified: SystemTime) -> Result<(), AssetsError> {
    let name = path.file_name().expect("a file path").to_string_lossy();
    let temporary = path.with_file_name(format!(".{name}.tmp"));
    let mut file = std::fs::File::create(&temporary).map_err(io(&temporary))?;
    file.write_all(bytes).map_err(io(&temporary))?;
    file.set_modified(modified).map_err(io(&temporary))?;
    drop(file);
    std::fs::rename(&temporary, path).map_err(io(path))
}

/// The folder to serve for the front end in `source`: `source` itself when it is
/// precompressed already, else a precompressed copy in `cache/<key>/`, where the key is a
/// digest of the folder's paths, contents and modification times (an unchanged folder is
/// copied once; other keys' copies are removed). The copy keeps each file's modification time, so nginx's
/// `Last-Modified` is the one of the user's files. `source` is only read.
pub fn served_copy(source: &Path, cache: &Path) -> Result<PathBuf, AssetsError> {
    if is_precompressed(&plan(source)?) {
        return Ok(source.to_owned());
    }
    let files = files(source)?;
    let mut digest = Sha256::new();
    for file in &files {
        let path = source.join(file);
        let content = std::fs::read(&path).map_err(io(&path))?;
        digest.update(file.as_os_str().as_encoded_bytes());
        digest.update([0]);
        digest.update((content.len() as u64).to_le_bytes());
        digest.update(&content);
        digest.update(
            modified(&path)?
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
                .to_le_bytes(),
        );
    }
    let key = hex::encode(&digest.finalize()[..8]);
    let served = cache.join(&key);
    if served.is_dir() {
        return Ok(served);
    }
    std::fs::create_dir_all(cache).map_err(io(cache))?;
    // Copies of other contents are of no use any more: one copy at a time.
    for entry in std::fs::read_dir(cache).map_err(io(cache))? {
        let path = entry.map_err(io(cache))?.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).map_err(io(&path))?;
        }
    }
    // Built beside, then renamed: a copy that exists is complete.
    let building = cache.join(format!(".{key}.building"));
    for file in &files {
        let (from, to) = (source.join(file), building.join(file));
        std::fs::create_dir_all(to.parent().expect("a file has a parent")).map_err(io(&to))?;
        std::fs::copy(&from, &to).map_err(io(&from))?;
        // The copy is ours: writable by its owner even when the user's file is read-only
        // (fs::copy keeps the mode), so that its time can be set.
        let mut permissions = std::fs::metadata(&to).map_err(io(&to))?.permissions();
        {
            use std::os::unix::fs::PermissionsExt as _;
            permissions.set_mode(permissions.mode() | 0o200);
        }
        std::fs::set_permissions(&to, permissions).map_err(io(&to))?;
        let copied = std::fs::File::options().write(true).open(&to).map_err(io(&to))?;
        copied.set_modified(modified(&from)?).map_err(io(&to))?;
    }
    precompress(&building)?;
    std::fs::rename(&building, &served).map_err(io(&served))?;
    Ok(served)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Text that gzip shrinks (repetitive, as minified JavaScript is to gzip).
    fn script(lines: usize) -> String {
        (0..lines)
            .map(|n| format!("export const value{n} = compute({n}, \"label\");\n"))
            .collect()
    }

    fn write(root: &Path, relative: &str, content: &[u8]) {
        let path = root.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    fn set_time(path: &Path, seconds: u64) {
        let file = std::fs::File::options().write(true).open(path).unwrap();
        file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds))
            .unwrap();
    }

    fn gunzip(bytes: &[u8]) -> Vec<u8> {
        use std::io::Read as _;
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes).read_to_end(&mut out).unwrap();
        out
    }

    /// Every file under `root` with its length and modification time.
    fn listing(root: &Path) -> Vec<(PathBuf, u64, SystemTime)> {
        files(root)
            .unwrap()
            .into_iter()
            .map(|file| {
                let metadata = std::fs::metadata(root.join(&file)).unwrap();
                (file, metadata.len(), metadata.modified().unwrap())
            })
            .collect()
    }

    #[test]
    fn text_files_are_compressible_and_images_and_gz_files_are_not() {
        for name in [
            "a.js",
            "b.CSS",
            "dir/c.svg",
            "index.html",
            "d.json",
            "e.js.map",
            "f.mjs",
            "robots.txt",
        ] {
            assert!(is_compressible(Path::new(name)), "{name}");
        }
        for name in ["a.png", "b.woff2", "c.js.gz", "README", "d.jpg"] {
            assert!(!is_compressible(Path::new(name)), "{name}");
        }
        assert_eq!(companion_of(Path::new("assets/a.js")), Path::new("assets/a.js.gz"));
    }

    #[test]
    fn a_link_loop_is_refused_not_followed_for_ever() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "index.html", b"<p>x</p>");
        std::os::unix::fs::symlink(dir.path(), dir.path().join("again")).unwrap();
        let error = files(dir.path()).unwrap_err();
        assert!(error.to_string().contains("symbolic link loop"), "{error}");
    }

    #[test]
    fn gzip_is_deterministic_and_decompresses_to_its_input() {
        let content = script(200);
        assert_eq!(gzip(content.as_bytes()), gzip(content.as_bytes()));
        assert_eq!(gunzip(&gzip(content.as_bytes())), content.as_bytes());
        assert!(gzip(content.as_bytes()).len() < content.len() / 5);
    }

    #[test]
    fn precompress_writes_fresh_companions_with_the_sources_time_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "index.html", script(20).as_bytes());
        write(root, "assets/app-1a2b3c4d.js", script(300).as_bytes());
        write(root, "assets/logo.png", &[0x89, b'P', b'N', b'G', 1, 2, 3]);
        // Gzip makes a 1-byte file larger: no companion for it.
        write(root, "assets/tiny.css", b"a");
        set_time(&root.join("assets/app-1a2b3c4d.js"), 1_000_000);

        let done = precompress(root).unwrap();
        assert_eq!(
            done,
            Precompressed {
                compressible: 3,
                written: 2,
                removed: 0
            }
        );
        let js = root.join("assets/app-1a2b3c4d.js");
        let gz = companion_of(&js);
        assert_eq!(gunzip(&std::fs::read(&gz).unwrap()), std::fs::read(&js).unwrap());
        assert_eq!(
            modified(&gz).unwrap(),
            modified(&js).unwrap(),
            "same Last-Modified in nginx"
        );
        assert!(root.join("index.html.gz").is_file());
        assert!(!root.join("assets/logo.png.gz").exists());
        assert!(!root.join("assets/tiny.css.gz").exists());
        assert!(is_precompressed(&plan(root).unwrap()));

        // Done already: nothing written again.
        let before = listing(root);
        assert_eq!(precompress(root).unwrap().written, 0);
        assert_eq!(listing(root), before);

        // A rebuilt source makes its companion stale: written again.
        std::fs::write(&js, script(400)).unwrap();
        set_time(&js, 2_000_000);
        assert!(!is_precompressed(&plan(root).unwrap()));
        assert_eq!(precompress(root).unwrap().written, 1);
        assert_eq!(gunzip(&std::fs::read(&gz).unwrap()), script(400).as_bytes());
        assert_eq!(modified(&gz).unwrap(), modified(&js).unwrap());

        // A new source with the old time (cp -p, a reproducible build): its companion's
        // trailer tells it is stale.
        std::fs::write(&js, script(500)).unwrap();
        set_time(&js, 2_000_000);
        assert_eq!(modified(&gz).unwrap(), modified(&js).unwrap());
        assert!(!is_precompressed(&plan(root).unwrap()));
        assert_eq!(precompress(root).unwrap().written, 1);
        assert_eq!(gunzip(&std::fs::read(&gz).unwrap()), script(500).as_bytes());

        // A stale companion whose source no longer compresses is removed.
        std::fs::write(root.join("assets/tiny.css.gz"), gzip(b"old")).unwrap();
        assert_eq!(precompress(root).unwrap().removed, 1);
        assert!(!root.join("assets/tiny.css.gz").exists());
    }

    #[test]
    fn a_folder_without_companions_is_served_from_a_copy_and_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let (source, cache) = (dir.path().join("public"), dir.path().join("run/static"));
        write(&source, "index.html", script(20).as_bytes());
        write(&source, "assets/vendor.ee7444dd.js", script(500).as_bytes());
        write(&source, "assets/favicon.ico", &[0, 0, 1, 0]);
        set_time(&source.join("assets/vendor.ee7444dd.js"), 1_500_000);
        let before = listing(&source);

        let served = served_copy(&source, &cache).unwrap();
        assert!(served.starts_with(&cache), "{}", served.display());
        assert_eq!(listing(&source), before, "the user's folder is unchanged");
        let js = served.join("assets/vendor.ee7444dd.js");
        assert_eq!(std::fs::read(&js).unwrap(), script(500).as_bytes());
        assert_eq!(
            modified(&js).unwrap(),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_500_000)
        );
        assert_eq!(
            gunzip(&std::fs::read(companion_of(&js)).unwrap()),
            script(500).as_bytes()
        );
        assert!(served.join("assets/favicon.ico").is_file());
        assert!(served.join("index.html.gz").is_file());

        // The same content: the same copy, not made again.
        let copy_listing = listing(&served);
        assert_eq!(served_copy(&source, &cache).unwrap(), served);
        assert_eq!(listing(&served), copy_listing);

        // Changed content: a new copy, and the old one goes.
        std::fs::write(source.join("index.html"), script(30)).unwrap();
        let newer = served_copy(&source, &cache).unwrap();
        assert_ne!(newer, served);
        assert!(!served.exists());
        assert_eq!(std::fs::read(newer.join("index.html")).unwrap(), script(30).as_bytes());

        // Read-only files (a folder the user may not write): copied all the same.
        let locked = dir.path().join("locked");
        write(&locked, "assets/app.js", script(50).as_bytes());
        {
            use std::os::unix::fs::PermissionsExt as _;
            let file = locked.join("assets/app.js");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).unwrap();
        }
        let served_locked = served_copy(&locked, &dir.path().join("run/static-locked")).unwrap();
        assert!(served_locked.join("assets/app.js.gz").is_file());

        // A folder precompressed already is served as it is.
        let built = dir.path().join("dist");
        write(&built, "assets/app.js", script(100).as_bytes());
        precompress(&built).unwrap();
        assert_eq!(served_copy(&built, &cache).unwrap(), built);
    }
}
