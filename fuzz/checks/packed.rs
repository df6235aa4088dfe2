//! Packed frame payloads (`packed.rs`, docs/protocol.md §2.5): decoding
//! arbitrary bytes, split anywhere across the ring's wrap, never panics;
//! it stops at the first error; a message above the maximum size is
//! refused; a payload that decodes whole re-encodes to the same bytes; and
//! a decode resumed part-way (`skip_entry` over the first k messages, as a
//! paced session does after a pause) yields exactly the rest.

use bytes::{Bytes, BytesMut};
use sitenet_protocols::connection::packed::{write_entry, Entries};
use sitenet_protocols::{ByteBuffer, OutMessage, Priority};

/// The check, for one input.
pub fn check(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let (ctl, payload) = data.split_at(2);
    let split = (ctl[0] as usize).min(payload.len());
    let max_message = if ctl[1] & 1 == 0 { 1 << 20 } else { 100 };
    let (a, b) = payload.split_at(split);
    let mut arena = BytesMut::new();
    let mut entries = Entries::new(3, (a, b), max_message);
    let mut ok = Vec::new();
    let mut failed = false;
    while let Some(e) = entries.next_entry(&mut arena) {
        assert!(!failed, "an entry after an error");
        match e {
            Ok(e) => {
                assert!(e.prelude.total_len() <= max_message, "{:?}", e.prelude);
                assert_eq!(e.header.len() as u32, e.prelude.header_len);
                assert_eq!(e.body.len() as u64, e.prelude.body_len);
                ok.push(e);
            }
            Err(_) => failed = true,
        }
    }
    if failed {
        return;
    }
    assert!(!ok.is_empty(), "an empty payload decoded without an error");
    let k = usize::from(ctl[1] >> 1).min(ok.len());
    let mut resumed = Entries::new(3, (a, b), max_message);
    for _ in 0..k {
        assert!(matches!(resumed.skip_entry(), Some(Ok(()))), "skip failed");
    }
    let mut rest = 0;
    while let Some(e) = resumed.next_entry(&mut arena) {
        let (e, want) = (e.expect("the rest decodes"), &ok[k + rest]);
        assert_eq!(e.prelude, want.prelude);
        assert_eq!((&e.header, &e.body), (&want.header, &want.body));
        rest += 1;
    }
    assert_eq!(k + rest, ok.len(), "resumed decode lost messages");
    assert!(resumed.at_end());
    let mut ring = ByteBuffer::new(payload.len());
    for e in ok {
        let mut m = OutMessage::new(
            Priority::Medium,
            e.prelude.type_id,
            e.header,
            vec![Bytes::clone(&e.body)],
        );
        m.kind = e.prelude.kind;
        m.corr = e.prelude.corr;
        write_entry(&m, &mut ring);
    }
    let (x, y) = ring.chunks();
    assert_eq!(
        [x, y].concat(),
        payload,
        "decode/encode round trip changed the payload"
    );
}
