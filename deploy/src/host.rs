//! `run-host`: runs one host's rendered units without systemd.
//!
//! The network-namespace hosts of `scripts/hosts` have no init system, but they must run the
//! very files `scripts/deploy` renders for real hosts. This is the small part of systemd those
//! units use, done the same way: `EnvironmentFile=`, `StateDirectory=` (→ `$STATE_DIRECTORY`),
//! `LoadCredential=` (→ `$CREDENTIALS_DIRECTORY`), `ExecStartPre=`, `ExecStart=`, `ExecReload=`
//! (with `$MAINPID`), `Restart=always` with `RestartSec=`, `Type=oneshot`, `After=` ordering,
//! path units (`PathChanged=` → `Unit=`), and `systemctl reload|restart UNIT` called by a unit.
//! Each process gets a clean environment as under systemd; its output goes to
//! `LOG_DIR/<unit>.log`. The sandboxing options are left to systemd (the namespace is the
//! sandbox here); `systemd-analyze verify` checks them on the rendered files.

use std::collections::{BTreeMap, HashMap};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context};
use parking_lot::Mutex;

/// A unit file: (section, key, value) in order.
#[derive(Debug, Clone, Default)]
pub struct Unit {
    entries: Vec<(String, String, String)>,
}

impl Unit {
    pub fn parse(text: &str) -> Unit {
        let mut entries = Vec::new();
        let mut section = String::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')) {
                section = name.to_owned();
            } else if let Some((key, value)) = line.split_once('=') {
                entries.push((section.clone(), key.trim().to_owned(), value.trim().to_owned()));
            }
        }
        Unit { entries }
    }

    pub fn all(&self, section: &str, key: &str) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|(s, k, _)| s == section && k == key)
            .map(|(_, _, v)| v.as_str())
            .collect()
    }

    pub fn get(&self, section: &str, key: &str) -> Option<&str> {
        self.all(section, key).last().copied()
    }
}

/// Splits a command line as systemd does (quotes, backslash escapes) and expands `${VAR}`,
/// `$VAR` (a whole word: split on whitespace) and `$$`. Returns the words and whether a
/// leading `-` says to ignore failure.
pub fn command_words(line: &str, env: &HashMap<String, String>) -> anyhow::Result<(Vec<String>, bool)> {
    let mut rest = line.trim_start();
    let mut ignore_failure = false;
    while let Some(stripped) = rest.strip_prefix(['-', '@', ':', '+', '!']) {
        ignore_failure |= rest.starts_with('-');
        rest = stripped;
    }
    let mut words = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let Some(&first) = chars.peek() else { break };
        let mut word = String::new();
        let quoted = first == '"' || first == '\'';
        if quoted {
            chars.next();
            loop {
                match chars.next() {
                    None => bail!("unterminated quote in {line:?}"),
                    Some(c) if c == first => break,
                    Some('\\') => word.push(chars.next().unwrap_or('\\')),
                    Some(c) => word.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                chars.next();
                if c == '\\' {
                    word.push(chars.next().unwrap_or('\\'));
                } else {
                    word.push(c);
                }
            }
        }
        // `$VAR` alone (unquoted) becomes as many words as the value has.
        if !quoted {
            if let Some(name) = word.strip_prefix('$').filter(|name| is_name(name)) {
                words.extend(
                    env.get(name)
                        .into_iter()
                        .flat_map(|v| v.split_whitespace().map(str::to_owned)),
                );
                continue;
            }
        }
        words.push(expand(&word, env));
    }
    if words.is_empty() {
        bail!("empty command");
    }
    Ok((words, ignore_failure))
}

fn is_name(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn expand(word: &str, env: &HashMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = word;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some((name, tail)) = after.strip_prefix('{').and_then(|inner| inner.split_once('}')) {
            out.push_str(env.get(name).map(String::as_str).unwrap_or(""));
            rest = tail;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Reads an environment file (`KEY=VALUE`, optionally double- or single-quoted; `#` comments).
pub fn environment_file(path: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("EnvironmentFile {}", path.display()))?;
    let mut pairs = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            bail!("{}: not KEY=VALUE: {line:?}", path.display());
        };
        let value = value.trim();
        let unquoted = ['"', '\'']
            .iter()
            .find_map(|q| value.strip_prefix(*q).and_then(|v| v.strip_suffix(*q)))
            .unwrap_or(value);
        pairs.push((key.trim().to_owned(), unquoted.to_owned()));
    }
    Ok(pairs)
}

