//! [`TransportRegistry`]: scheme name → plugged [`Transport`], and the
//! parsing, dialing and binding of addresses through it.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::sync::Arc;

use thiserror::Error;

use super::boxed::{intern, unregistered, PluggedChannel, PluggedListener};
use super::transport::Transport;
use crate::address::{is_scheme_name, Address, AddressError, BUILT_IN_SCHEMES};
use crate::channel::{BoundListener, Channel, TcpTuning};

/// Why a transport could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RegisterError {
    /// The name is one of the built-in kinds' (`tcp`, `tls`, `unix`,
    /// `mem`): those are dispatched statically and cannot be replaced.
    #[error(
        "scheme {0:?} is built in (tcp, tls, unix, mem); register the transport under another name"
    )]
    BuiltIn(String),
    /// The name is not a scheme: a lowercase ASCII letter, then at most 31
    /// lowercase letters, digits, `+`, `-` or `.` (so that `NAME:REST`
    /// splits at the first colon and reads the same everywhere).
    #[error(
        "{0:?} is not a scheme name: expected a lowercase letter, then at most 31 lowercase letters, digits, '+', '-' or '.'"
    )]
    Name(String),
    /// A transport is registered under this scheme already.
    #[error("a transport is registered under scheme {0:?} already")]
    Taken(String),
}

/// Scheme name → [`Transport`]: what a node dials and listens through
/// beyond the built-in kinds. Cheap to clone (an `Arc` inside); clones
/// share the transports.
///
/// Parsing with it ([`parse`](Self::parse)) accepts the built-in forms
/// and `SCHEME:REST` for a registered scheme; a scheme name no transport
/// is registered under is [`AddressError::Unregistered`].
///
/// ```
/// use sitenet_transport::plug::{RegisterError, TransportRegistry};
/// use sitenet_transport::{Address, AddressError};
///
/// let empty = TransportRegistry::new();
/// // Built-in forms parse with any registry; other schemes must be registered.
/// assert_eq!(empty.parse("mem:a"), Ok(Address::mem("a")));
/// assert!(matches!(empty.parse("pipe:a"), Err(AddressError::Unregistered { .. })));
/// // Built-in names are not for the taking.
/// # struct T;
/// # impl sitenet_transport::plug::Transport for T {
/// #     fn connect<'a>(&'a self, _: &'a str) -> sitenet_transport::plug::BoxFuture<'a, std::io::Result<Box<dyn sitenet_transport::plug::TransportChannel>>> { unimplemented!() }
/// #     fn bind(&self, _: &str) -> std::io::Result<Box<dyn sitenet_transport::plug::TransportListener>> { unimplemented!() }
/// # }
/// let mut r = TransportRegistry::new();
/// let e = r.register("tcp", std::sync::Arc::new(T)).unwrap_err();
/// assert_eq!(e, RegisterError::BuiltIn("tcp".into()));
/// // Registering chains; a clone shares what was registered so far.
/// r.register("pipe", std::sync::Arc::new(T))?.register("quic", std::sync::Arc::new(T))?;
/// assert_eq!(r.clone().schemes().collect::<Vec<_>>(), ["pipe", "quic"]);
/// assert_eq!(r.parse("pipe:a"), Ok(Address::plugged("pipe", "a")));
/// # Ok::<(), RegisterError>(())
/// ```
#[derive(Clone, Default)]
pub struct TransportRegistry {
    map: Arc<BTreeMap<&'static str, Arc<dyn Transport>>>,
}

impl TransportRegistry {
    /// A registry with no plugged transport: the built-in kinds only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `transport` under `scheme` (without the colon). Refused
    /// for a built-in name, a name that is not a scheme, or one taken.
    pub fn register(
        &mut self,
        scheme: &str,
        transport: Arc<dyn Transport>,
    ) -> Result<&mut Self, RegisterError> {
        if BUILT_IN_SCHEMES.contains(&scheme) {
            return Err(RegisterError::BuiltIn(scheme.into()));
        }
        if !is_scheme_name(scheme) {
            return Err(RegisterError::Name(scheme.into()));
        }
        if self.map.contains_key(scheme) {
            return Err(RegisterError::Taken(scheme.into()));
        }
        Arc::make_mut(&mut self.map).insert(intern(scheme), transport);
        Ok(self)
    }

    /// Registers every transport of `other` here (refused, with nothing
    /// changed, if a scheme is taken).
    pub fn extend(&mut self, other: &TransportRegistry) -> Result<&mut Self, RegisterError> {
        if let Some(s) = other.schemes().find(|s| self.map.contains_key(s)) {
            return Err(RegisterError::Taken(s.into()));
        }
        let map = Arc::make_mut(&mut self.map);
        for (s, t) in other.map.iter() {
            map.insert(s, t.clone());
        }
        Ok(self)
    }

    /// The transport registered under `scheme`.
    pub fn get(&self, scheme: &str) -> Option<&Arc<dyn Transport>> {
        self.map.get(scheme)
    }

    /// The registered schemes, in name order.
    pub fn schemes(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.map.keys().copied()
    }

    /// True when no transport is registered.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Parses `s`: a built-in form as [`Address`]'s `FromStr` does, or
    /// `SCHEME:REST` for a registered scheme (`REST` not empty, and
    /// accepted by the transport's [`Transport::check`]).
    pub fn parse(&self, s: &str) -> Result<Address, AddressError> {
        match s.parse::<Address>() {
            Err(AddressError::Unregistered { scheme, .. }) if self.map.contains_key(&*scheme) => {
                let rest = &s[scheme.len() + 1..];
                let invalid = |reason: String| AddressError::Invalid {
                    address: s.to_string(),
                    reason,
                };
                if rest.is_empty() {
                    return Err(invalid(format!(
                        "nothing after {scheme}: (expected {scheme}:ADDRESS)"
                    )));
                }
                self.map[&*scheme].check(rest).map_err(invalid)?;
                Ok(Address::Plugged {
                    scheme,
                    rest: rest.to_string(),
                })
            }
            other => other,
        }
    }

    /// The transport for a plugged address, or why there is none.
    fn lookup<'a>(
        &'a self,
        scheme: &str,
        addr: &Address,
    ) -> io::Result<(&'static str, &'a dyn Transport)> {
        match self.map.get_key_value(scheme) {
            Some((name, t)) => Ok((name, &**t)),
            None => Err(unregistered(addr)),
        }
    }

    /// Connects to `addr`: through its transport for a plugged address,
    /// else as [`Channel::connect_tuned`] does.
    pub async fn connect(&self, addr: &Address, tuning: TcpTuning) -> io::Result<Channel> {
        match addr {
            Address::Plugged { scheme, rest } => {
                let (scheme, t) = self.lookup(scheme, addr)?;
                let inner = t.connect(rest).await?;
                Ok(Channel::Plugged(PluggedChannel::interned(scheme, inner)))
            }
            _ => Channel::connect_tuned(addr, tuning).await,
        }
    }

    /// Binds `addr` now: through its transport for a plugged address, else
    /// as [`BoundListener::bind`] does.
    pub fn bind(&self, addr: &Address) -> io::Result<BoundListener> {
        match addr {
            Address::Plugged { scheme, rest } => {
                let (scheme, t) = self.lookup(scheme, addr)?;
                let inner = t.bind(rest)?;
                Ok(BoundListener::plugged(PluggedListener::interned(
                    scheme, inner,
                )))
            }
            _ => BoundListener::bind(addr),
        }
    }
}

impl fmt::Debug for TransportRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.schemes()).finish()
    }
}
