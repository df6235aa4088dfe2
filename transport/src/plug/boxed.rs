//! A plugged transport's channel and listener behind trait objects
//! ([`PluggedChannel`], [`PluggedListener`]): what [`crate::Channel`] and
//! [`crate::Listener`] hold for a transport that is not built in.

use std::any::Any;
use std::collections::HashSet;
use std::fmt;
use std::io;
use std::sync::LazyLock;

use parking_lot::Mutex;

use super::transport::{TransportChannel, TransportListener};
use crate::address::{Address, AddressError};

/// A channel of a plugged transport, in [`crate::Channel::Plugged`]: the
/// transport's channel and the scheme it was registered under. The fault
/// injector's wrapper ([`crate::fault::FaultyChannel`]) is one too, under
/// the scheme of the channel it wraps.
pub struct PluggedChannel {
    scheme: &'static str,
    inner: Box<dyn TransportChannel>,
}

impl PluggedChannel {
    /// `inner`, a channel of the transport registered as `scheme`. The
    /// scheme name is interned (kept for the life of the process, once
    /// per distinct name) so [`crate::Channel::scheme`] stays a
    /// `&'static str`.
    pub fn new(scheme: &str, inner: Box<dyn TransportChannel>) -> Self {
        Self::interned(intern(scheme), inner)
    }

    /// [`new`](Self::new) for a scheme name that lives for the whole
    /// process already (a built-in one, or one interned before), with no
    /// lookup in the table of names.
    pub(crate) fn interned(scheme: &'static str, inner: Box<dyn TransportChannel>) -> Self {
        Self { scheme, inner }
    }

    /// The scheme the transport is registered under.
    pub fn scheme(&self) -> &'static str {
        self.scheme
    }

    /// The transport's channel.
    pub fn get(&self) -> &dyn TransportChannel {
        &*self.inner
    }

    /// The transport's channel as its own type `T`, if it is one and says
    /// so ([`TransportChannel::as_any`]): how the code that made a channel
    /// reaches what only its type offers (the fault injector's wrapper
    /// answers [`crate::fault::FaultyChannel::of`] this way).
    pub fn downcast_ref<T: Any>(&self) -> Option<&T> {
        self.inner.as_any()?.downcast_ref()
    }
}

impl fmt::Debug for PluggedChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluggedChannel")
            .field("scheme", &self.scheme)
            .field("peer", &self.inner.peer())
            .finish()
    }
}

/// A listener of a plugged transport, in [`crate::Listener::Plugged`].
pub struct PluggedListener {
    scheme: &'static str,
    inner: Box<dyn TransportListener>,
}

impl PluggedListener {
    /// `inner`, a listener of the transport registered as `scheme`.
    pub fn new(scheme: &str, inner: Box<dyn TransportListener>) -> Self {
        Self::interned(intern(scheme), inner)
    }

    /// [`new`](Self::new) for a scheme name interned already.
    pub(crate) fn interned(scheme: &'static str, inner: Box<dyn TransportListener>) -> Self {
        Self { scheme, inner }
    }

    /// The address bound, scheme included.
    pub fn local_address(&self) -> io::Result<Address> {
        Ok(Address::plugged(self.scheme, self.inner.local_address()?))
    }

    /// The next connection ([`crate::Listener::accept`] makes it a
    /// [`crate::Channel::Plugged`]).
    pub async fn accept(&self) -> io::Result<PluggedChannel> {
        let ch = self.inner.accept().await?;
        Ok(PluggedChannel::interned(self.scheme, ch))
    }
}

impl fmt::Debug for PluggedListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("PluggedListener");
        d.field("scheme", &self.scheme);
        if let Ok(a) = self.inner.local_address() {
            d.field("address", &a);
        }
        d.finish()
    }
}

/// The error for a plugged address met where its transport is not known
/// (a plain [`crate::Channel::connect`], or another registry): `Unsupported`,
/// carrying the [`AddressError::Unregistered`].
pub(crate) fn unregistered(addr: &Address) -> io::Error {
    let scheme = match addr {
        Address::Plugged { scheme, .. } => scheme.clone(),
        _ => String::new(),
    };
    io::Error::new(
        io::ErrorKind::Unsupported,
        AddressError::Unregistered {
            address: addr.to_string(),
            scheme,
        },
    )
}

/// Scheme names, kept for the life of the process: one copy per distinct
/// name ever registered, so channels can name theirs as `&'static str`.
pub(super) fn intern(s: &str) -> &'static str {
    static NAMES: LazyLock<Mutex<HashSet<&'static str>>> = LazyLock::new(Default::default);
    let mut names = NAMES.lock();
    match names.get(s) {
        Some(n) => n,
        None => {
            let n: &'static str = Box::leak(s.to_owned().into_boxed_str());
            names.insert(n);
            n
        }
    }
}
