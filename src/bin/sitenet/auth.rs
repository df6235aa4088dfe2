//! The security options of every command that talks to a node (issue 18):
//! `--cookie-file PATH` (the cookie level) and `--cert`, `--key`, `--ca`
//! (the TLS level). See docs/threats.md for what each level stops.

use std::path::PathBuf;
use std::process::ExitCode;

use sitenet::protocols::Cookie;
use sitenet::transport::tls::TlsIdentity;

/// The options shared by `node`, `ping`, `send`, `stats` and `stress`.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct Auth {
    /// A cookie file (from `sitenet cookie new`): only nodes holding the
    /// same cookie connect. Repeat to accept several while rotating; the
    /// first is the one this node proves. A file readable by group or
    /// others is refused. Without a cookie or a certificate, anyone who
    /// reaches the node is any site.
    #[arg(long = "cookie-file", value_name = "PATH")]
    cookie_files: Vec<PathBuf>,
    /// This site's certificate (PEM, from `sitenet cert site`). With --key
    /// and --ca every channel runs mutual TLS: this node is the site the
    /// certificate names, and a peer can be only the site its own
    /// certificate (signed by the same CA) names. Use tls:HOST:PORT
    /// addresses.
    #[arg(long, value_name = "PEM", requires_all = ["key", "ca"])]
    cert: Option<PathBuf>,
    /// The private key of --cert (PEM; refused if group or others can read
    /// it).
    #[arg(long, value_name = "PEM", requires_all = ["cert", "ca"])]
    key: Option<PathBuf>,
    /// The CA certificate(s) to trust (PEM, from `sitenet cert ca`).
    #[arg(long, value_name = "PEM", requires_all = ["cert", "key"])]
    ca: Option<PathBuf>,
}

/// What a command's node holds: its cookies and its TLS identity.
#[derive(Clone, Default)]
pub(crate) struct Security {
    pub(crate) cookies: Vec<Cookie>,
    pub(crate) tls: Option<TlsIdentity>,
}

impl Security {
    /// Puts them in a node's configuration.
    pub(crate) fn apply(self, c: &mut sitenet::NodeConfig) {
        c.cookies = self.cookies;
        c.tls = self.tls;
    }
}

impl Auth {
    /// Loads the cookies (primary first) and the TLS identity; a file that
    /// cannot be used is a usage error (exit 2), as ssh refuses a key
    /// others can read.
    pub(crate) fn load(&self) -> Result<Security, ExitCode> {
        let cookies = self
            .cookie_files
            .iter()
            .map(|p| sitenet::cookie_file::load(p).map_err(crate::usage))
            .collect::<Result<_, _>>()?;
        let tls = match (&self.cert, &self.key, &self.ca) {
            (Some(cert), Some(key), Some(ca)) => {
                Some(TlsIdentity::from_pem_files(cert, key, ca).map_err(crate::usage)?)
            }
            // clap requires all three together.
            _ => None,
        };
        Ok(Security { cookies, tls })
    }

    /// Whether --cert, --key and --ca were given.
    pub(crate) fn has_tls(&self) -> bool {
        self.cert.is_some()
    }
}
