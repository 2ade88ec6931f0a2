//! The project's automation that is not operations (rust-analyzer's `xtask` pattern):
//! building and testing the front end. `cargo xtask …`, or `scripts/web` for `xtask web`.
//! Operating a cluster is `isuctl`'s.

mod web;

use clap::{Parser, Subcommand};
use isuctl::output::Format;

#[derive(Debug, Parser)]
#[command(name = "xtask", about = "The project's automation: the front end's build and tests")]
struct Cli {
    /// Print the command's result as JSON on stdout instead of a human table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The front end: build, unit tests, browser tests.
    Web(web::Args),
}

fn main() {
    let cli = Cli::parse();
    let format = if cli.json { Format::Json } else { Format::Human };
    let result = match cli.command {
        Command::Web(args) => web::run(args, format),
    };
    if let Err(error) = result {
        eprintln!("xtask: {error:#}");
        std::process::exit(1);
    }
}