/// A service unit, ready to run.
struct Service {
    name: String,
    unit: Unit,
    oneshot: bool,
    restart_always: bool,
    restart_delay: Duration,
    main_pid: Mutex<Option<u32>>,
    restart_requested: AtomicBool,
}

/// Everything one host runs.
pub struct Host {
    services: BTreeMap<String, Arc<Service>>,
    paths: Vec<(String, PathBuf, String)>,
    order: Vec<String>,
    log_dir: PathBuf,
    credentials_root: PathBuf,
    stop: Arc<AtomicBool>,
}

impl Host {
    /// Loads the enabled units (`[Install] WantedBy=`) of `units_dir` and every unit they name.
    pub fn load(units_dir: &Path, log_dir: &Path, credentials_root: &Path) -> anyhow::Result<Host> {
        let mut units = BTreeMap::new();
        for entry in std::fs::read_dir(units_dir).with_context(|| format!("reading {}", units_dir.display()))? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
            if name.ends_with(".service") || name.ends_with(".path") {
                units.insert(name, Unit::parse(&std::fs::read_to_string(&path)?));
            }
        }
        let mut services = BTreeMap::new();
        let mut paths = Vec::new();
        for (name, unit) in &units {
            if name.ends_with(".path") {
                if unit.get("Install", "WantedBy").is_none() {
                    continue;
                }
                let target = unit.get("Path", "Unit").context("path unit without Unit=")?.to_owned();
                if !units.contains_key(&target) {
                    bail!("{name}: Unit={target} is not among the rendered units");
                }
                for watched in unit.all("Path", "PathChanged") {
                    paths.push((name.clone(), PathBuf::from(watched), target.clone()));
                }
                continue;
            }
            let restart_delay = unit
                .get("Service", "RestartSec")
                .map(|text| text.trim_end_matches('s').parse::<f64>())
                .transpose()
                .with_context(|| format!("{name}: RestartSec"))?
                .unwrap_or(0.1);
            services.insert(
                name.clone(),
                Arc::new(Service {
                    name: name.clone(),
                    oneshot: unit.get("Service", "Type") == Some("oneshot"),
                    restart_always: unit.get("Service", "Restart") == Some("always"),
                    restart_delay: Duration::from_secs_f64(restart_delay),
                    unit: unit.clone(),
                    main_pid: Mutex::new(None),
                    restart_requested: AtomicBool::new(false),
                }),
            );
        }
        // Enabled long-running services, `After=` first.
        let enabled: Vec<&String> = services
            .iter()
            .filter(|(_, s)| !s.oneshot && s.unit.get("Install", "WantedBy").is_some())
            .map(|(name, _)| name)
            .collect();
        let mut order: Vec<String> = Vec::new();
        while order.len() < enabled.len() {
            let before = order.len();
            for name in &enabled {
                if order.contains(name) {
                    continue;
                }
                let after = services[*name].unit.all("Unit", "After").join(" ");
                let waiting = after
                    .split_whitespace()
                    .any(|dep| enabled.iter().any(|e| e.as_str() == dep) && !order.iter().any(|o| o == dep));
                if !waiting {
                    order.push((*name).clone());
                }
            }
            if order.len() == before {
                bail!("After= ordering has a cycle among {enabled:?}");
            }
        }
        std::fs::create_dir_all(log_dir)?;
        Ok(Host {
            services,
            paths,
            order,
            log_dir: log_dir.to_owned(),
            credentials_root: credentials_root.to_owned(),
            stop: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Runs until SIGTERM or SIGINT, then stops every process and returns.
    pub fn run(self) -> anyhow::Result<()> {
        let host = Arc::new(self);
        for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
            signal_hook::flag::register(signal, host.stop.clone())?;
        }
        let mut threads = Vec::new();
        for name in host.order.clone() {
            let host = host.clone();
            eprintln!("run-host: starting {name}");
            threads.push(std::thread::spawn(move || host.supervise(&name)));
            std::thread::sleep(Duration::from_millis(50));
        }
        for (path_unit, watched, target) in host.paths.clone() {
            let host = host.clone();
            eprintln!("run-host: {path_unit} watches {}", watched.display());
            threads.push(std::thread::spawn(move || host.watch(&watched, &target)));
        }
        println!("ready");
        for thread in threads {
            let _ = thread.join();
        }
        eprintln!("run-host: stopped");
        Ok(())
    }

    fn environment(&self, service: &Service) -> anyhow::Result<HashMap<String, String>> {
        let mut env = HashMap::new();
        env.insert(
            "PATH".to_owned(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
        );
        env.insert("LANG".to_owned(), "C.UTF-8".to_owned());
        for file in service.unit.all("Service", "EnvironmentFile") {
            let (optional, file) = match file.strip_prefix('-') {
                Some(file) => (true, file),
                None => (false, file),
            };
            match environment_file(Path::new(file)) {
                Ok(pairs) => env.extend(pairs),
                Err(_) if optional => {}
                Err(error) => return Err(error),
            }
        }
        let states: Vec<String> = service
            .unit
            .all("Service", "StateDirectory")
            .iter()
            .flat_map(|v| v.split_whitespace())
            .map(|dir| format!("/var/lib/{dir}"))
            .collect();
        for dir in &states {
            std::fs::create_dir_all(dir).with_context(|| format!("{}: StateDirectory {dir}", service.name))?;
        }
        if !states.is_empty() {
            env.insert("STATE_DIRECTORY".to_owned(), states.join(":"));
        }
        let credentials = service.unit.all("Service", "LoadCredential");
        if !credentials.is_empty() {
            let dir = self.credentials_root.join(&service.name);
            std::fs::create_dir_all(&dir)?;
            for credential in credentials {
                let (id, source) = credential
                    .split_once(':')
                    .with_context(|| format!("{}: LoadCredential={credential}", service.name))?;
                std::fs::copy(source, dir.join(id))
                    .with_context(|| format!("{}: LoadCredential {id} from {source}", service.name))?;
            }
            env.insert("CREDENTIALS_DIRECTORY".to_owned(), dir.display().to_string());
        }
        Ok(env)
    }

    fn command(&self, service: &Service, words: &[String], env: &HashMap<String, String>) -> anyhow::Result<Command> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_dir.join(format!("{}.log", service.name)))?;
        let mut command = Command::new(&words[0]);
        command
            .args(&words[1..])
            .env_clear()
            .envs(env)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        Ok(command)
    }

