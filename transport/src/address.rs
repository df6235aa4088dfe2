//! Addresses: where a site can be reached, in one text form used on the
//! command line, in logs and in the listen lists peers exchange.
//!
//! - `tcp:HOST:PORT` — TCP (`tcp:127.0.0.1:7000`, `tcp:[::1]:7000`; port 0
//!   picks a free port when listening).
//! - `unix:PATH` — a Unix domain socket at `PATH` (`unix:/run/sitenet.sock`):
//!   sites on one machine without the TCP stack or a port to allocate.
//! - `tls:HOST:PORT` — TLS over TCP (`tls:127.0.0.1:7001`): the same socket
//!   as `tcp:`, with mutual TLS and per-site certificates (see
//!   [`crate::tls`]); only a node holding a certificate speaks it.
//! - `mem:NAME` — an in-process channel registered under `NAME`
//!   (`mem:node-a`): many sites in one process with no file descriptor at
//!   all (see [`crate::mem`]). Names are process-wide; tests take fresh ones
//!   from [`Address::unique_mem`].
//! - `SCHEME:REST` — a transport plugged in under `SCHEME` (see
//!   [`crate::plug`]): parsed only by a [`TransportRegistry`] that has it
//!   ([`TransportRegistry::parse`]), since what `REST` means is the
//!   transport's business.
//!
//! Parsing never guesses: a missing scheme, one no transport is registered
//! under, or an empty path or name, is an [`AddressError`] whose message
//! shows the expected forms.
//!
//! [`TransportRegistry`]: crate::plug::TransportRegistry
//! [`TransportRegistry::parse`]: crate::plug::TransportRegistry::parse

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

use thiserror::Error;

/// Why an address string could not be parsed. The message says what form was
/// expected, so a user can fix the command line.
///
/// # Example
///
/// ```
/// use sitenet_transport::{Address, AddressError};
///
/// // No scheme: a bare `HOST:PORT` is not guessed to be TCP.
/// let e = "127.0.0.1:7000".parse::<Address>().unwrap_err();
/// assert_eq!(e, AddressError::Scheme("127.0.0.1:7000".into()));
/// assert!(e.to_string().contains("expected tcp:HOST:PORT"));
///
/// assert!(matches!("tcp:h:99999".parse::<Address>(), Err(AddressError::Port { .. })));
/// assert!(matches!("tcp:::1:80".parse::<Address>(), Err(AddressError::HostPort(_))));
/// assert_eq!("mem:".parse::<Address>(), Err(AddressError::EmptyName("mem:".into())));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AddressError {
    /// No `scheme:` prefix (or not one a scheme name can be: see
    /// [`Unregistered`](Self::Unregistered)).
    #[error(
        "address {0:?} has no known scheme: expected tcp:HOST:PORT (for example tcp:127.0.0.1:7000), \
         tls:HOST:PORT (TLS over TCP, for example tls:127.0.0.1:7001), unix:PATH (a Unix socket, for example unix:/tmp/sitenet.sock) \
         or mem:NAME (an in-process channel, for example mem:node-a)"
    )]
    Scheme(String),
    /// A scheme that is none of the built-in ones, and no transport is
    /// registered under it where the address was parsed (plain `parse`
    /// knows only the built-in kinds; a node parses with its
    /// [`TransportRegistry`](crate::plug::TransportRegistry)).
    #[error(
        "address {address:?} has scheme {scheme:?}, which no transport is registered under: expected tcp:HOST:PORT \
         (for example tcp:127.0.0.1:7000), tls:HOST:PORT, unix:PATH, mem:NAME, or SCHEME:ADDRESS for a transport \
         registered under SCHEME (TransportRegistry::register; NodeBuilder::transport on a node)"
    )]
    Unregistered {
        /// The whole address.
        address: String,
        /// Its scheme (before the first colon).
        scheme: String,
    },
    /// A registered transport refused the part after its scheme (empty,
    /// or not in its form: [`Transport::check`](crate::plug::Transport::check)).
    #[error("address {address:?} is not valid for its transport: {reason}")]
    Invalid {
        /// The whole address.
        address: String,
        /// The transport's words.
        reason: String,
    },
    /// The part after `tcp:` or `tls:` is not `HOST:PORT`.
    #[error(
        "address {0:?} is not tcp:HOST:PORT or tls:HOST:PORT (IPv6 hosts go in brackets: tcp:[::1]:7000)"
    )]
    HostPort(String),
    /// The port is not a number from 0 to 65535.
    #[error("address {addr:?} has port {port:?}, expected a number from 0 to 65535")]
    Port {
        /// The whole address.
        addr: String,
        /// The offending port text.
        port: String,
    },
    /// The host is empty.
    #[error("address {0:?} has an empty host")]
    EmptyHost(String),
    /// `unix:` with nothing after it: a socket needs a file path.
    #[error(
        "address {0:?} has an empty path: expected unix:PATH (for example unix:/tmp/sitenet.sock)"
    )]
    EmptyPath(String),
    /// `mem:` with nothing after it: an in-process listener is found by name.
    #[error("address {0:?} has an empty name: expected mem:NAME (for example mem:node-a)")]
    EmptyName(String),
}

