//! The idle spin of sitenet's runtime threads: a thread that has run out
//! of work right after socket I/O polls its sockets without blocking for a
//! short, adaptive while before it sleeps, so a reply that comes back
//! within microseconds finds it awake (the rule and its reasons:
//! [`sitenet_protocols::node::idle_spin`]; the figures: docs/performance.md).
//!
//! Each pool thread runs one *spinner* task. Socket reads and writes that
//! move bytes count themselves (`note_io`) and wake the spinner if it
//! sleeps. While the window is open the spinner yields to the scheduler
//! each turn: tokio then runs every ready task, polls the I/O driver with
//! a zero timeout (the socket's readiness is seen without a sleep) and
//! polls the spinner again; a turn that found no new I/O also gives the
//! core away (`sched_yield`), so a spinning thread never holds a core
//! another thread is waiting for. When the window is spent the spinner
//! sleeps, and the thread blocks in the driver as usual.
//!
//! The longest spin is [`sitenet_protocols::node::idle_spin::SpinConfig::max`]
//! (default 100 µs); `SITENET_IDLE_SPIN_US` (microseconds, `0` turns it
//! off) or [`set_idle_spin`] change it for threads started afterwards.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

pub use sitenet_protocols::node::idle_spin::SpinConfig;
use sitenet_protocols::node::idle_spin::{IdleSpin, IdleStep};

thread_local! {
    /// This thread's socket reads and writes that moved bytes.
    static IO: Cell<u64> = const { Cell::new(0) };
    /// The spinner of this thread while it sleeps.
    static ASLEEP: RefCell<Option<Waker>> = const { RefCell::new(None) };
}

static CONFIG: OnceLock<SpinConfig> = OnceLock::new();

static POLLS: AtomicU64 = AtomicU64::new(0);
static CAUGHT: AtomicU64 = AtomicU64::new(0);
static BLOCKS: AtomicU64 = AtomicU64::new(0);

/// What the idle spin of this process's sitenet threads has done: how
/// much it polled and how often it paid. A `caught` count far below
/// `blocks` with many `polls` means the spin costs CPU for little; see
/// [`set_idle_spin`] to shorten or turn it off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpinStats {
    /// Turns a thread polled its sockets without blocking.
    pub polls: u64,
    /// Idle gaps that ended with I/O while the thread was polling: each
    /// one a sleep and a wake saved.
    pub caught: u64,
    /// Idle gaps that ended with the thread blocking (its window spent,
    /// or zero).
    pub blocks: u64,
}

/// The idle spin's counts for every sitenet runtime thread of this
/// process since it started.
pub fn stats() -> SpinStats {
    SpinStats {
        polls: POLLS.load(Ordering::Relaxed),
        caught: CAUGHT.load(Ordering::Relaxed),
        blocks: BLOCKS.load(Ordering::Relaxed),
    }
}

/// Sets the idle spin of the runtime threads sitenet starts from now on
/// (`SpinConfig::OFF`: never spin). Returns `false`, changing nothing, if
/// the setting was already fixed: by an earlier call, or by the first
/// thread started (which reads `SITENET_IDLE_SPIN_US` if no call came
/// first).
pub fn set_idle_spin(cfg: SpinConfig) -> bool {
    CONFIG.set(cfg).is_ok()
}

/// The setting threads start with: [`set_idle_spin`]'s, else
/// `SITENET_IDLE_SPIN_US`'s, else the default.
pub(crate) fn config() -> SpinConfig {
    *CONFIG.get_or_init(|| match std::env::var("SITENET_IDLE_SPIN_US") {
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(us) => SpinConfig::with_max(Duration::from_micros(us)),
            Err(_) => {
                tracing::warn!(
                    value = %v,
                    "SITENET_IDLE_SPIN_US is not a number of microseconds; the default idle spin applies"
                );
                SpinConfig::default()
            }
        },
        Err(_) => SpinConfig::default(),
    })
}

/// Counts a socket read or write that moved bytes on this thread, and
/// wakes the thread's spinner if it sleeps.
#[inline]
pub(crate) fn note_io() {
    IO.with(|c| c.set(c.get().wrapping_add(1)));
    if let Some(w) = ASLEEP.with(|a| a.borrow_mut().take()) {
        w.wake();
    }
}

fn io_count() -> u64 {
    IO.with(Cell::get)
}

/// The spinner task of one runtime thread; runs for the thread's life.
/// Returns at once if spinning is off.
pub(crate) async fn spinner(cfg: SpinConfig) {
    if cfg.max.is_zero() {
        return;
    }
    let mut spin = IdleSpin::new(cfg);
    let mut last_turn = io_count();
    // The last turn polled and found no I/O: the thread was idle.
    let mut idle_turn = false;
    loop {
        let io = io_count();
        match spin.idle(Instant::now(), io) {
            IdleStep::Poll => {
                if io == last_turn {
                    // A turn without I/O: let any other thread have the core.
                    std::thread::yield_now();
                    idle_turn = true;
                } else {
                    if idle_turn {
                        CAUGHT.fetch_add(1, Ordering::Relaxed);
                    }
                    idle_turn = false;
                }
                last_turn = io;
                POLLS.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
            IdleStep::Block => {
                idle_turn = false;
                BLOCKS.fetch_add(1, Ordering::Relaxed);
                // Sleep until this thread's next I/O, then tell the window
                // how long the gap was.
                std::future::poll_fn(|cx| {
                    if io_count() != io {
                        return Poll::Ready(());
                    }
                    ASLEEP.with(|a| *a.borrow_mut() = Some(cx.waker().clone()));
                    Poll::Pending
                })
                .await;
                last_turn = io_count();
                spin.woke(Instant::now(), last_turn);
            }
        }
    }
}
