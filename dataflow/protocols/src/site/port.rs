//! Ports: a many-to-one asynchronous channel read at its home as a
//! stream, a list whose tail is an unbound dataflow variable.
//!
//! A send goes to the port's home, which binds the stream's tail to a
//! cell holding the message and a fresh variable (the new tail). Sends
//! from one site travel in order (sitenet's FIFO between two sites), so
//! the stream holds each site's messages in the order it sent them. The
//! stream is variables like any other: a reader on another site waits on
//! them.

use sitenet_protocols::SiteId;

use super::{HomeState, Site};
use crate::entity::{EntityId, Kind, OpId, Value};
use crate::outcome::{Answer, FailMode, OpError};
use crate::wire::{Refused, Wire};

impl Site {
    pub(super) fn port_send(
        &mut self,
        op: Option<OpId>,
        port: EntityId,
        value: Value,
        mode: FailMode,
    ) {
        if port.home == self.me {
            let outcome = self.append(port, value);
            if let Some(op) = op {
                self.finish(op, outcome);
            }
            return;
        }
        if let Some(err) = self.refused_by_fault(port, mode) {
            self.release_value(&value);
            if let Some(op) = op {
                self.finish(op, Err(err));
            }
            return;
        }
        self.post(port.home, Wire::PortSend { port, value, op });
    }

    /// Appends `value` to the stream of a port made here.
    fn append(&mut self, port: EntityId, value: Value) -> Result<Answer, OpError> {
        // (A peer may name one of our entities with the port's kind.)
        let tail = match self.homes.get(&port.serial).map(|h| (h.kind, &h.state)) {
            Some((Kind::Port, HomeState::Port { tail })) if port.kind == Kind::Port => *tail,
            _ => {
                self.release_value(&value);
                return Err(OpError::Gone);
            }
        };
        // The new tail: held by the port, and named by the cell.
        let rest = self.new_var(false);
        if let Some(h) = self.homes.get_mut(&port.serial) {
            h.state = HomeState::Port { tail: rest };
        }
        let cell = Value::stream_cell(value, rest);
        // `new_var`'s handle is the port's; the cell needs its own.
        self.acquire(rest);
        let outcome = self.bind_local(tail, cell);
        // The port no longer holds the old tail.
        self.release(tail);
        outcome
    }

    pub(super) fn port_on_send(
        &mut self,
        from: SiteId,
        port: EntityId,
        value: Value,
        op: Option<OpId>,
    ) {
        if port.home != self.me {
            self.release_value(&value);
            return;
        }
        let outcome = self.append(port, value);
        if let Some(op) = op {
            let refused = outcome.err().map(|_| Refused::Gone);
            self.post(from, Wire::PortAck { port, op, refused });
        }
    }
}
