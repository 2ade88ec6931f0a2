//! The report as people read it: the tables the bench prints after a scored run, each
//! section from the typed report ([`ReportFile`]) that `report.json` holds.

use std::fmt;

use super::ReportFile;
use crate::scenario::stats::ErrorKind;

impl fmt::Display for ReportFile {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_run(out)?;
        self.write_score(out)?;
        self.write_failures(out)?;
        self.write_latency(out)?;
        self.write_cells(out)?;
        self.write_cpu(out)?;
        self.write_front_end(out)?;
        self.write_cpu_per_thousand(out)?;
        self.write_profiles(out)?;
        self.write_result(out)
    }
}

impl ReportFile {
    /// The target, the load's size and what JIA saw.
    fn write_run(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(out, "target {}  language {}", self.target, self.language)?;
        if let Some(phase) = &self.failed_phase {
            writeln!(out, "FAILED before load: {phase}")?;
        }
        writeln!(
            out,
            "load {:.1} s  users {}  viewers {}  ISUs activated {}  conditions sent {}  requests {}",
            self.load_seconds, self.users, self.viewers, self.activations, self.sent_conditions, self.requests,
        )?;
        if self.repeated_activations > 0 || self.unactivated_acknowledged > 0 {
            writeln!(
                out,
                "JIA: {} activations repeated for an ISU already activated, {} registrations answered 201 never activated",
                self.repeated_activations, self.unactivated_acknowledged
            )?;
        }
        if self.activations_on_resend > 0 {
            writeln!(
                out,
                "JIA: {} activations asked again by a registration the bench re-sent after a timeout",
                self.activations_on_resend
            )?;
        }
        Ok(())
    }

    /// The score by tag (those that counted), the sum and the deductions.
    fn write_score(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(out, "\nscore breakdown")?;
        writeln!(out, "  {:<24} {:>9} {:>9}", "tag", "count", "points")?;
        for (tag, count) in &self.breakdown {
            let points = self.breakdown_points.get(tag).copied().unwrap_or_default();
            if *count > 0 || points > 0 {
                writeln!(out, "  {tag:<24} {count:>9} {points:>9}")?;
            }
        }
        writeln!(out, "  {:<24} {:>9} {:>9}", "sum of points", "", self.points)?;
        writeln!(out, "  {:<24} {:>9} {:>9}", "deductions", "", -self.deductions)
    }

    /// Errors by kind, timeouts, the bench's own stalls, connection errors by cause, the
    /// router's reloads and the error samples.
    fn write_failures(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let by_kind: Vec<String> = ErrorKind::ALL
            .iter()
            .filter_map(|kind| {
                let count = self.errors_by_kind.get(kind.name()).copied().unwrap_or_default();
                (count > 0).then(|| format!("{} {count}", kind.name()))
            })
            .collect();
        writeln!(
            out,
            "  errors {}{}  timeouts {}  GETs retried after an idle connection closed {}",
            self.errors,
            if by_kind.is_empty() {
                String::new()
            } else {
                format!(" ({})", by_kind.join(", "))
            },
            self.timeouts,
            self.idle_close_retries
        )?;
        self.write_bench_lag(out)?;
        let causes: Vec<String> = self
            .connection_errors
            .iter()
            .filter(|(_, count)| **count > 0)
            .map(|(cause, count)| format!("{cause} {count}"))
            .collect();
        if !causes.is_empty() {
            writeln!(out, "  connection errors by cause: {}", causes.join(", "))?;
        }
        if let Some(reloads) = self.router_reloads {
            writeln!(out, "  router (nginx) reloads during the load: {reloads}")?;
        }
        for (number, sample) in self.error_samples.iter().enumerate() {
            writeln!(out, "  error #{}: {sample}", number + 1)?;
        }
        Ok(())
    }

    /// When the bench itself fell behind, and the load growth it held for that.
    fn write_bench_lag(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(longest) = self
            .bench_stalls
            .iter()
            .map(|stall| stall.to_unix_ms - stall.from_unix_ms)
            .max()
        {
            writeln!(
                out,
                "  the bench itself fell behind {} times (longest {longest} ms): a request in flight then may time out in the bench",
                self.bench_stalls.len()
            )?;
        }
        if self.growth_held_for_bench_lag > 0 {
            writeln!(
                out,
                "  load growth held {} times because the bench itself fell behind (it shares the host)",
                self.growth_held_for_bench_lag
            )?;
        }
        Ok(())
    }

    /// Latency percentiles per endpoint.
    fn write_latency(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.latency_ms.is_empty() {
            return Ok(());
        }
        writeln!(out, "\nlatency by endpoint (ms)")?;
        writeln!(
            out,
            "  {:<34} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "endpoint", "count", "p50", "p90", "p99", "max"
        )?;
        for (label, latency) in &self.latency_ms {
            writeln!(
                out,
                "  {label:<34} {:>8} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
                latency.count, latency.p50_ms, latency.p90_ms, latency.p99_ms, latency.max_ms
            )?;
        }
        Ok(())
    }

