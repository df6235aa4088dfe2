//! Addresses: `tcp:HOST:PORT` (and later `unix:PATH`, `mem:NAME`).

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// Why an address string could not be parsed. The message says what form was
/// expected, so a user can fix the command line.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AddressError {
    /// No `scheme:` prefix, or one sitenet does not know.
    #[error("address {0:?} has no known scheme: expected tcp:HOST:PORT (for example tcp:127.0.0.1:7000)")]
    Scheme(String),
    /// The part after `tcp:` is not `HOST:PORT`.
    #[error("address {0:?} is not tcp:HOST:PORT (IPv6 hosts go in brackets: tcp:[::1]:7000)")]
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
}

/// Where a site can be reached. Canonical text form via `Display`, which is
/// also the form compared when a peer lists its listen addresses.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Address {
    /// TCP: host name or IP literal, and port (0 = any free port when listening).
    Tcp {
        /// Host name or IP literal (IPv6 without brackets).
        host: String,
        /// Port.
        port: u16,
    },
}

impl Address {
    /// A TCP address.
    pub fn tcp(host: impl Into<String>, port: u16) -> Self {
        Self::Tcp {
            host: host.into(),
            port,
        }
    }

    /// The `host:port` string for socket APIs.
    pub fn socket_string(&self) -> String {
        match self {
            Self::Tcp { host, port } if host.contains(':') => format!("[{host}]:{port}"),
            Self::Tcp { host, port } => format!("{host}:{port}"),
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tcp { .. } => write!(f, "tcp:{}", self.socket_string()),
        }
    }
}

impl FromStr for Address {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let Some(rest) = s.strip_prefix("tcp:") else {
            return Err(AddressError::Scheme(s.to_string()));
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
        Ok(Self::Tcp {
            host: host.to_string(),
            port,
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
    fn clear_errors() {
        assert!(matches!(
            "127.0.0.1:7000".parse::<Address>(),
            Err(AddressError::Scheme(_))
        ));
        assert!(matches!(
            "udp:1.2.3.4:5".parse::<Address>(),
            Err(AddressError::Scheme(_))
        ));
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
    }
}
