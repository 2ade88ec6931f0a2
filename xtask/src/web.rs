//! `xtask web` (`scripts/web`): the project's own front end in `web/` (TypeScript, Preact,
//! uPlot, built by Vite): build it, run its unit tests, and run its browser tests in headless
//! Debian Chromium against a local cluster of their own.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use serde::Serialize;

use deploy::external::{self, run_checked, run_to_stderr};
use isuctl::local::{self, RunDir};
use isuctl::output::{self, Format};

/// Where the browser tests' cluster runs, on addresses of its own so it never meets the
/// cluster of `scripts/bench` or of a person.
const E2E_RUN_DIR: &str = "run/web-e2e";
const E2E_HOSTS: [(&str, &str); 3] = [
    ("ISU_COORDINATOR_HOST", "127.0.0.52"),
    ("ISU_WORKER_A_HOST", "127.0.0.53"),
    ("ISU_WORKER_B_HOST", "127.0.0.54"),
];

#[derive(Debug, clap::Args)]
#[command(after_help = "Environment:\n  \
    VITE_JIA_URL            JIA sign-in base URL baked into the build (default: same host as the page, port 5000)\n  \
    ISU_WEB_E2E_TIMEOUT     seconds the browser tests may take (default 600)\n  \
    ISU_WEB_PERF_LOADS      page loads measured for time to first render (default 7)\n  \
    ISU_NO_BUILD=1          e2e: let `cluster up` skip its cargo build")]
pub struct Args {
    #[command(subcommand)]
    pub command: WebCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum WebCommand {
    /// npm ci when web/node_modules is missing or older than the lock file, type-check, then
    /// build into web/dist (what `cluster up` serves) with a .gz beside each compressible
    /// file (nginx sends those as they are); prints every built file's size, raw and gzipped.
    Build,
    /// Type-check and run the unit and component tests (Vitest, happy-dom).
    Test,
    /// Browser tests: installs Debian's chromium with apt-get when /usr/bin/chromium is
    /// missing (no browser is ever downloaded), builds, starts a cluster of its own with the
    /// JIA simulator on 127.0.0.52-54 (run dir run/web-e2e; with Prometheus where Debian's
    /// prometheus is installed, for the operator console's charts and alerts), runs the tests in headless
    /// Chromium through playwright-core, and always stops that cluster. Screenshots go to
    /// run/web-e2e/screenshots/, time-to-first-render figures to run/web-e2e/first-render.json.
    E2e,
    /// build, test, e2e.
    All,
}

/// One file of web/dist and its size.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BuiltFile {
    /// Relative to web/dist.
    pub file: String,
    pub bytes: u64,
    /// Gzipped at the best level (`deploy::assets::gzip`, the size of its `.gz`; flate2 is
    /// within 1 % of `gzip -9`, which scripts/web used).
    pub gzip_bytes: u64,
}

/// What `web build` wrote.
#[derive(Debug, Serialize)]
pub struct Build {
    pub dist: PathBuf,
    pub files: Vec<BuiltFile>,
    pub total_bytes: u64,
    pub total_gzip_bytes: u64,
}

/// What `web e2e` left behind.
#[derive(Debug, Serialize)]
pub struct E2e {
    pub base_url: String,
    pub screenshots: PathBuf,
    pub screenshot_count: usize,
    pub first_render: PathBuf,
}

pub fn run(args: Args, format: Format) -> anyhow::Result<()> {
    let web = Web {
        dir: local::repo_root().join("web"),
    };
    match args.command {
        WebCommand::Build => output::emit(format, &web.build()?, render_build),
        WebCommand::Test => web.test(),
        WebCommand::E2e => output::emit(format, &web.e2e(Then::Build)?, render_e2e),
        WebCommand::All => {
            let build = web.build()?;
            if format == Format::Human {
                eprintln!("{}", render_build(&build));
            }
            web.test()?;
            output::emit(format, &web.e2e(Then::UseTheBuild)?, render_e2e)
        }
    }
}

/// What `e2e` does once chromium is there: build web/dist, or use the one `all` just built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    Build,
    UseTheBuild,
}

struct Web {
    dir: PathBuf,
}

impl Web {
    fn npx(&self, args: &[&str]) -> Command {
        let mut command = Command::new("npx");
        command.args(args).current_dir(&self.dir);
        command
    }

