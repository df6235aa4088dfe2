//! [`ActorSlot`]: an entry's ComObject as the slot every message to it
//! goes through, and where it stands ([`ActorState`]).

/// What runs an entry's site, its type erased: the ComObject actor's
/// address (`Addr<ComObject>`) while it runs, the node's table of parked
/// forms (which holds what its machine keeps, at
/// [`ActorSlot::parked_at`]) while it is parked. Both are a layer above
/// the entry (docs/architecture.md, "The runtime's layers"), and only
/// that layer puts them in and reads them back (`com_object/slot.rs`);
/// which one is held is the slot's [`ActorState`], so reading one back
/// never fails. Shared (`Arc`), so that parking puts the node's table
/// here without allocating.
pub(crate) type Erased = std::sync::Arc<dyn std::any::Any + Send + Sync>;

/// Where an entry's ComObject stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ActorState {
    /// Never started: the entry costs only itself (its first need starts
    /// the actor).
    Never,
    /// The actor runs; the slot holds its address.
    Running,
    /// Parked: no actor, the slot holds what its machine keeps; the next
    /// message to it (a send's wake, an accepted channel, its deadline)
    /// starts the actor again from it.
    Parked,
    /// The entry was reclaimed: nothing runs it any more.
    Reclaimed,
}

/// The entry's ComObject, as the slot that every message to it goes
/// through: started, unparked, or sent to, under this lock
/// (`com_object/slot.rs`).
#[derive(Debug)]
pub(crate) struct ActorSlot {
    pub(crate) state: ActorState,
    /// The address (running) or the node's table of parked forms
    /// (parked).
    pub(crate) held: Option<Erased>,
    /// Running: the messages sent to the actor through the slot and not
    /// yet handled (it parks only when none waits in its mailbox: a
    /// stopped actor's mailbox is dropped). Parked: where its machine's
    /// parked form is in the node's table (no message waits for a parked
    /// actor: a send starts it first). One word for both, read through
    /// the methods below.
    word: u32,
}

impl ActorSlot {
    pub(super) const NEVER: ActorSlot = ActorSlot {
        state: ActorState::Never,
        held: None,
        word: 0,
    };

    /// Messages sent to the running actor and not yet handled (0 unless
    /// it runs).
    pub(crate) fn queued(&self) -> u32 {
        if self.state == ActorState::Running {
            self.word
        } else {
            0
        }
    }

    /// One more message sent to the running actor.
    pub(crate) fn queue_one(&mut self) {
        debug_assert_eq!(self.state, ActorState::Running);
        self.word += 1;
    }

    /// The running actor took one of the messages sent to it.
    pub(crate) fn handled_one(&mut self) {
        debug_assert_eq!(self.state, ActorState::Running);
        self.word -= 1;
    }

    /// The actor runs, nothing sent to it yet; `held` is its address.
    pub(crate) fn run(&mut self, held: Erased) {
        self.state = ActorState::Running;
        self.held = Some(held);
        self.word = 0;
    }

    /// The site parked: `forms` is the node's table of parked forms, its
    /// own at `at`.
    pub(crate) fn park(&mut self, forms: Erased, at: u32) {
        debug_assert_eq!(self.queued(), 0);
        self.state = ActorState::Parked;
        self.held = Some(forms);
        self.word = at;
    }

    /// Where a parked site's form is in the node's table.
    pub(crate) fn parked_at(&self) -> u32 {
        debug_assert_eq!(self.state, ActorState::Parked);
        self.word
    }
}
