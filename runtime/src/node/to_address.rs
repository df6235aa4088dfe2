//! [`ToAddress`]: what [`Node::site`](crate::Node::site) takes — an
//! address as text or one already parsed.

use sitenet_transport::{Address, AddressError, TransportRegistry};

/// An address a node can call: text (`"tcp:127.0.0.1:7000"`, parsed with
/// the node's transports, plugged ones included) or an [`Address`] parsed
/// already — so a program that keeps typed addresses passes them as they
/// are, and one that reads them from a configuration passes the text.
///
/// ```
/// use sitenet_runtime::{Address, Node};
///
/// // A typed address listens too (it converts to its text).
/// let here: Address = "tcp:127.0.0.1:0".parse()?;
/// let node = Node::builder().listen(here).start()?;
/// let typed: Address = "tcp:127.0.0.1:7000".parse()?;
/// let a = node.site(&typed)?;
/// let b = node.site("tcp:127.0.0.1:7000")?;
/// let c = node.site(typed.to_string())?;
/// assert!(a == b && b == c); // one address, one site
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait ToAddress {
    /// The address, parsed with `transports` if it is text.
    fn to_address(&self, transports: &TransportRegistry) -> Result<Address, AddressError>;
}

impl ToAddress for str {
    fn to_address(&self, transports: &TransportRegistry) -> Result<Address, AddressError> {
        transports.parse(self)
    }
}

impl ToAddress for String {
    fn to_address(&self, transports: &TransportRegistry) -> Result<Address, AddressError> {
        transports.parse(self)
    }
}

impl ToAddress for Address {
    fn to_address(&self, _: &TransportRegistry) -> Result<Address, AddressError> {
        Ok(self.clone())
    }
}

impl<T: ToAddress + ?Sized> ToAddress for &T {
    fn to_address(&self, transports: &TransportRegistry) -> Result<Address, AddressError> {
        (**self).to_address(transports)
    }
}