    /// Runs a short command to its end (ExecStartPre, ExecReload, oneshot ExecStart); a
    /// `systemctl reload|restart UNIT` is done here. A SIGTERM stops it (nginx's
    /// ExecStartPre waits up to 30 s for the map).
    fn run_to_end(&self, service: &Service, line: &str, env: &HashMap<String, String>) -> anyhow::Result<()> {
        let (words, ignore_failure) = command_words(line, env)?;
        if words[0].rsplit('/').next() == Some("systemctl") && words.len() == 3 {
            return self.systemctl(&words[1], &words[2]);
        }
        let mut child = self
            .command(service, &words, env)?
            .spawn()
            .with_context(|| format!("{}: running {line}", service.name))?;
        match self.wait(&mut child, None) {
            Ended::Exited(status) if !status.success() && !ignore_failure => {
                bail!("{}: `{line}` failed: {status}", service.name)
            }
            Ended::Exited(_) => Ok(()),
            Ended::Stopped | Ended::Restart => bail!("{}: `{line}` stopped", service.name),
        }
    }

    fn systemctl(&self, verb: &str, unit: &str) -> anyhow::Result<()> {
        let service = self
            .services
            .get(unit)
            .with_context(|| format!("systemctl {verb} {unit}: no such unit"))?;
        match verb {
            "reload" => {
                let pid = (*service.main_pid.lock()).with_context(|| format!("{unit} is not running"))?;
                let mut env = self.environment(service)?;
                env.insert("MAINPID".to_owned(), pid.to_string());
                for line in service.unit.all("Service", "ExecReload") {
                    self.run_to_end(service, line, &env)?;
                }
                eprintln!("run-host: reloaded {unit}");
                Ok(())
            }
            "restart" => {
                service.restart_requested.store(true, Ordering::SeqCst);
                Ok(())
            }
            _ => bail!("systemctl {verb}: only reload and restart are supported here"),
        }
    }

    /// Starts a service, restarts it as its unit says, stops it on SIGTERM.
    fn supervise(&self, name: &str) {
        let service = self.services[name].clone();
        while !self.stop.load(Ordering::SeqCst) {
            match self.start(&service) {
                Ok(mut child) => {
                    *service.main_pid.lock() = Some(child.id());
                    let ended = self.wait(&mut child, Some(&service.restart_requested));
                    *service.main_pid.lock() = None;
                    match ended {
                        Ended::Stopped => break,
                        Ended::Exited(status) => eprintln!("run-host: {name} exited ({status})"),
                        Ended::Restart => {
                            eprintln!("run-host: {name} restarting");
                            continue;
                        }
                    }
                }
                Err(error) => eprintln!("run-host: {name} failed to start: {error:#}"),
            }
            if !service.restart_always {
                break;
            }
            self.sleep(service.restart_delay);
        }
    }

