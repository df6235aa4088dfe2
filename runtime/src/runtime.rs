//! The sitenet runtime: where a node's actors run.
//!
//! By default one per process, shared by every node in it: the current actix
//! arbiter when the caller runs inside an actix system, otherwise an actix
//! system on one thread sitenet starts itself. A process with thousands of
//! sites must not have thousands of threads. Everything the public API awaits
//! is runtime-agnostic (channels and notifications), so it works from any
//! executor, a plain `main` included.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use actix_rt::ArbiterHandle;

/// A handle to the thread a node's actors run on. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Runtime {
    arbiter: ArbiterHandle,
}

static SHARED: OnceLock<Runtime> = OnceLock::new();

impl Runtime {
    /// The default runtime for a node started here: the current actix arbiter
    /// if the caller is inside an actix system, else the process-wide sitenet
    /// runtime thread (started on first use).
    pub fn current_or_shared() -> Self {
        if actix_rt::System::try_current().is_some() {
            if let Some(a) = actix_rt::Arbiter::try_current() {
                return Self { arbiter: a };
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
                    tx.send(actix_rt::Arbiter::current())
                        .expect("runtime handle receiver lives");
                });
                let _ = sys.run();
            })
            .expect("spawning a sitenet runtime thread");
        Self {
            arbiter: rx.recv().expect("the sitenet runtime thread started"),
        }
    }

    /// A runtime on a given actix arbiter (a builder option names it).
    pub fn from_arbiter(arbiter: ArbiterHandle) -> Self {
        Self { arbiter }
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
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        self.arbiter.spawn(async move {
            actix_rt::time::sleep(d).await;
            let _ = tx.send(());
        });
        async move {
            let _ = rx.await;
        }
    }
}