/// Where a site can be reached. Canonical text form via `Display`, which is
/// also the form compared when a peer lists its listen addresses.
///
/// # Example
///
/// ```
/// use sitenet_transport::Address;
///
/// let tcp: Address = "tcp:127.0.0.1:7000".parse()?;
/// assert_eq!(tcp, Address::tcp("127.0.0.1", 7000));
/// let v6: Address = "tcp:[::1]:7000".parse()?;
/// assert_eq!(v6, Address::tcp("::1", 7000)); // stored without brackets
/// assert_eq!(v6.to_string(), "tcp:[::1]:7000");
/// assert_eq!(v6.socket_string(), "[::1]:7000");
///
/// let unix: Address = "unix:/tmp/site.sock".parse()?;
/// assert_eq!(unix, Address::unix("/tmp/site.sock"));
/// let mem: Address = "mem:node-a".parse()?;
/// assert_eq!(mem, Address::mem("node-a"));
///
/// // `Display` gives the canonical form, which parses back.
/// for a in [tcp, v6, unix, mem] {
///     assert_eq!(a.to_string().parse::<Address>()?, a);
/// }
/// # Ok::<(), sitenet_transport::AddressError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Address {
    /// TCP: host name or IP literal, and port (0 = any free port when listening).
    Tcp {
        /// Host name or IP literal (IPv6 without brackets).
        host: String,
        /// Port.
        port: u16,
    },
    /// TLS over TCP: host and port as for [`Address::Tcp`]. The channel is
    /// a TCP socket; the TransObject runs TLS over it (see [`crate::tls`]).
    Tls {
        /// Host name or IP literal (IPv6 without brackets).
        host: String,
        /// Port.
        port: u16,
    },
    /// A Unix domain socket: the path of the socket file. Binding replaces
    /// a stale socket file that no one listens on, never a live one.
    Unix {
        /// The socket file (relative paths are relative to the working
        /// directory of the process that binds or connects).
        path: PathBuf,
    },
    /// An in-process channel: the name a [`MemListener`](crate::mem::MemListener)
    /// is registered under in this process. Meaningless to other processes.
    Mem {
        /// The registered name (not empty once parsed).
        name: String,
    },
    /// An address of a plugged transport (see [`crate::plug`]): `rest`
    /// means what the transport registered under `scheme` says. Only a
    /// [`TransportRegistry`](crate::plug::TransportRegistry) holding that
    /// transport parses, dials or binds it.
    Plugged {
        /// The scheme name, without the colon (never a built-in one once
        /// parsed).
        scheme: String,
        /// Everything after `scheme:` (not empty once parsed).
        rest: String,
    },
}

/// The built-in kinds' schemes, which no plugged transport may take.
pub(crate) const BUILT_IN_SCHEMES: [&str; 4] = ["tcp", "tls", "unix", "mem"];