    /// Per cell, as each node measured itself.
    fn write_cells(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.cells.is_empty() {
            return Ok(());
        }
        writeln!(out, "\nPer cell (public API requests, as each node measured them)")?;
        writeln!(
            out,
            "  {:<12} {:<12} {:>9} {:>7} {:>9} {:>9} {:>9}",
            "cell", "node", "requests", "errors", "p50 ms", "p90 ms", "p99 ms"
        )?;
        let ms = |value: Option<f64>| match value {
            Some(ms) if ms.is_finite() => format!("{ms:.2}"),
            Some(_) => ">2500".to_owned(),
            None => "-".to_owned(),
        };
        for cell in &self.cells {
            let node = match cell.restarted {
                true => format!("{}*", cell.node),
                false => cell.node.clone(),
            };
            writeln!(
                out,
                "  {:<12} {:<12} {:>9} {:>7} {:>9} {:>9} {:>9}",
                cell.cell,
                node,
                cell.requests,
                cell.errors,
                ms(cell.p50_ms),
                ms(cell.p90_ms),
                ms(cell.p99_ms)
            )?;
        }
        if self.cells.iter().any(|cell| cell.restarted) {
            writeln!(out, "  * restarted during the load: counted from its last start only")?;
        }
        Ok(())
    }

    /// CPU seconds per process, the cluster's sum and the bench's share of it.
    fn write_cpu(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.cpu_seconds.is_empty() {
            return Ok(());
        }
        writeln!(out, "\nCPU seconds during load")?;
        for (name, seconds) in &self.cpu_seconds {
            match seconds {
                Some(seconds) => writeln!(out, "  {name:<12} {seconds:>8.2}")?,
                None => writeln!(out, "  {name:<12} {:>8}", "n/a")?,
            }
        }
        let cluster: f64 = self
            .cpu_seconds
            .iter()
            .filter(|(name, _)| name != "bench")
            .filter_map(|(_, seconds)| *seconds)
            .sum();
        let bench = self
            .cpu_seconds
            .iter()
            .find(|(name, _)| name == "bench")
            .and_then(|(_, seconds)| *seconds);
        if let (Some(bench), true) = (bench, cluster > 0.0) {
            writeln!(
                out,
                "  {:<12} {cluster:>8.2}  (bench/cluster = {:.2})",
                "cluster",
                bench / cluster
            )?;
        }
        Ok(())
    }

    /// The front-end line, after nginx's CPU.
    fn write_front_end(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let front_end = &self.front_end.traffic;
        if front_end.assets.requests == 0 && front_end.pages.requests == 0 {
            return Ok(());
        }
        writeln!(
            out,
            "  front end (served by nginx): {} asset requests ({}); {} page loads ({})",
            front_end.assets.requests,
            front_end.assets.summary(),
            front_end.pages.requests,
            front_end.pages.summary()
        )
    }

    /// The cluster's CPU per 1,000 requests and per 1,000 stored conditions, and the
    /// devices' posts.
    fn write_cpu_per_thousand(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.cluster_cpu_per_1000_requests.is_empty() {
            writeln!(
                out,
                "\ncluster CPU (ms) per 1,000 requests ({} requests, {} of them device posts) \
                 and per 1,000 stored conditions ({})",
                self.cluster_requests, self.device_posts.sent, self.device_posts.stored_conditions
            )?;
            let per_condition = &self.cluster_cpu_per_1000_conditions;
            for ((name, request), (_, condition)) in self.cluster_cpu_per_1000_requests.iter().zip(per_condition) {
                writeln!(
                    out,
                    "  {name:<12} {:>8.1} {:>8.1}",
                    request * 1000.0,
                    condition * 1000.0
                )?;
            }
        }
        writeln!(
            out,
            "  device posts: {} sent, {} accepted, {} refused, {} without answer; bench on CPUs {}",
            self.device_posts.sent,
            self.device_posts.accepted,
            self.device_posts.refused,
            self.device_posts.failed,
            self.bench_cpus.as_deref().unwrap_or("?")
        )
    }

    /// The profiles taken under load.
    fn write_profiles(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.profiles.is_empty() {
            return Ok(());
        }
        writeln!(out, "\nprofiles taken under load")?;
        for path in &self.profiles {
            writeln!(out, "  {path}")?;
        }
        Ok(())
    }

    /// The last line: PASSED or FAILED, the score and why it failed.
    fn write_result(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            out,
            "\nresult: {}  score {}{}",
            if self.passed { "PASSED" } else { "FAILED" },
            self.score,
            if self.fail_reasons.is_empty() {
                String::new()
            } else {
                format!("  ({})", self.fail_reasons.join("; "))
            }
        )
    }
}