    fn start(&self, service: &Service) -> anyhow::Result<Child> {
        let env = self.environment(service)?;
        for line in service.unit.all("Service", "ExecStartPre") {
            self.run_to_end(service, line, &env)?;
        }
        let line = service.unit.get("Service", "ExecStart").context("no ExecStart=")?;
        let (words, _) = command_words(line, &env)?;
        self.command(service, &words, &env)?
            .spawn()
            .with_context(|| format!("spawning {line}"))
    }

    /// Waits for `child` to end; terminates it on SIGTERM, or when `restart` is raised.
    fn wait(&self, child: &mut Child, restart: Option<&AtomicBool>) -> Ended {
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Ended::Exited(status);
            }
            if self.stop.load(Ordering::SeqCst) {
                terminate(child);
                return Ended::Stopped;
            }
            if restart.is_some_and(|restart| restart.swap(false, Ordering::SeqCst)) {
                terminate(child);
                return Ended::Restart;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn sleep(&self, duration: Duration) {
        let until = Instant::now() + duration;
        while Instant::now() < until && !self.stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A path unit: runs its unit each time the file changes (written, replaced, created).
    fn watch(&self, watched: &Path, target: &str) {
        let stamp = |path: &Path| {
            std::fs::metadata(path).ok().map(|m| {
                use std::os::unix::fs::MetadataExt;
                (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len(), m.ino())
            })
        };
        let mut last = stamp(watched);
        while !self.stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(100));
            let now = stamp(watched);
            if now == last {
                continue;
            }
            last = now;
            let service = &self.services[target];
            let result = self.environment(service).and_then(|env| {
                service
                    .unit
                    .all("Service", "ExecStart")
                    .iter()
                    .try_for_each(|line| self.run_to_end(service, line, &env))
            });
            if let Err(error) = result {
                eprintln!("run-host: {target} (triggered by {}): {error:#}", watched.display());
            }
        }
    }
}

/// How a process ended.
enum Ended {
    Exited(std::process::ExitStatus),
    /// SIGTERM: run-host is stopping.
    Stopped,
    /// `systemctl restart`: started again at once, whatever `Restart=` says.
    Restart,
}

/// Stops a service's process as the local cluster stops a node (the shared supervisor:
/// SIGTERM, SIGKILL after 5 s), then reaps it.
fn terminate(child: &mut Child) {
    let process = crate::supervise::Process::of(child.id());
    process.stop(nix::sys::signal::Signal::SIGTERM, Duration::from_secs(5), false);
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> HashMap<String, String> {
        [("STATE_DIRECTORY", "/var/lib/x"), ("MAINPID", "42"), ("TWO", "a b")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    #[test]
    fn command_lines_split_and_expand_as_systemd_does() {
        let (words, ignore) = command_words("/bin/w --data-dir ${STATE_DIRECTORY}/d $TWO", &env()).unwrap();
        assert_eq!(words, ["/bin/w", "--data-dir", "/var/lib/x/d", "a", "b"]);
        assert!(!ignore);
        let (words, ignore) = command_words("-/bin/kill -HUP $MAINPID", &env()).unwrap();
        assert_eq!(words, ["/bin/kill", "-HUP", "42"]);
        assert!(ignore);
        let (words, _) = command_words("/bin/sh -c 'for i in $$(seq 3); do echo \"x\"; done'", &env()).unwrap();
        assert_eq!(words, ["/bin/sh", "-c", "for i in $(seq 3); do echo \"x\"; done"]);
        assert!(command_words("/bin/sh -c 'open", &env()).is_err());
        assert!(command_words("  ", &env()).is_err());
    }

    #[test]
    fn units_and_environment_files_parse() {
        let unit = Unit::parse("# c\n[Unit]\nAfter=a b\n[Service]\nExecStartPre=x\nExecStartPre=y\nType=oneshot\n");
        assert_eq!(unit.all("Service", "ExecStartPre"), ["x", "y"]);
        assert_eq!(unit.get("Unit", "After"), Some("a b"));
        assert_eq!(unit.get("Install", "WantedBy"), None);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("e.env");
        std::fs::write(&file, "# secret\nA=1\nB=\"x y\"\n\nC='z'\n").unwrap();
        assert_eq!(
            environment_file(&file).unwrap(),
            [("A", "1"), ("B", "x y"), ("C", "z")].map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        std::fs::write(&file, "oops\n").unwrap();
        assert!(environment_file(&file).is_err());
    }
}