/// Whether `s` can be a scheme name: a lowercase ASCII letter, then at most
/// 31 lowercase letters, digits, `+`, `-` or `.` (a URI scheme, lowercase
/// only: scheme names are compared exactly, never case-folded).
pub fn is_scheme_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 32
        && b[0].is_ascii_lowercase()
        && b[1..]
            .iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"+-.".contains(&c))
}

impl Address {
    /// A TCP address.
    pub fn tcp(host: impl Into<String>, port: u16) -> Self {
        Self::Tcp {
            host: host.into(),
            port,
        }
    }

    /// A TLS-over-TCP address.
    pub fn tls(host: impl Into<String>, port: u16) -> Self {
        Self::Tls {
            host: host.into(),
            port,
        }
    }

    /// Whether channels at this address run TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, Self::Tls { .. })
    }

    /// A Unix socket address. Not checked here: binding or connecting an
    /// empty path fails with `InvalidInput`.
    pub fn unix(path: impl Into<PathBuf>) -> Self {
        Self::Unix { path: path.into() }
    }

    /// An in-process address. Not checked here: binding or connecting an
    /// empty name fails with `InvalidInput`.
    pub fn mem(name: impl Into<String>) -> Self {
        Self::Mem { name: name.into() }
    }

    /// An address of the transport plugged in under `scheme`. Not checked
    /// here; parse with a [`TransportRegistry`](crate::plug::TransportRegistry)
    /// to have it checked.
    pub fn plugged(scheme: impl Into<String>, rest: impl Into<String>) -> Self {
        Self::Plugged {
            scheme: scheme.into(),
            rest: rest.into(),
        }
    }

    /// The scheme: `tcp`, `tls`, `unix`, `mem` or a plugged transport's.
    pub fn scheme(&self) -> &str {
        match self {
            Self::Tcp { .. } => "tcp",
            Self::Tls { .. } => "tls",
            Self::Unix { .. } => "unix",
            Self::Mem { .. } => "mem",
            Self::Plugged { scheme, .. } => scheme,
        }
    }

    /// A `mem:` address whose name no listener has now and that this
    /// function never returned before in this process: `mem:PREFIX#N`.
    /// The `mem:` counterpart of port 0, for tests and for nodes that only
    /// need *some* in-process address. Hand-picked names of the form
    /// `PREFIX#N` could still collide with a later call; avoid them.
    ///
    /// ```
    /// use sitenet_transport::{Address, Listener};
    ///
    /// let a = Address::unique_mem("test");
    /// let b = Address::unique_mem("test");
    /// assert_ne!(a, b);
    /// assert!(a.to_string().starts_with("mem:test#"));
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// // Free now, so binding it succeeds.
    /// let listener = Listener::bind(&a).await?;
    /// assert_eq!(listener.local_address()?, a);
    /// # Ok::<(), std::io::Error>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn unique_mem(prefix: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        loop {
            let name = format!("{prefix}#{}", NEXT.fetch_add(1, Ordering::Relaxed));
            if !crate::mem::MemListener::is_bound(&name) {
                return Self::Mem { name };
            }
        }
    }

    /// The string a socket API takes: `host:port` for TCP (IPv6 hosts in
    /// brackets), the path for Unix (lossily converted if it is not UTF-8),
    /// the name for mem, what follows the scheme for a plugged transport.
    pub fn socket_string(&self) -> String {
        match self {
            Self::Tcp { host, port } | Self::Tls { host, port } if host.contains(':') => {
                format!("[{host}]:{port}")
            }
            Self::Tcp { host, port } | Self::Tls { host, port } => format!("{host}:{port}"),
            Self::Unix { path } => path.display().to_string(),
            Self::Mem { name } => name.clone(),
            Self::Plugged { rest, .. } => rest.clone(),
        }
    }
}

