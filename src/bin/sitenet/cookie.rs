//! `--cookie-file PATH` on every command that talks to a node, and
//! `sitenet cookie new PATH` (issue 18, the cookie level).

use std::path::PathBuf;
use std::process::ExitCode;

use sitenet::protocols::Cookie;

/// The cookie options shared by `node`, `ping`, `send`, `stats` and
/// `stress`.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct Auth {
    /// A cookie file (from `sitenet cookie new`): only nodes holding the
    /// same cookie connect. Repeat to accept several while rotating; the
    /// first is the one this node proves. A file readable by group or
    /// others is refused. Without one, anyone who reaches the node is any
    /// site.
    #[arg(long = "cookie-file", value_name = "PATH")]
    cookie_files: Vec<PathBuf>,
}

impl Auth {
    /// The cookies, primary first; a file that cannot be used is a usage
    /// error (exit 2), as ssh refuses a key others can read.
    pub(crate) fn cookies(&self) -> Result<Vec<Cookie>, ExitCode> {
        self.cookie_files
            .iter()
            .map(|p| sitenet::cookie_file::load(p).map_err(crate::usage))
            .collect()
    }
}

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
