//! `bench`: runs the short verifying load against a running cluster and prints `score: <N>` last.

use std::process::ExitCode;

use bench::cli::Cli;
use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,hyper=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let outcome = match cli.into_config() {
        Ok(config) => bench::scenario::run(config).await,
        Err(error) => Err(error),
    };
    match outcome {
        Ok(report) => {
            println!("{report}");
            println!("score: {}", report.score.total);
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("bench failed: {error:#}");
            println!("score: 0");
            ExitCode::FAILURE
        }
    }
}
