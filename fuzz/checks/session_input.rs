//! Arbitrary bytes into a working session's input ByteBuffer, in chunks
//! chosen by the input: never panics, never stalls (a full input buffer after
//! `Ok` would mean a frame that can never complete), and the reassembly
//! budget is whole again once the session is dropped.

use bytes::Bytes;
use sitenet_protocols::handshake::MIN_BUFFER;
use sitenet_protocols::{
    ByteBuffer, ChannelParams, OutMessage, Priority, ReassemblyBudget, Session, SessionConfig,
};
use std::time::Instant;

/// The check, for one input.
pub fn check(data: &[u8]) {
    if data.len() < 4 {
        return;
    }
    let (ctl, stream) = data.split_at(4);
    // Negotiated buffer between 4 KiB and 68 KiB; a small maximum message
    // sometimes, so that the size checks are reached.
    let buffer_size = MIN_BUFFER + (u16::from_le_bytes([ctl[0], ctl[1]]) as u32);
    let max_message = if ctl[2] & 1 == 0 { 1 << 20 } else { 600 };
    let chunk = 1 + ctl[3] as usize * 16;
    let budget = ReassemblyBudget::new(1 << 20);
    let cfg = SessionConfig {
        max_message,
        ..SessionConfig::default()
    };
    let mut s = Session::new(cfg, budget.clone());
    s.channel_up(
        ChannelParams {
            buffer_size,
            peer_max_message: 1 << 20,
            peer_last_received: 0,
            generation: 1,
        },
        Instant::now(),
    )
    .unwrap();
    // Send three messages so that acks 1..=3 are valid.
    for i in 0..3 {
        s.queue(OutMessage::new(
            Priority::Medium,
            i,
            Bytes::new(),
            vec![Bytes::from_static(b"0123456789")],
        ))
        .unwrap();
    }
    let now = Instant::now();
    let mut sink = ByteBuffer::new(buffer_size as usize);
    s.poll_transmit(now, &mut sink);

    let mut input = ByteBuffer::new(buffer_size as usize);
    let mut off = 0;
    let mut last = 0;
    while off < stream.len() {
        if input.free() == 0 && s.input_blocked() {
            // Backpressure: the reassembly budget is short. Not a stall.
            break;
        }
        assert!(input.free() > 0, "input full after Ok: the session stalled");
        let n = chunk.min(input.free()).min(stream.len() - off);
        input.push(&stream[off..off + n]);
        off += n;
        let r = s.handle_input(now, &mut input, &mut |m| {
            assert_eq!(m.number, last + 1);
            last = m.number;
        });
        assert!(input.len() <= input.capacity());
        if r.is_err() {
            break;
        }
        // The session may answer (acks) at any time.
        sink.clear();
        s.poll_transmit(now, &mut sink);
    }
    drop(s);
    assert_eq!(budget.available(), 1 << 20, "reassembly budget leaked");
}
