//! The sitenet runtime: where a node's actors run.
//!
//! By default one per process, shared by every node in it: the current actix
//! arbiter when the caller runs inside an actix system, otherwise an actix
//! system on one thread sitenet starts itself. A process with thousands of
//! sites must not have thousands of threads. Everything the public API awaits
//! is runtime-agnostic (channels and notifications), so it works from any
//! executor, a plain `main` included.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::thread::ThreadId;
use std::time::Duration;

use actix_rt::ArbiterHandle;

/// A handle to the thread a node's actors run on. Cheap to clone.
///
/// ```
/// use sitenet_runtime::{Node, Runtime};
///
/// // Two nodes on a thread of their own, apart from the shared one: a
/// // handler that blocks one of them holds up nobody else.
/// let rt = Runtime::dedicated("doc-workers");
/// let a = Node::builder().runtime(rt.clone()).start()?;
/// let b = Node::builder().runtime(rt).start()?;
/// assert!(a.runtime().is_running());
/// assert!(!a.runtime().is_current_thread()); // this thread is not it
/// # drop(b);
/// # Ok::<(), sitenet_runtime::NodeError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Runtime {
    arbiter: ArbiterHandle,
    /// The runtime's thread, once known: a blocking call made on it would
    /// wait for work only that thread can do, for ever.
    thread: Arc<OnceLock<ThreadId>>,
}

static SHARED: OnceLock<Runtime> = OnceLock::new();

impl Runtime {
    /// The default runtime for a node started here: the current actix arbiter
    /// if the caller is inside an actix system, else the process-wide sitenet
    /// runtime thread (started on first use).
    pub fn current_or_shared() -> Self {
        if actix_rt::System::try_current().is_some() {
            if let Some(a) = actix_rt::Arbiter::try_current() {
                let thread = Arc::new(OnceLock::new());
                let _ = thread.set(std::thread::current().id());
                return Self { arbiter: a, thread };
            }
        }
        Self::shared()
    }

    /// The process-wide sitenet runtime: one thread running an actix system.
    pub fn shared() -> Self {
        SHARED.get_or_init(|| Self::dedicated("sitenet-rt")).clone()
    }

    /// A new runtime on a thread of its own, named `name`, for nodes that
    /// must not share the default thread (benchmarks, tests that block a
    /// node's thread on purpose). The thread lives as long as the process.
    pub fn dedicated(name: &str) -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let sys = actix_rt::System::new();
                sys.block_on(async move {
                    tx.send((actix_rt::Arbiter::current(), std::thread::current().id()))
                        .expect("runtime handle receiver lives");
                });
                let _ = sys.run();
            })
            .expect("spawning a sitenet runtime thread");
        let (arbiter, id) = rx.recv().expect("the sitenet runtime thread started");
        let thread = Arc::new(OnceLock::new());
        let _ = thread.set(id);
        Self { arbiter, thread }
    }

    /// A runtime on a given actix arbiter (a builder option names it). Its
    /// thread is learned as soon as the arbiter runs a first task.
    pub fn from_arbiter(arbiter: ArbiterHandle) -> Self {
        let thread = Arc::new(OnceLock::new());
        let t = thread.clone();
        arbiter.spawn(async move {
            let _ = t.set(std::thread::current().id());
        });
        Self { arbiter, thread }
    }

    /// True if the caller runs on this runtime's thread: a blocking call
    /// there would deadlock (it waits for work only this thread can do).
    pub fn is_current_thread(&self) -> bool {
        self.thread.get() == Some(&std::thread::current().id())
    }

    /// True while the runtime still runs tasks. A runtime borrowed from an
    /// actix system that has since stopped does not: nodes on it fail their
    /// sends and requests instead of waiting for ever.
    pub fn is_running(&self) -> bool {
        self.arbiter.spawn(async {})
    }

    /// The arbiter.
    pub fn arbiter(&self) -> &ArbiterHandle {
        &self.arbiter
    }

    /// Runs a future on the runtime.
    pub fn spawn(&self, f: impl Future<Output = ()> + Send + 'static) -> bool {
        self.arbiter.spawn(f)
    }

    /// A future that completes after `d`, using the runtime's timer, awaitable
    /// from any executor.
    pub fn delay(&self, d: Duration) -> impl Future<Output = ()> + Send + 'static {
        let (mut tx, rx) = tokio::sync::oneshot::channel::<()>();
        self.arbiter.spawn(async move {
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
