//! `isuctl`: the thin entry of the operations tool (`cargo isu …`); the commands live in the
//! library, one module each.

use clap::Parser;

fn main() {
    let cli = isuctl::Cli::parse();
    if let Err(error) = isuctl::run(cli) {
        eprintln!("isuctl: {error:#}");
        std::process::exit(1);
    }
}
