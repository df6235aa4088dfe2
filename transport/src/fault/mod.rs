//! A seeded fault-injecting channel wrapper: cuts (at any byte offset, mid-frame
//! too), read delay and black-holing (a partition), driven by one
//! [`FaultInjector`] shared by a test.
//!
//! Why: sitenet's reconnection, resend and failure-detection logic is only
//! believable if it is exercised against real losses on real sockets. A cut
//! here really loses data: the writer's bytes past the cut offset never reach
//! the socket, the socket is shut down so both peers see the channel end, and
//! bytes received but not yet read are dropped. Every random decision comes
//! from one RNG seeded with [`FaultInjector::seed`], so a failing run can be
//! replayed (see [`FaultInjector::seed_report`]).
//!
//! How it plugs in: [`FaultInjector::wrap`] wraps any [`Channel`](crate::Channel)
//! in a [`FaultyChannel`] and returns it as a plugged channel
//! ([`Channel::Plugged`](crate::Channel::Plugged), under the scheme of what
//! it wraps), which the channel driver uses exactly like any other channel
//! (`readable`/`try_read`/`writable`/`try_write2`/`peer`), whatever it
//! wraps: TCP, Unix socket, mem or plugged channel (a cut shuts a socket
//! down in both directions, and closes both pipes of a mem channel). So the
//! production [`Channel`](crate::Channel) has no variant for faults, and its
//! built-in kinds stay statically dispatched; a wrapped channel pays a
//! virtual call, as any plugged one does. [`FaultyChannel::of`] finds the
//! wrapper in a channel again, for a test that reads its offsets. The
//! injector keeps a weak handle to every channel it wrapped, so its controls
//! ([`cut_all`](FaultInjector::cut_all), [`cut_after`](FaultInjector::cut_after),
//! [`random_cuts`](FaultInjector::random_cuts),
//! [`set_blackhole`](FaultInjector::set_blackhole),
//! [`set_delay`](FaultInjector::set_delay)) can be called from any thread
//! while the drivers run.
//!
//! Offsets: a channel's *write offset* is the number of bytes its writer has
//! been told were written (`try_write2` results), including bytes swallowed by
//! a black hole. Cuts are placed on write offsets, so "cut at N" means the peer
//! receives at most the first N bytes of the stream, then end of stream (or a
//! reset).
//!
//! Determinism: the seed fixes the sequence of random draws; which channel
//! gets which draw follows the order of [`FaultInjector::wrap`] calls and
//! control calls. A test that wraps channels in a fixed order gets the same
//! cut offsets in every run with the same seed.

mod channel;
mod controls;
mod delay;
mod injector;
#[cfg(test)]
mod tests;

pub use channel::FaultyChannel;
pub use controls::DELAY_QUEUE_LIMIT;
pub use injector::{FaultInjector, SeedReportGuard, SEED_ENV};