impl fmt::Display for Address {
    /// The canonical text form, `tcp:HOST:PORT`, `unix:PATH`, `mem:NAME` or
    /// `SCHEME:REST`, which parses back to the same address (a non-UTF-8
    /// Unix path is shown lossily and does not; a plugged one, with the
    /// registry that has its transport).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tcp { .. } => write!(f, "tcp:{}", self.socket_string()),
            Self::Tls { .. } => write!(f, "tls:{}", self.socket_string()),
            Self::Unix { path } => write!(f, "unix:{}", path.display()),
            Self::Mem { name } => write!(f, "mem:{name}"),
            Self::Plugged { scheme, rest } => write!(f, "{scheme}:{rest}"),
        }
    }
}

/// An address as its text, so an [`Address`] goes wherever text is taken
/// (`NodeBuilder::listen(addr)`).
impl From<Address> for String {
    fn from(a: Address) -> String {
        a.to_string()
    }
}

impl FromStr for Address {
    type Err = AddressError;

    /// Parses `tcp:HOST:PORT`, `unix:PATH` (everything after `unix:` is the
    /// path, taken literally) or `mem:NAME` (everything after `mem:`). Any
    /// other scheme is [`AddressError::Unregistered`]: plugged transports'
    /// addresses parse with their registry
    /// ([`TransportRegistry::parse`](crate::plug::TransportRegistry::parse)).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(AddressError::EmptyPath(s.to_string()));
            }
            return Ok(Self::Unix { path: path.into() });
        }
        if let Some(name) = s.strip_prefix("mem:") {
            if name.is_empty() {
                return Err(AddressError::EmptyName(s.to_string()));
            }
            return Ok(Self::Mem {
                name: name.to_string(),
            });
        }
        let (tls, rest) = match (s.strip_prefix("tcp:"), s.strip_prefix("tls:")) {
            (Some(rest), _) => (false, rest),
            (None, Some(rest)) => (true, rest),
            (None, None) => {
                return Err(match s.split_once(':') {
                    Some((scheme, _)) if is_scheme_name(scheme) => AddressError::Unregistered {
                        address: s.to_string(),
                        scheme: scheme.to_string(),
                    },
                    _ => AddressError::Scheme(s.to_string()),
                })
            }
        };
        let (host, port) = if let Some(r) = rest.strip_prefix('[') {
            let (h, p) = r
                .split_once("]:")
                .ok_or_else(|| AddressError::HostPort(s.to_string()))?;
            (h, p)
        } else {
            let (h, p) = rest
                .rsplit_once(':')
                .ok_or_else(|| AddressError::HostPort(s.to_string()))?;
            if h.contains(':') {
                return Err(AddressError::HostPort(s.to_string()));
            }
            (h, p)
        };
        if host.is_empty() {
            return Err(AddressError::EmptyHost(s.to_string()));
        }
        let port = port.parse::<u16>().map_err(|_| AddressError::Port {
            addr: s.to_string(),
            port: port.to_string(),
        })?;
        let host = host.to_string();
        Ok(if tls {
            Self::Tls { host, port }
        } else {
            Self::Tcp { host, port }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_canonically() {
        let a: Address = "tcp:127.0.0.1:7000".parse().unwrap();
        assert_eq!(a, Address::tcp("127.0.0.1", 7000));
        assert_eq!(a.to_string(), "tcp:127.0.0.1:7000");
        let b: Address = "tcp:[::1]:0".parse().unwrap();
        assert_eq!(b, Address::tcp("::1", 0));
        assert_eq!(b.to_string(), "tcp:[::1]:0");
        assert_eq!(
            "tcp:localhost:1"
                .parse::<Address>()
                .unwrap()
                .socket_string(),
            "localhost:1"
        );
    }

    #[test]
    fn tls_parses_like_tcp_and_prints_back() {
        let a: Address = "tls:127.0.0.1:7001".parse().unwrap();
        assert_eq!(a, Address::tls("127.0.0.1", 7001));
        assert!(a.is_tls());
        assert_eq!(a.to_string(), "tls:127.0.0.1:7001");
        assert_eq!(a.socket_string(), "127.0.0.1:7001");
        let b: Address = "tls:[::1]:0".parse().unwrap();
        assert_eq!(b.to_string(), "tls:[::1]:0");
        assert!(!"tcp:h:1".parse::<Address>().unwrap().is_tls());
        assert!(matches!(
            "tls:h".parse::<Address>(),
            Err(AddressError::HostPort(_))
        ));
        assert!(matches!(
            "tls::1".parse::<Address>(),
            Err(AddressError::EmptyHost(_))
        ));
    }

    #[test]
    fn clear_errors() {
        assert!(matches!(
            "127.0.0.1:7000".parse::<Address>(),
            Err(AddressError::Scheme(_))
        ));
        // A scheme name, but no transport is registered under it.
        assert_eq!(
            "udp:1.2.3.4:5".parse::<Address>(),
            Err(AddressError::Unregistered {
                address: "udp:1.2.3.4:5".into(),
                scheme: "udp".into()
            })
        );
        let msg = "udp:1.2.3.4:5".parse::<Address>().unwrap_err().to_string();
        assert!(msg.contains("no transport is registered"), "{msg}");
        assert!(matches!(
            "tcp:127.0.0.1".parse::<Address>(),
            Err(AddressError::HostPort(_))
        ));
        assert!(matches!(
            "tcp:::1:80".parse::<Address>(),
            Err(AddressError::HostPort(_))
        ));
        assert!(matches!(
            "tcp:h:99999".parse::<Address>(),
            Err(AddressError::Port { .. })
        ));
        assert!(matches!(
            "tcp:h:x".parse::<Address>(),
            Err(AddressError::Port { .. })
        ));
        assert!(matches!(
            "tcp::80".parse::<Address>(),
            Err(AddressError::EmptyHost(_))
        ));
        let msg = "bogus".parse::<Address>().unwrap_err().to_string();
        assert!(msg.contains("tcp:HOST:PORT"), "{msg}");
        assert!(msg.contains("unix:PATH"), "{msg}");
        assert!(msg.contains("mem:NAME"), "{msg}");
    }

    #[test]
    fn unix_and_mem_round_trip() {
        let u: Address = "unix:/tmp/sitenet test.sock".parse().unwrap();
        assert_eq!(u, Address::unix("/tmp/sitenet test.sock"));
        assert_eq!(u.to_string(), "unix:/tmp/sitenet test.sock");
        assert_eq!(u.socket_string(), "/tmp/sitenet test.sock");
        let r: Address = "unix:relative/s".parse().unwrap();
        assert_eq!(r.to_string().parse::<Address>().unwrap(), r);

        let m: Address = "mem:node-a".parse().unwrap();
        assert_eq!(m, Address::mem("node-a"));
        assert_eq!(m.to_string(), "mem:node-a");
        // Everything after the scheme is the name, colons included.
        let m2: Address = "mem:a:b".parse().unwrap();
        assert_eq!(m2, Address::mem("a:b"));
        assert_eq!(m2.to_string().parse::<Address>().unwrap(), m2);

        let x = Address::unique_mem("t");
        let y = Address::unique_mem("t");
        assert_ne!(x, y);
        assert_eq!(x.to_string().parse::<Address>().unwrap(), x);
    }

    #[test]
    fn unix_and_mem_clear_errors() {
        let e = "unix:".parse::<Address>().unwrap_err();
        assert_eq!(e, AddressError::EmptyPath("unix:".into()));
        let msg = e.to_string();
        assert!(
            msg.contains("empty path") && msg.contains("unix:PATH"),
            "{msg}"
        );

        let e = "mem:".parse::<Address>().unwrap_err();
        assert_eq!(e, AddressError::EmptyName("mem:".into()));
        let msg = e.to_string();
        assert!(
            msg.contains("empty name") && msg.contains("mem:NAME"),
            "{msg}"
        );

        // Scheme names are exact: no case folding, no URL forms.
        for bad in ["UNIX:/x", "mem", "memory:x", "file:/x", ""] {
            let msg = bad.parse::<Address>().unwrap_err().to_string();
            assert!(
                msg.contains("tcp:HOST:PORT")
                    && msg.contains("unix:PATH")
                    && msg.contains("mem:NAME"),
                "{bad:?}: {msg}"
            );
        }
    }
}
