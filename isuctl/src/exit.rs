//! An error that ends the tool with a given exit status (`main` reads it): a rollout stopped
//! by its gate exits 1 with nothing more to say, bad usage exits 2.

/// Ends `isuctl` with `code`, printing `message` (if any) as `isuctl: message` on stderr.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Exit {
    pub code: i32,
    pub message: String,
}

impl Exit {
    /// Bad usage (exit 2), as clap's own errors.
    pub fn usage(message: impl Into<String>) -> Exit {
        Exit {
            code: 2,
            message: message.into(),
        }
    }

    /// A failure already reported on the way (exit `code`, nothing more printed).
    pub fn quiet(code: i32) -> Exit {
        Exit {
            code,
            message: String::new(),
        }
    }
}