    /// `npm ci` when node_modules is missing or stale.
    fn ensure_dependencies(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            external::on_path("npm"),
            "web: npm not found: install Node.js 20+ and npm"
        );
        let installed = modified(&self.dir.join("node_modules/.package-lock.json"));
        let inputs = [
            modified(&self.dir.join("package-lock.json")),
            modified(&self.dir.join("package.json")),
        ];
        if dependencies_stale(installed, &inputs) {
            eprintln!("web: installing dependencies (npm ci)");
            let mut npm = Command::new("npm");
            npm.args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&self.dir);
            run_to_stderr(&mut npm)?;
        }
        Ok(())
    }

    fn build(&self) -> anyhow::Result<Build> {
        self.ensure_dependencies()?;
        eprintln!("web: building web/dist");
        run_to_stderr(&mut self.npx(&["tsc", "--noEmit"]))?;
        run_to_stderr(&mut self.npx(&["vite", "build", "--logLevel", "warn"]))?;
        let dist = self.dir.join("dist");
        let done = deploy::assets::precompress(&dist)?;
        eprintln!(
            "web: {} of {} compressible files precompressed (.gz, for nginx's gzip_static)",
            done.written, done.compressible
        );
        built_files(&dist)
    }

    fn test(&self) -> anyhow::Result<()> {
        self.ensure_dependencies()?;
        run_checked(&mut self.npx(&["tsc", "--noEmit"]))?;
        run_checked(&mut self.npx(&["vitest", "run"]))
    }

    fn e2e(&self, then: Then) -> anyhow::Result<E2e> {
        ensure_chromium()?;
        if then == Then::Build {
            self.build()?;
        }
        let dist = self.dir.join("dist");
        anyhow::ensure!(dist.join("index.html").is_file(), "web: web/dist is not built");
        let run_dir = RunDir::new(local::repo_root().join(E2E_RUN_DIR));
        // The operations tool's local cluster (scripts/isuctl builds isuctl when needed).
        let cluster = |args: &[&str]| {
            let mut command = Command::new(local::repo_root().join("scripts/isuctl"));
            command
                .arg("cluster")
                .args(args)
                .env("ISU_RUN_DIR", &run_dir.path)
                .envs(E2E_HOSTS);
            command
        };
        // A cluster left over from an interrupted run would hold the addresses.
        let _ = run_to_stderr(&mut cluster(&["down"]));
        let _down = Finally(|| {
            let _ = run_to_stderr(&mut cluster(&["down"]));
        });
        let screenshots = run_dir.path.join("screenshots");
        if screenshots.exists() {
            std::fs::remove_dir_all(&screenshots).with_context(|| format!("removing {}", screenshots.display()))?;
        }
        std::fs::create_dir_all(&screenshots).with_context(|| format!("creating {}", screenshots.display()))?;
        let static_dir = dist.display().to_string();
        let mut up_args = vec!["up", "--static-dir", &static_dir, "--jia"];
        // The console's charts and alerts are tested where Debian's prometheus is installed
        // (CI installs it); without it the console's tests check the plain notice instead.
        let prometheus = external::on_path("prometheus");
        if prometheus {
            up_args.push("--prometheus");
        }
        let up = external::output_checked(cluster(&up_args).stderr(Stdio::inherit()))
            .context("web: starting the browser tests' cluster")?;
        let base_url = String::from_utf8_lossy(&up.stdout)
            .lines()
            .last()
            .unwrap_or("")
            .trim()
            .to_owned();
        let recorded = run_dir.cluster()?;
        let jia_url = recorded.jia_url.unwrap_or_default();
        let ops_token_file = recorded.ops_token_file.unwrap_or_default();
        anyhow::ensure!(
            !base_url.is_empty() && !jia_url.is_empty(),
            "web: the cluster did not report its URLs"
        );
        eprintln!("web: browser tests against {base_url} (JIA {jia_url})");
        let first_render = run_dir.path.join("first-render.json");
        let mut tests = self.npx(&["vitest", "run", "--config", "vitest.e2e.config.ts"]);
        tests
            .env("ISU_WEB_BASE_URL", &base_url)
            .env("ISU_WEB_JIA_URL", &jia_url)
            .env("ISU_WEB_SCREENSHOTS", &screenshots)
            .env("ISU_WEB_METRICS", &first_render)
            // The console's tests: its token, and the operations tool on the same cluster.
            .env("ISU_WEB_OPS_TOKEN_FILE", &ops_token_file)
            .env("ISU_WEB_PROMETHEUS", if prometheus { "1" } else { "" })
            .env("ISU_WEB_ISUCTL", local::repo_root().join("scripts/isuctl"))
            .env("ISU_RUN_DIR", &run_dir.path)
            .envs(E2E_HOSTS);
        let limit = match std::env::var("ISU_WEB_E2E_TIMEOUT") {
            Ok(text) => text
                .parse()
                .map(Duration::from_secs)
                .map_err(|_| anyhow::anyhow!("web: ISU_WEB_E2E_TIMEOUT={text:?} is not a number of seconds"))?,
            Err(_) => Duration::from_secs(600),
        };
        external::run_bounded(&mut tests, limit).context("web: the browser tests")?;
        let screenshot_count = std::fs::read_dir(&screenshots)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "png"))
                    .count()
            })
            .unwrap_or(0);
        eprintln!("web: screenshots: {screenshot_count} in {}", screenshots.display());
        Ok(E2e {
            base_url,
            screenshots,
            screenshot_count,
            first_render,
        })
    }
}

