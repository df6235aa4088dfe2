//! Zero-copy receive: a large fragment's rest read by the driver straight
//! into its message (`Session::direct_input`), with no copy through the
//! input ring.

use super::*;

impl Receiver {
    /// Zero-copy receive: the continuation fragment `h` is at the front of
    /// `input`, incomplete, with at least [`DIRECT_MIN`] payload bytes still
    /// to come. If its message is reassembled whole and budget is there
    /// for the whole payload, the fragment is adopted: its header and the
    /// payload bytes already in the ring are consumed, and the rest is read
    /// by the driver straight into the message ([`direct_target`](Self::direct_target)).
    /// Returns whether it was adopted; a fragment that is not stays in the
    /// ring and takes the usual path (which also reports its errors).
    pub(crate) fn adopt(&mut self, h: &FrameHeader, input: &mut ByteBuffer) -> bool {
        let in_ring = input.len() - HEADER_LEN;
        let payload = h.payload_len as usize;
        if self.direct.is_some()
            || h.kind != FrameKind::Data
            || h.is_first()
            || payload < in_ring + DIRECT_MIN
        {
            return false;
        }
        let lane = h.lane;
        let Some(Partial::Whole(r)) = self.reassembly.get_mut(lane as usize - 1) else {
            return false;
        };
        if h.frag_offset != r.received()
            || !r.header_complete()
            || r.check_room(lane, payload as u64).is_err()
            || self.share.try_take(payload as u64).is_err()
        {
            return false;
        }
        let (a, b) = input.slices(HEADER_LEN, in_ring);
        let opened = r
            .extend(lane, a)
            .and_then(|()| r.extend(lane, b))
            .and_then(|()| r.open_in_place(lane, payload - in_ring));
        debug_assert!(opened.is_ok(), "checked above");
        input.consume(HEADER_LEN + in_ring);
        self.taken += in_ring as u64;
        self.direct = Some(*h);
        true
    }

    /// Where the adopted fragment's next bytes go, if one is adopted and
    /// incomplete.
    pub(crate) fn direct_target(&mut self) -> Option<&mut [u8]> {
        Some(self.adopted()?.in_place()).filter(|t| !t.is_empty())
    }

    /// `n` bytes were read into [`direct_target`](Self::direct_target).
    pub(crate) fn direct_commit(&mut self, n: usize) {
        self.adopted().expect("an adopted fragment").commit(n);
        self.taken += n as u64;
    }

    /// The message of the adopted fragment, if one is adopted.
    fn adopted(&mut self) -> Option<&mut Reassembly> {
        let h = self.direct.as_ref()?;
        match self.reassembly.get_mut(h.lane as usize - 1) {
            Some(Partial::Whole(r)) => Some(r),
            _ => unreachable!("an adopted fragment's message is reassembled"),
        }
    }

    /// Moves the bytes a driver read into the ring while a fragment was
    /// adopted into the fragment's place (they are its next bytes); true
    /// if there were any.
    pub(crate) fn direct_from_ring(&mut self, input: &mut ByteBuffer) -> bool {
        if input.is_empty() {
            return false;
        }
        let Some(target) = self.direct_target() else {
            return false;
        };
        let k = target.len().min(input.len());
        input.peek(0, &mut target[..k]);
        input.consume(k);
        self.direct_commit(k);
        true
    }

    /// True while an adopted fragment still waits for bytes: the input
    /// ring holds nothing of the stream until it is complete.
    pub(crate) fn direct_pending(&self) -> bool {
        self.direct.is_some_and(|h| {
            matches!(
                self.reassembly.get(h.lane as usize - 1),
                Some(Partial::Whole(r)) if r.in_place_left() > 0
            )
        })
    }

    /// Completes the adopted fragment once all its bytes were read in
    /// place (`None` if there is none, or it is incomplete).
    pub(crate) fn finish_direct(
        &mut self,
        deliver: &mut dyn Deliver,
        ack: &mut AckPolicy,
        stats: &mut SessionStats,
    ) -> Option<Result<DataOutcome, ProtocolError>> {
        if self.direct_pending() {
            return None;
        }
        let h = self.direct.take()?;
        Some(self.complete_fragment(&h, deliver, ack, stats))
    }
}
