//! The acknowledgement policy of one direction: when an explicit ACK frame
//! is due. Every frame we write carries our current ack (piggy-backing); a
//! standalone ACK goes out only when a threshold is reached, when the ack
//! delay ran out, or when forced (before a graceful close).
//!
//! Whose view: `last_received` is the highest message number *we* received
//! and delivered; `ack_sent` the highest value a frame of ours carried. The
//! counters since the last carried ack are u64 and saturate: no peer can
//! make them overflow.

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AckPolicy {
    /// Ack value last carried by a frame we wrote.
    pub(crate) ack_sent: u64,
    since_messages: u64,
    since_bytes: u64,
    /// An ack must go out at once (before a graceful close).
    forced: bool,
    /// The ack delay ran out (`Timer::AckDelay` fired).
    delay_due: bool,
    /// Threshold acks wait one driver turn (see `Session::hold_acks`).
    pub(crate) hold: bool,
}

impl AckPolicy {
    /// A message of `size` wire bytes was delivered.
    pub(crate) fn on_delivered(&mut self, size: u64) {
        self.since_messages = self.since_messages.saturating_add(1);
        self.since_bytes = self.since_bytes.saturating_add(size);
    }

    pub(crate) fn force(&mut self) {
        self.forced = true;
    }

    pub(crate) fn delay_expired(&mut self) {
        self.delay_due = true;
    }

    fn threshold(&self, messages: u32, bytes: u64) -> bool {
        self.since_messages >= u64::from(messages) || self.since_bytes >= bytes
    }

    /// True if a standalone ack is waiting, held or not.
    pub(crate) fn waiting(&self, last_received: u64, messages: u32, bytes: u64) -> bool {
        last_received > self.ack_sent && (self.forced || self.threshold(messages, bytes))
    }

    /// True if a standalone ack must be written now.
    pub(crate) fn due(&self, last_received: u64, messages: u32, bytes: u64) -> bool {
        last_received > self.ack_sent
            && (self.forced || self.delay_due || (!self.hold && self.threshold(messages, bytes)))
    }

    /// A frame carrying `last_received` was written.
    pub(crate) fn carried(&mut self, last_received: u64) {
        self.ack_sent = last_received;
        self.forced = false;
        self.delay_due = false;
        self.since_bytes = 0;
        self.since_messages = 0;
    }

    /// A new channel: the peer learned our last received in the handshake.
    pub(crate) fn reset(&mut self, last_received: u64) {
        let hold = self.hold;
        *self = Self::default();
        self.ack_sent = last_received;
        self.hold = hold;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counters since the last carried ack saturate: a u32 incremented
    /// per delivered message would overflow past 2^32 messages (a panic in
    /// a debug build).
    #[test]
    fn the_counters_since_the_last_ack_never_overflow() {
        let mut a = AckPolicy {
            since_messages: u64::MAX - 1,
            since_bytes: u64::MAX - 1,
            ..AckPolicy::default()
        };
        a.on_delivered(10);
        a.on_delivered(10);
        assert_eq!(a.since_messages, u64::MAX);
        assert_eq!(a.since_bytes, u64::MAX);
        assert!(a.due(1, u32::MAX, u64::MAX));
        a.carried(1);
        assert!(!a.due(1, u32::MAX, u64::MAX));
    }

    #[test]
    fn a_held_threshold_ack_waits_but_delay_and_force_do_not() {
        let mut a = AckPolicy::default();
        for _ in 0..100 {
            a.on_delivered(1);
        }
        a.hold = true;
        assert!(a.waiting(100, 100, 1 << 20));
        assert!(!a.due(100, 100, 1 << 20));
        a.delay_expired();
        assert!(a.due(100, 100, 1 << 20));
        a.carried(100);
        a.on_delivered(1);
        a.force();
        assert!(a.due(101, 100, 1 << 20));
    }
}
