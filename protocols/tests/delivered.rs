//! Delivery tracking, sans-IO: a session reports exactly the tracked
//! messages the peer acknowledged, in number order, once each; a tracked
//! one-way message's token never goes on the wire.

mod common;

use bytes::Bytes;
use common::{slice, Pair};
use sitenet_protocols::{OutMessage, Priority, SessionConfig};

#[test]
fn acknowledged_tracked_messages_are_reported_once_in_order_and_tokens_stay_home() {
    let mut pair = Pair::new(16 * 1024, SessionConfig::default());
    for i in 0..40u32 {
        // Small (packed) and large (fragmented) ones, every third tracked.
        let body = if i % 5 == 0 { 40_000 } else { 50 };
        let mut m = OutMessage::new(
            Priority::default(),
            i,
            Bytes::new(),
            vec![slice(i as usize, body)],
        );
        m.corr = 1000 + i as u64;
        m.tracked = i % 3 == 0;
        pair.a.send(m);
    }
    pair.pump().unwrap();
    let want: Vec<u64> = (0..40).filter(|i| i % 3 == 0).map(|i| 1000 + i).collect();
    assert_eq!(pair.a.session.take_delivered(), want);
    assert!(pair.a.session.take_delivered().is_empty(), "reported once");
    assert_eq!(pair.b.delivered.len(), 40);
    assert!(
        pair.b.delivered.iter().all(|m| m.prelude.corr == 0),
        "a one-way message's token is not sent"
    );
}
