//! The sitenet runtime: the threads a node's actors run on.
//!
//! By default one pool per process, shared by every node in it: the
//! current actix arbiter when the caller runs inside an actix system,
//! otherwise a pool of actix arbiters sitenet starts itself, one thread per
//! core (every node of a process on one thread would leave all but one
//! core idle). A process with thousands of sites must not have thousands of
//! threads: a pool has as many as it was made with, and sites are spread
//! over them.
//!
//! **Who runs where.** Each node has a *home* thread of the pool (its
//! listeners, handshakes, request deadlines, local deliveries), the nodes
//! made on a pool taking its threads in turn. Each remote site's ComObject
//! — its session, channel, timers and the handlers of what it delivers —
//! lives on one thread of the pool ([`Runtime::arbiter_for`]: the site's
//! key in its node's table, offset by the node's home), so one site's
//! traffic never crosses threads and a node's many sites share every core.
//! A site first heard of on an in-process (`mem:`) channel lives instead
//! on the thread that connected it ([`Runtime::worker_of`]), where the
//! other end's site runs: the pair then talks without waking a thread.
//! Other threads hand a site messages through its outbox (bounded per
//! priority class, FIFO per sender) and a wake; nothing blocks a pool
//! thread on another.
//!
//! Everything the public API awaits is runtime-agnostic (channels and
//! notifications), so it works from any executor, a plain `main` included.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::ThreadId;
use std::time::Duration;

use actix_rt::ArbiterHandle;

/// A handle to the threads a node's actors run on. Cheap to clone.
///
/// ```
/// use sitenet_runtime::{Node, Runtime};
///
/// // Two nodes on a thread of their own, apart from the shared pool: a
/// // handler that blocks one of them holds up nobody else.
/// let rt = Runtime::dedicated("doc-workers");
/// let a = Node::builder().runtime(rt.clone()).start()?;
/// let b = Node::builder().runtime(rt).start()?;
/// assert!(a.runtime().is_running());
/// assert_eq!(a.runtime().threads(), 1);
/// assert!(!a.runtime().is_current_thread()); // this thread is not it
/// # drop(b);
/// # Ok::<(), sitenet_runtime::NodeError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Runtime {
    pool: Arc<Pool>,
    /// The index of this handle's home thread in the pool.
    home: usize,
}

/// The threads of a runtime.
#[derive(Debug)]
struct Pool {
    workers: Vec<Worker>,
    /// The home of the next node made on the pool ([`Runtime::spread`]).
    next_home: AtomicUsize,
}

#[derive(Debug)]
struct Worker {
    arbiter: ArbiterHandle,
    /// The worker's thread, once known: a blocking call made on it would
    /// wait for work only the pool's threads can do, perhaps for ever.
    thread: Arc<OnceLock<ThreadId>>,
}

static SHARED: OnceLock<Runtime> = OnceLock::new();

