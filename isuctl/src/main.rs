//! `isuctl`: the thin entry of the operations tool (`cargo isu …`); the commands live in the
//! library, one module each.

use clap::Parser;

fn main() {
    let cli = isuctl::Cli::parse();
    if let Err(error) = isuctl::run(cli) {
        let (code, quiet) = match error.downcast_ref::<isuctl::exit::Exit>() {
            Some(exit) => (exit.code, exit.message.is_empty()),
            None => (1, false),
        };
        if !quiet {
            eprintln!("isuctl: {error:#}");
        }
        std::process::exit(code);
    }
}
