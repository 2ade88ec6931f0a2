//! The control channel: a line protocol on a Unix socket that changes the
//! rules of a running netlab and reads its counters.
//!
//! A client sends one command per line. Each answer starts with a status
//! line, `ok N` (followed by exactly N body lines) or `err MESSAGE`, so it can
//! be used by hand (`socat - UNIX-CONNECT:SOCK`) and parsed by scripts.
//! Several commands may be sent on one connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use thiserror::Error;

use crate::router::Router;
use crate::rules::Impairment;

/// Longest command line accepted.
const MAX_LINE: u64 = 4096;
/// Upper bound on a delay, so a typo cannot queue minutes of traffic.
const MAX_DELAY: Duration = Duration::from_secs(60);

/// Which links an `impair` command applies to.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// Every pair without a rule of its own.
    All,
    /// The two named hosts, in both directions.
    Pair(String, String),
}

/// A parsed control command.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// `ping`: liveness check, answers `ok`.
    Ping,
    /// `cut A B`: drop everything between A and B.
    Cut(String, String),
    /// `heal A B`: undo `cut A B`.
    Heal(String, String),
    /// `impair [A B|all] [delay=D] [loss=P%]`: replace delay and loss. With
    /// no settings, `None`: for `all` no impairment, for a pair "use `all`".
    Impair(Target, Option<Impairment>),
    /// `clear`: remove every rule.
    Clear,
    /// `rules`: list the rules in force.
    Rules,
    /// `stats`: packet counters per ordered host pair.
    Stats,
}

/// Why a command line was rejected.
#[derive(Debug, Error, PartialEq)]
pub enum ParseError {
    #[error("empty command; try `help`")]
    Empty,
    #[error("unknown command `{0}`; commands: ping, cut, heal, impair, clear, rules, stats, help")]
    Unknown(String),
    #[error("usage: {0}")]
    Usage(&'static str),
    #[error("bad setting `{0}`: expected delay=<duration> or loss=<percent>")]
    BadSetting(String),
    #[error("`{0}` given twice")]
    Duplicate(&'static str),
    #[error("bad delay `{0}`: expected e.g. 50ms, 1.5s, 200us (at most 60s)")]
    BadDelay(String),
    #[error("bad loss `{0}`: expected a percentage from 0 to 100, e.g. 1% or 0.5%")]
    BadLoss(String),
}

const HELP: &[&str] = &[
    "ping                                  answer ok",
    "cut A B                               drop all packets between hosts A and B",
    "heal A B                              undo cut A B",
    "impair A B [delay=50ms] [loss=1%]     set delay/loss between A and B (replaces; no settings: use `all`)",
    "impair all [delay=50ms] [loss=1%]     set delay/loss for every pair without its own rule",
    "clear                                 remove every rule",
    "rules                                 list the rules in force",
    "stats                                 packet counters per ordered host pair",
];

/// Parses one command line. `help` is answered by the server, not parsed.
pub fn parse(line: &str) -> Result<Command, ParseError> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let Some((&verb, args)) = words.split_first() else {
        return Err(ParseError::Empty);
    };
    match (verb.to_ascii_lowercase().as_str(), args) {
        ("ping", []) => Ok(Command::Ping),
        ("ping", _) => Err(ParseError::Usage("ping")),
        ("cut", [a, b]) => Ok(Command::Cut(a.to_string(), b.to_string())),
        ("cut", _) => Err(ParseError::Usage("cut A B")),
        ("heal", [a, b]) => Ok(Command::Heal(a.to_string(), b.to_string())),
        ("heal", _) => Err(ParseError::Usage("heal A B")),
        ("clear", []) => Ok(Command::Clear),
        ("clear", _) => Err(ParseError::Usage("clear")),
        ("rules", []) => Ok(Command::Rules),
        ("rules", _) => Err(ParseError::Usage("rules")),
        ("stats", []) => Ok(Command::Stats),
        ("stats", _) => Err(ParseError::Usage("stats")),
        ("impair", args) => parse_impair(args),
        _ => Err(ParseError::Unknown(verb.to_string())),
    }
}

fn parse_impair(args: &[&str]) -> Result<Command, ParseError> {
    const USAGE: &str = "impair A B|all [delay=50ms] [loss=1%]";
    let settings_start = args.iter().position(|w| w.contains('=')).unwrap_or(args.len());
    let target = match &args[..settings_start] {
        [] | ["all"] => Target::All,
        [a, b] if *a != "all" && *b != "all" => Target::Pair(a.to_string(), b.to_string()),
        _ => return Err(ParseError::Usage(USAGE)),
    };
    let settings = &args[settings_start..];
    if settings.is_empty() {
        return Ok(Command::Impair(target, None));
    }
    let (mut delay, mut loss) = (None, None);
    for setting in settings {
        match setting.split_once('=') {
            Some(("delay", _)) if delay.is_some() => return Err(ParseError::Duplicate("delay")),
            Some(("delay", v)) => delay = Some(parse_delay(v)?),
            Some(("loss", _)) if loss.is_some() => return Err(ParseError::Duplicate("loss")),
            Some(("loss", v)) => loss = Some(parse_loss(v)?),
            _ => return Err(ParseError::BadSetting(setting.to_string())),
        }
    }
    let impairment = Impairment {
        delay: delay.unwrap_or_default(),
        loss: loss.unwrap_or_default(),
    };
    Ok(Command::Impair(target, Some(impairment)))
}

/// Parses `50ms`, `1.5s`, `200us`; a bare number means milliseconds.
pub fn parse_delay(text: &str) -> Result<Duration, ParseError> {
    let bad = || ParseError::BadDelay(text.to_string());
    let (number, unit_secs) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = text.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1.0)
    } else {
        (text, 1e-3)
    };
    let value: f64 = number.parse().map_err(|_| bad())?;
    let secs = value * unit_secs;
    if !secs.is_finite() || secs < 0.0 || secs > MAX_DELAY.as_secs_f64() {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses `1%`, `0.5%` or a bare percentage into a probability.
pub fn parse_loss(text: &str) -> Result<f64, ParseError> {
    let number = text.strip_suffix('%').unwrap_or(text);
    match number.parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p / 100.0),
        _ => Err(ParseError::BadLoss(text.to_string())),
    }
}

