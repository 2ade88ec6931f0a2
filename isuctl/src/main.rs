//! `isuctl`: the thin entry of the operations tool (`cargo isu …`); the commands live in the
//! library, one module each.

use clap::Parser;

fn main() {
    let cli = isuctl::Cli::parse();
    if let Err(error) = isuctl::run(cli) {
        if let Some(isuctl::ExitStatus(code)) = error.downcast_ref() {
            std::process::exit(*code);
        }
        eprintln!("isuctl: {error:#}");
        std::process::exit(1);
    }
}