/// Runs `body` when dropped: the e2e cluster is stopped however the tests end.
struct Finally<F: FnMut()>(F);

impl<F: FnMut()> Drop for Finally<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

/// Whether `npm ci` must run: node_modules was never installed, or the lock file or the
/// manifest changed since (npm ci leaves node_modules/.package-lock.json behind, newer than
/// the lock it installed).
fn dependencies_stale(installed: Option<SystemTime>, inputs: &[Option<SystemTime>]) -> bool {
    let Some(installed) = installed else {
        return true;
    };
    inputs.iter().flatten().any(|input| *input > installed)
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|metadata| metadata.modified()).ok()
}

/// Every file under `dist` but the precompressed `.gz` files, sorted, with its raw and
/// gzipped size.
pub fn built_files(dist: &Path) -> anyhow::Result<Build> {
    let mut files = Vec::new();
    for relative in deploy::assets::files(dist)? {
        if relative.extension().is_some_and(|extension| extension == "gz") {
            continue;
        }
        let path = dist.join(&relative);
        let content = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let gzip_bytes = deploy::assets::gzip(&content).len() as u64;
        let file = relative.display().to_string();
        files.push(BuiltFile {
            file,
            bytes: content.len() as u64,
            gzip_bytes,
        });
    }
    Ok(Build {
        dist: dist.to_owned(),
        total_bytes: files.iter().map(|file| file.bytes).sum(),
        total_gzip_bytes: files.iter().map(|file| file.gzip_bytes).sum(),
        files,
    })
}

fn render_build(build: &Build) -> String {
    let mut text = format!("{:<44} {:>10} {:>10}\n", "web/dist file", "bytes", "gzip");
    for file in &build.files {
        text.push_str(&format!(
            "{:<44} {:>10} {:>10}\n",
            file.file, file.bytes, file.gzip_bytes
        ));
    }
    text.push_str(&format!(
        "{:<44} {:>10} {:>10}",
        "total", build.total_bytes, build.total_gzip_bytes
    ));
    text
}

fn render_e2e(e2e: &E2e) -> String {
    format!(
        "browser tests passed against {}: {} screenshots in {}, first render in {}",
        e2e.base_url,
        e2e.screenshot_count,
        e2e.screenshots.display(),
        e2e.first_render.display()
    )
}

/// Debian's chromium, installed with apt-get (through sudo unless root) when missing.
fn ensure_chromium() -> anyhow::Result<()> {
    let chromium = Path::new("/usr/bin/chromium");
    if chromium.is_file() {
        return Ok(());
    }
    eprintln!("web: installing Debian's chromium (apt-get)");
    external::install_packages(&["chromium"]).context("web: /usr/bin/chromium is missing")?;
    anyhow::ensure!(chromium.is_file(), "web: chromium did not install to /usr/bin/chromium");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependencies_are_installed_when_missing_or_older_than_the_lock() {
        let then = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let later = then + Duration::from_secs(1);
        assert!(dependencies_stale(None, &[Some(then)]));
        assert!(dependencies_stale(Some(then), &[Some(later), Some(then)]));
        assert!(!dependencies_stale(Some(later), &[Some(then), None]));
    }

    #[test]
    fn built_files_are_listed_sorted_with_their_gzip_size_without_the_gz_files() {
        let dist = tempfile::tempdir().unwrap();
        std::fs::create_dir(dist.path().join("assets")).unwrap();
        std::fs::write(dist.path().join("index.html"), "<html>".repeat(100)).unwrap();
        std::fs::write(dist.path().join("assets/app.js"), "x").unwrap();
        deploy::assets::precompress(dist.path()).unwrap();
        assert!(dist.path().join("index.html.gz").is_file());
        let build = built_files(dist.path()).unwrap();
        let names: Vec<_> = build.files.iter().map(|file| file.file.as_str()).collect();
        assert_eq!(names, ["assets/app.js", "index.html"]);
        assert_eq!(build.files[1].bytes, 600);
        assert!(build.files[1].gzip_bytes < 100, "{:?}", build.files[1]);
        assert_eq!(build.total_bytes, 601);
        assert!(render_build(&build).ends_with(&format!("{:>10} {:>10}", 601, build.total_gzip_bytes)));
    }
}