/// Runs one command line against the router: body lines, or an error message.
pub fn execute(line: &str, router: &Router) -> Result<Vec<String>, String> {
    if line.trim().eq_ignore_ascii_case("help") {
        return Ok(HELP.iter().map(|s| s.to_string()).collect());
    }
    let command = parse(line).map_err(|e| e.to_string())?;
    let host = |name: &str| router.host_id(name).ok_or_else(|| format!("unknown host `{name}`"));
    let pair = |a: &str, b: &str| -> Result<_, String> {
        let (a, b) = (host(a)?, host(b)?);
        if a == b {
            return Err("the two hosts must differ".to_string());
        }
        Ok((a, b))
    };
    let mut rules = router.rules();
    match command {
        Command::Ping => Ok(vec![]),
        Command::Cut(a, b) => {
            let (a, b) = pair(&a, &b)?;
            rules.cut(a, b);
            Ok(vec![])
        }
        Command::Heal(a, b) => {
            let (a, b) = pair(&a, &b)?;
            rules.heal(a, b);
            Ok(vec![])
        }
        Command::Impair(Target::All, imp) => {
            rules.impair_all(imp.unwrap_or_default());
            Ok(vec![])
        }
        Command::Impair(Target::Pair(a, b), imp) => {
            let (a, b) = pair(&a, &b)?;
            rules.impair_pair(a, b, imp);
            Ok(vec![])
        }
        Command::Clear => {
            rules.clear();
            Ok(vec![])
        }
        Command::Rules => Ok(rules.describe(router.host_names())),
        Command::Stats => {
            drop(rules);
            Ok(router.stats_table())
        }
    }
}

/// Binds the control socket, replacing a stale socket file but refusing to
/// take over one that a live netlab still answers on.
pub fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            bail!("{} is in use by a running netlab", path.display());
        }
        std::fs::remove_file(path).with_context(|| format!("removing stale socket {}", path.display()))?;
    }
    UnixListener::bind(path).with_context(|| format!("binding control socket {}", path.display()))
}

/// Serves control connections forever, one thread per connection.
pub fn serve(listener: UnixListener, router: Arc<Router>) {
    for conn in listener.incoming() {
        match conn {
            Ok(stream) => {
                let router = Arc::clone(&router);
                let spawned = std::thread::Builder::new()
                    .name("ctl-conn".into())
                    .spawn(move || handle_connection(stream, &router));
                if let Err(e) = spawned {
                    tracing::warn!("cannot spawn control connection thread: {e}");
                }
            }
            Err(e) => tracing::warn!("control socket accept failed: {e}"),
        }
    }
}

fn handle_connection(stream: UnixStream, router: &Router) {
    if let Err(e) = serve_lines(stream, router) {
        tracing::debug!("control connection ended: {e}");
    }
}

fn serve_lines(stream: UnixStream, router: &Router) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(300)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        let n = (&mut reader).take(MAX_LINE + 1).read_line(&mut line)?;
        if n == 0 {
            return Ok(());
        }
        if n as u64 > MAX_LINE {
            writeln!(writer, "err command line longer than {MAX_LINE} bytes")?;
            return Ok(());
        }
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let answer = match execute(line, router) {
            Ok(body) => {
                tracing::info!(command = line, "control command");
                let mut out = format!("ok {}\n", body.len());
                for l in body {
                    out.push_str(&l);
                    out.push('\n');
                }
                out
            }
            Err(msg) => {
                tracing::info!(command = line, error = %msg, "control command rejected");
                format!("err {msg}\n")
            }
        };
        writer.write_all(answer.as_bytes())?;
    }
}

