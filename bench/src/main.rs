//! `bench`: runs a verifying load against a running cluster and prints `score: <N>` last,
//! or (`bench jia`) runs the JIA simulator alone for browser users of a local cluster.

use std::process::ExitCode;

use bench::cli::{Cli, Command, JiaArgs};
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
    if let Some(Command::Jia(args)) = cli.command {
        return match serve_jia(args).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("bench jia failed: {error:#}");
                ExitCode::FAILURE
            }
        };
    }
    let outcome = match cli.run.into_config() {
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

async fn serve_jia(args: JiaArgs) -> anyhow::Result<()> {
    let config = args.into_config()?;
    let jia = bench::jia::JiaSimulator::start(config).await?;
    tracing::info!(url = %jia.url(), "jia simulator listening; sign-in page at /");
    shared::shutdown_signal().await;
    jia.shutdown().await;
    Ok(())
}