thread_local! {
    /// Messages refused on this thread (see [`refused_here`]).
    static REFUSED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts, in this thread's count, a message the node refused — its
/// header did not decode, no handler takes it, its forwarded origin is
/// refused (the handlers call it where they count `Metrics::unhandled`).
pub(crate) fn count_refusal() {
    REFUSED.with(|r| r.set(r.get().wrapping_add(1)));
}

/// Messages refused on this thread so far. Handlers run synchronously on
/// the thread of the ComObject that delivers their messages, so what this
/// grows by across a slice of a channel's input is what that channel's
/// peer sent and the node refused: the ComObject charges it to the
/// channel's refusal budget (`sitenet_protocols::connection::input_budget`).
pub(crate) fn refused_here() -> u64 {
    REFUSED.with(|r| r.get())
}
/// The process-wide pools made by [`Runtime::shared_with_threads`], by
/// their number of threads.
static SIZED: Mutex<Vec<Runtime>> = Mutex::new(Vec::new());

/// The number of threads of the default pool: one per core the process
/// may use, or what the environment variable `SITENET_THREADS` says (a
/// deployment's or a test run's choice, without a change of code).
pub fn default_threads() -> usize {
    std::env::var("SITENET_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

impl Runtime {
    fn of(workers: Vec<Worker>) -> Self {
        assert!(!workers.is_empty(), "a runtime has at least one thread");
        Self {
            pool: Arc::new(Pool {
                workers,
                next_home: AtomicUsize::new(0),
            }),
            home: 0,
        }
    }

    /// The default runtime for a node started here: the current actix arbiter
    /// if the caller is inside an actix system (one thread: the caller's
    /// own), else the process-wide sitenet pool (started on first use).
    pub fn current_or_shared() -> Self {
        if actix_rt::System::try_current().is_some() {
            if let Some(a) = actix_rt::Arbiter::try_current() {
                let thread = Arc::new(OnceLock::new());
                let _ = thread.set(std::thread::current().id());
                return Self::of(vec![Worker { arbiter: a, thread }]);
            }
        }
        Self::shared()
    }

    /// The process-wide sitenet pool: [`default_threads`] threads, each
    /// running an actix system.
    pub fn shared() -> Self {
        SHARED
            .get_or_init(|| Self::pool("sitenet-rt", default_threads()))
            .clone()
    }

    /// The process-wide pool of `threads` threads (at least one): made on
    /// first use, shared by every node asking for that many since (what
    /// `NodeBuilder::threads` and `--threads` use). The default number is
    /// [`shared`](Self::shared)'s pool.
    pub fn shared_with_threads(threads: usize) -> Self {
        let threads = threads.max(1);
        if threads == default_threads() {
            return Self::shared();
        }
        let mut sized = SIZED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(rt) = sized.iter().find(|rt| rt.threads() == threads) {
            return rt.clone();
        }
        let rt = Self::pool(&format!("sitenet-rt{threads}"), threads);
        sized.push(rt.clone());
        rt
    }

    /// A new runtime on a thread of its own, named `name`, for nodes that
    /// must not share the default pool (benchmarks, tests that block a
    /// node's thread on purpose). The thread lives as long as the process.
    pub fn dedicated(name: &str) -> Self {
        Self::pool(name, 1)
    }

    /// A new runtime of `threads` threads of its own (at least one), named
    /// `name-0`, `name-1`… (just `name` for one). They live as long as the
    /// process.
    pub fn pool(name: &str, threads: usize) -> Self {
        let threads = threads.max(1);
        let workers = (0..threads)
            .map(|i| {
                let name = if threads == 1 {
                    name.to_string()
                } else {
                    format!("{name}-{i}")
                };
                start_thread(name)
            })
            .collect();
        Self::of(workers)
    }

    /// A runtime on a given actix arbiter (a builder option names it). Its
    /// thread is learned as soon as the arbiter runs a first task.
    pub fn from_arbiter(arbiter: ArbiterHandle) -> Self {
        let thread = Arc::new(OnceLock::new());
        let t = thread.clone();
        arbiter.spawn(async move {
            let _ = t.set(std::thread::current().id());
        });
        Self::of(vec![Worker { arbiter, thread }])
    }

    /// The number of threads the runtime runs on.
    pub fn threads(&self) -> usize {
        self.pool.workers.len()
    }

    /// The same pool, homed on its next thread in turn: each node made on a
    /// pool gets its own home (its listeners and timers), so the nodes of a
    /// process spread over its threads. A one-thread runtime is itself.
    pub fn spread(&self) -> Self {
        let n = self.threads();
        if n == 1 {
            return self.clone();
        }
        Self {
            pool: self.pool.clone(),
            home: self.pool.next_home.fetch_add(1, Ordering::Relaxed) % n,
        }
    }

    /// True if the caller runs on one of this runtime's threads: a blocking
    /// call there would wait for work only these threads can do (and, on
    /// the thread that must do it, wait for ever).
    pub fn is_current_thread(&self) -> bool {
        let me = std::thread::current().id();
        self.pool
            .workers
            .iter()
            .any(|w| w.thread.get() == Some(&me))
    }

    /// True while the runtime still runs tasks. A runtime borrowed from an
    /// actix system that has since stopped does not: nodes on it fail their
    /// sends and requests instead of waiting for ever.
    pub fn is_running(&self) -> bool {
        self.arbiter().spawn(async {})
    }

    /// The home thread's arbiter.
    pub fn arbiter(&self) -> &ArbiterHandle {
        &self.pool.workers[self.home].arbiter
    }

    /// The arbiter that runs everything of the site whose key in its node's
    /// table is `key` (see the module documentation): the same for the
    /// site's whole life, spread over the pool from the node's home.
    pub fn arbiter_for(&self, key: usize) -> &ArbiterHandle {
        &self.pool.workers[self.index_for(key)].arbiter
    }

    /// The index in the pool of the thread [`arbiter_for`](Self::arbiter_for)
    /// gives `key`.
    pub fn index_for(&self, key: usize) -> usize {
        let n = self.threads();
        (self.home + key % n) % n
    }

    /// The pool's thread `index` (modulo the pool's size), once it has
    /// started: what names it to code that counts work per thread (the
    /// slot controller's lanes).
    pub fn thread_at(&self, index: usize) -> Option<ThreadId> {
        let n = self.threads();
        self.pool.workers[index % n].thread.get().copied()
    }

    /// The index in the pool of thread `t`, if it is one of the pool's:
    /// where a site whose peer runs on `t` may be placed
    /// ([`arbiter_at`](Self::arbiter_at)).
    pub fn worker_of(&self, t: ThreadId) -> Option<usize> {
        self.pool
            .workers
            .iter()
            .position(|w| w.thread.get() == Some(&t))
    }

    /// The arbiter of the pool's thread `index` (modulo the pool's size).
    pub fn arbiter_at(&self, index: usize) -> &ArbiterHandle {
        let n = self.threads();
        &self.pool.workers[index % n].arbiter
    }

    /// Runs a future on the runtime's home thread.
    pub fn spawn(&self, f: impl Future<Output = ()> + Send + 'static) -> bool {
        self.arbiter().spawn(f)
    }

    /// A future that completes after `d`, using the runtime's timer, awaitable
    /// from any executor.
    pub fn delay(&self, d: Duration) -> impl Future<Output = ()> + Send + 'static {
        let (mut tx, rx) = tokio::sync::oneshot::channel::<()>();
        self.arbiter().spawn(async move {
            // Ends with the wait it serves: a deadline raced against
            // something that came first (most of them) does not hold its
            // task and timer for the rest of its duration.
            let slept = {
                let sleep = actix_rt::time::sleep(d);
                let closed = tx.closed();
                futures::pin_mut!(sleep, closed);
                matches!(
                    futures::future::select(sleep, closed).await,
                    futures::future::Either::Left(_)
                )
            };
            if slept {
                let _ = tx.send(());
            }
        });
        async move {
            let _ = rx.await;
        }
    }
}

/// Starts a thread named `name` running an actix system, and returns its
/// arbiter once it runs.
fn start_thread(name: String) -> Worker {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            let sys = actix_rt::System::with_tokio_rt(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("building a sitenet runtime thread's tokio runtime")
            });
            sys.block_on(async move {
                actix_rt::spawn(crate::idle_spin::spinner(crate::idle_spin::config()));
                tx.send((actix_rt::Arbiter::current(), std::thread::current().id()))
                    .expect("runtime handle receiver lives");
            });
            let _ = sys.run();
        })
        .expect("spawning a sitenet runtime thread");
    let (arbiter, id) = rx.recv().expect("the sitenet runtime thread started");
    let thread = Arc::new(OnceLock::new());
    let _ = thread.set(id);
    Worker { arbiter, thread }
}