/// Sends one command to a running netlab. Returns the body lines on `ok`,
/// an error carrying the server's message on `err`.
pub fn request(path: &Path, command: &str) -> anyhow::Result<Result<Vec<String>, String>> {
    let stream =
        UnixStream::connect(path).with_context(|| format!("connecting to control socket {}", path.display()))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let mut writer = stream.try_clone()?;
    writeln!(writer, "{}", command.trim())?;
    let mut reader = BufReader::new(stream);
    let mut status = String::new();
    reader.read_line(&mut status).context("reading answer")?;
    let status = status.trim_end();
    if let Some(msg) = status.strip_prefix("err ") {
        return Ok(Err(msg.to_string()));
    }
    let count: usize = status
        .strip_prefix("ok ")
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("malformed answer `{status}`"))?;
    let mut body = Vec::with_capacity(count);
    for _ in 0..count {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            bail!("answer cut short");
        }
        body.push(line.trim_end_matches('\n').to_string());
    }
    Ok(Ok(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(a: &str, b: &str) -> Target {
        Target::Pair(a.into(), b.into())
    }

    fn imp(ms: u64, loss: f64) -> Option<Impairment> {
        Some(Impairment {
            delay: Duration::from_millis(ms),
            loss,
        })
    }

    #[test]
    fn simple_commands() {
        assert_eq!(parse("ping"), Ok(Command::Ping));
        assert_eq!(parse("  PING \n"), Ok(Command::Ping));
        assert_eq!(parse("cut a b"), Ok(Command::Cut("a".into(), "b".into())));
        assert_eq!(parse("heal web1 db"), Ok(Command::Heal("web1".into(), "db".into())));
        assert_eq!(parse("clear"), Ok(Command::Clear));
        assert_eq!(parse("stats"), Ok(Command::Stats));
        assert_eq!(parse("rules"), Ok(Command::Rules));
    }

    #[test]
    fn impair_forms() {
        assert_eq!(
            parse("impair all delay=50ms loss=1%"),
            Ok(Command::Impair(Target::All, imp(50, 0.01)))
        );
        assert_eq!(
            parse("impair delay=50ms"),
            Ok(Command::Impair(Target::All, imp(50, 0.0)))
        );
        assert_eq!(
            parse("impair a b loss=0.5%"),
            Ok(Command::Impair(pair("a", "b"), imp(0, 0.005)))
        );
        assert_eq!(
            parse("impair a b loss=10 delay=1s"),
            Ok(Command::Impair(pair("a", "b"), imp(1000, 0.1)))
        );
        assert_eq!(parse("impair a b"), Ok(Command::Impair(pair("a", "b"), None)));
        assert_eq!(parse("impair all"), Ok(Command::Impair(Target::All, None)));
    }

    #[test]
    fn durations_and_percentages() {
        assert_eq!(parse_delay("50ms"), Ok(Duration::from_millis(50)));
        assert_eq!(parse_delay("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_delay("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_delay("20"), Ok(Duration::from_millis(20)));
        assert_eq!(parse_delay("60s"), Ok(Duration::from_secs(60)));
        assert!(parse_delay("61s").is_err());
        assert!(parse_delay("-1ms").is_err());
        assert!(parse_delay("fast").is_err());
        assert!(parse_delay("NaNms").is_err());
        assert_eq!(parse_loss("100%"), Ok(1.0));
        assert_eq!(parse_loss("0"), Ok(0.0));
        assert!(parse_loss("101%").is_err());
        assert!(parse_loss("-1%").is_err());
        assert!(parse_loss("x%").is_err());
    }

    #[test]
    fn errors_are_explained() {
        assert_eq!(parse(""), Err(ParseError::Empty));
        assert_eq!(parse("frobnicate"), Err(ParseError::Unknown("frobnicate".into())));
        assert_eq!(parse("cut a"), Err(ParseError::Usage("cut A B")));
        assert_eq!(parse("heal a b c"), Err(ParseError::Usage("heal A B")));
        assert_eq!(parse("ping now"), Err(ParseError::Usage("ping")));
        assert!(matches!(parse("impair a delay=5ms"), Err(ParseError::Usage(_))));
        assert!(matches!(parse("impair all b delay=5ms"), Err(ParseError::Usage(_))));
        assert_eq!(
            parse("impair all jitter=5ms"),
            Err(ParseError::BadSetting("jitter=5ms".into()))
        );
        assert_eq!(
            parse("impair all delay=5ms delay=6ms"),
            Err(ParseError::Duplicate("delay"))
        );
        assert_eq!(parse("impair all loss=1 loss=2"), Err(ParseError::Duplicate("loss")));
        assert_eq!(parse("impair all delay=soon"), Err(ParseError::BadDelay("soon".into())));
        let msg = parse("impair all loss=200%").unwrap_err().to_string();
        assert!(msg.contains("0 to 100"), "{msg}");
    }
}
