//! `sitenet cookie new PATH` (the cookie level; the
//! `--cookie-file` option is in `auth.rs`).

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub(crate) enum CookieCmd {
    /// Write a fresh random cookie to PATH (mode 0600; an existing file is
    /// never overwritten). Copy it to every member node.
    New {
        /// Where to write it.
        path: PathBuf,
    },
}

pub(crate) fn run(c: CookieCmd) -> ExitCode {
    match c {
        CookieCmd::New { path } => match sitenet::cookie_file::create(&path) {
            Ok(cookie) => {
                println!(
                    "{{\"cookie_file\": {}, \"key_id\": \"{:016x}\"}}",
                    serde_json::to_string(&path.display().to_string()).expect("a string"),
                    cookie.id()
                );
                ExitCode::SUCCESS
            }
            Err(e @ sitenet::cookie_file::CookieFileError::Exists(_)) => crate::usage(e),
            Err(e) => crate::failure(e),
        },
    }
}
