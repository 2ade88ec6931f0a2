//! An anonymous viewer (§13.4): loads the top page and polls the trend, verifying it; quits
//! after its first error. Fresh trend entries it sees make the load grow.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::api::{Agent, TrendEntry};
use super::front_end::FrontEndFile;
use super::stats::Tag;
use super::validate::{check_trend, TrendMemory};
use super::RunContext;

/// Shortest time between two polls of one viewer.
const VIEWER_PAUSE: Duration = Duration::from_millis(100);
/// A trend entry is fresh when newer than the virtual time this long (real) before the poll.
const FRESHNESS: Duration = Duration::from_secs(2);

/// Runs until an error, the end of load, or timeouts stop all viewers; frees its slot then.
pub(super) async fn run_viewer(ctx: Arc<RunContext>, _slot: OwnedSemaphorePermit) {
    let Ok(agent) = Agent::new(&ctx.target, ctx.request_timeout, ctx.stats.clone()) else {
        return;
    };
    let mut memory = TrendMemory::default();
    let mut first_seen: HashMap<i64, i64> = HashMap::new();
    let mut assets_loaded = false;
    while !ctx.over() && !ctx.viewers_stopped.load(Ordering::Relaxed) {
        let started = Instant::now();
        let ok =
            load_top_page(&agent, !assets_loaded).await && poll_trend(&ctx, &agent, &mut memory, &mut first_seen).await;
        if !ok {
            ctx.stats.add(Tag::ViewerDropout);
            return;
        }
        assets_loaded = true;
        ctx.stats.add(Tag::ViewerLoop);
        tokio::time::sleep_until(started + VIEWER_PAUSE).await;
    }
}

/// `GET /` as `text/html`, and on the first visit every `/assets/` file it references.
async fn load_top_page(agent: &Agent, with_assets: bool) -> bool {
    let request = agent.request(Method::GET, "/");
    let Ok(reply) = agent.send("GET /", request, &[200]).await else {
        return false;
    };
    agent.count_front_end(FrontEndFile::Page, &reply);
    if !reply.content_type.starts_with("text/html") {
        agent.stats().error(
            super::stats::ErrorKind::ContentType,
            format!("GET /: content-type {:?}, expected text/html", reply.content_type),
        );
        return false;
    }
    if !with_assets {
        return true;
    }
    let html = String::from_utf8_lossy(&reply.body);
    for asset in asset_references(&html) {
        let request = agent.request(Method::GET, &asset);
        let Ok(reply) = agent.send("GET /assets/*", request, &[200, 304]).await else {
            return false;
        };
        agent.count_front_end(FrontEndFile::Asset, &reply);
    }
    true
}

async fn poll_trend(
    ctx: &RunContext,
    agent: &Agent,
    memory: &mut TrendMemory,
    first_seen: &mut HashMap<i64, i64>,
) -> bool {
    let fresh_after = ctx.jia.clock().at(std::time::Instant::now() - FRESHNESS);
    let sent = std::time::SystemTime::now();
    let request = agent.request(Method::GET, "/api/trend");
    let Some(entries) = agent.json::<Vec<TrendEntry>>("GET /api/trend", request, 200).await else {
        return false;
    };
    let result = {
        let known = ctx.registered.lock().expect("registered poisoned");
        check_trend(&entries, &known, &ctx.trend_log, memory)
    };
    if let Err(problem) = result {
        ctx.stats.data_error(problem);
        // When the wrong answer came (a run with disruptions tells those inside them apart).
        ctx.stats
            .failure_span("GET /api/trend", sent, std::time::SystemTime::now());
        return false;
    }
    let mut fresh = 0;
    for entry in &entries {
        for item in entry.info.iter().chain(&entry.warning).chain(&entry.critical) {
            let newly_seen = first_seen.insert(item.isu_id, item.timestamp) != Some(item.timestamp);
            if newly_seen && item.timestamp > fresh_after {
                fresh += 1;
            }
        }
    }
    ctx.fresh_trend_entries.fetch_add(fresh, Ordering::Relaxed);
    true
}

/// The distinct `/assets/...` paths that `src="…"` and `href="…"` attributes name.
pub fn asset_references(html: &str) -> Vec<String> {
    let mut found = Vec::new();
    for attribute in ["src=\"", "href=\""] {
        let mut rest = html;
        while let Some(start) = rest.find(attribute) {
            rest = &rest[start + attribute.len()..];
            let Some(end) = rest.find('"') else { break };
            let value = &rest[..end];
            if value.starts_with("/assets/") && !found.iter().any(|seen| seen == value) {
                found.push(value.to_owned());
            }
            rest = &rest[end..];
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asset_references_are_found_once_each() {
        let html = r#"<link rel="icon" href="/assets/favicon.svg"><script type="module" src="/assets/index-1.js"></script>
            <link rel="stylesheet" href="/assets/index-2.css"><a href="/isu/x">x</a><img src="/assets/index-1.js">"#;
        assert_eq!(
            asset_references(html),
            vec!["/assets/index-1.js", "/assets/favicon.svg", "/assets/index-2.css"]
        );
        assert!(asset_references("<p>no assets</p>").is_empty());
    }
}
