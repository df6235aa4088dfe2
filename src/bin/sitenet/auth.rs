//! The security options of every command that talks to a node:
//! `--cookie-file PATH` (the cookie level) and `--cert`, `--key`, `--ca`
//! (the TLS level); and, for `node`, `ping`, `send` and `stats`, the
//! user's own cookie file when neither is given, or `--open` (the open
//! level, chosen explicitly). See docs/threats.md for what each level
//! stops.

use std::path::PathBuf;
use std::process::ExitCode;

use sitenet::cookie_file::{CookieFileError, COOKIE_FILE_VAR};
use sitenet_protocols::Cookie;
use sitenet_transport::tls::TlsIdentity;

/// The options shared by `node`, `ping`, `send`, `stats` and `stress`.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct Auth {
    /// A cookie file (from `sitenet cookie new`): only nodes holding the
    /// same cookie connect. Repeat to accept several while rotating; the
    /// first is the one this node proves. A file readable by group or
    /// others is refused. Default (node, ping, send, stats): your own
    /// cookie file, $SITENET_COOKIE_FILE, else
    /// $XDG_CONFIG_HOME/sitenet/cookie, else ~/.config/sitenet/cookie,
    /// made on first use.
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

/// The security options of `node`, `ping`, `send` and `stats`: those of
/// [`Auth`], the user's own cookie file when none of them is given, and
/// `--open`.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct Members {
    #[command(flatten)]
    auth: Auth,
    /// The open level, chosen explicitly: no cookie and no certificate.
    /// Anyone who reaches an open node can be any site; an open client
    /// talks only to open nodes.
    #[arg(long, conflicts_with_all = ["cookie_files", "cert", "key", "ca"])]
    open: bool,
}

/// What a command's node holds: its cookies and its TLS identity, and
/// where the cookie it proves comes from.
#[derive(Clone, Default)]
pub(crate) struct Security {
    pub(crate) cookies: Vec<Cookie>,
    pub(crate) tls: Option<TlsIdentity>,
    /// The file of the cookie this node proves (`None`: no cookie).
    pub(crate) cookie_file: Option<PathBuf>,
}

impl Security {
    /// Puts them in a node's configuration. Holding neither a cookie nor
    /// a certificate is the open level chosen on the command line
    /// (`--open`; `stress` in this process), so it is allowed wherever the
    /// node listens.
    pub(crate) fn apply(self, c: &mut sitenet::NodeConfig) {
        c.allow_open = self.cookies.is_empty() && self.tls.is_none();
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
        let cookie_file = self.cookie_files.first().cloned();
        let tls = match (&self.cert, &self.key, &self.ca) {
            (Some(cert), Some(key), Some(ca)) => {
                Some(TlsIdentity::from_pem_files(cert, key, ca).map_err(crate::usage)?)
            }
            // clap requires all three together.
            _ => None,
        };
        Ok(Security {
            cookies,
            tls,
            cookie_file,
        })
    }

    /// Whether --cert, --key and --ca were given.
    pub(crate) fn has_tls(&self) -> bool {
        self.cert.is_some()
    }
}

impl Members {
    /// Loads what the options name: with `--open` nothing; with
    /// `--cookie-file` or `--cert` those; with neither, the user's own
    /// cookie file ([`sitenet::cookie_file::default_path`]), made on first
    /// use and said so in one line on stderr. A file that cannot be used is
    /// a usage error (exit 2).
    pub(crate) fn load(&self, command: &str) -> Result<Security, ExitCode> {
        if self.open {
            return Ok(Security::default());
        }
        if !self.auth.cookie_files.is_empty() || self.auth.has_tls() {
            return self.auth.load();
        }
        let path =
            sitenet::cookie_file::default_path(|k| std::env::var_os(k)).map_err(crate::usage)?;
        let (cookie, made) = sitenet::cookie_file::load_or_create(&path).map_err(|e| match e {
            CookieFileError::Io { .. } => crate::usage(format!(
                "{e} (your default cookie file: set {COOKIE_FILE_VAR}=PATH, pass --cookie-file \
                 PATH, or choose the open level with --open)"
            )),
            e => crate::usage(e),
        })?;
        if made {
            eprintln!(
                "sitenet {command}: made your cookie file {} (mode 0600, key id {:016x}): \
                 only sites proving it get in; copy it to every host that is to be a member",
                path.display(),
                cookie.id()
            );
        }
        Ok(Security {
            cookies: vec![cookie],
            tls: None,
            cookie_file: Some(path),
        })
    }

    /// Whether --cert, --key and --ca were given.
    pub(crate) fn has_tls(&self) -> bool {
        self.auth.has_tls()
    }
}

impl Security {
    /// What a client at this level tells its user when the node at `addr`
    /// refused it for authentication (the cookie level's handshake): the
    /// node cannot say which level it is at (a scanner must learn nothing),
    /// so the message names both levels and the way to each.
    pub(crate) fn refused_by(&self, addr: &str) -> String {
        match &self.cookie_file {
            Some(path) => format!(
                "the node at {addr} refused this client's cookie ({}): the node is open \
                 (no cookie) or holds another cookie, and this client is at the cookie level, \
                 where both sides must prove the same cookie. Start the node with the same \
                 cookie file, or pass --open to talk to an open node",
                path.display()
            ),
            None if self.tls.is_some() => format!(
                "the node at {addr} refused this client's certificate as a member: it requires \
                 a cookie too; pass the node's cookie with --cookie-file PATH"
            ),
            None => format!(
                "the node at {addr} refused this open client (no cookie): the node is members \
                 only (the cookie level). Pass the node's cookie with --cookie-file PATH, or \
                 drop --open to prove your own cookie file ({})",
                default_display()
            ),
        }
    }
}

/// Where the user's own cookie file is, for a message (the rule when no
/// variable names it).
fn default_display() -> String {
    sitenet::cookie_file::default_path(|k| std::env::var_os(k))
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| format!("${COOKIE_FILE_VAR}, else ~/.config/sitenet/cookie"))
}

/// Whether a site failed because the node refused this one's cookie (or
/// its lack of one), or could not prove its own.
pub(crate) fn refused_for_authentication(site: &sitenet::SiteRef) -> bool {
    use sitenet_protocols::{OpenError, SiteFailure};
    matches!(
        site.failure(),
        Some((SiteFailure::Open(OpenError::AuthenticationFailed(_)), _))
    )
}
