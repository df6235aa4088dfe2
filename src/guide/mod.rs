//! # The sitenet guide
//!
//! How to use sitenet as a library, chapter by chapter. Every code block
//! below is a doc test: it compiles and runs with `cargo test --doc`.
//! The command line is described in `docs/cli.md`, the design in
//! `docs/architecture.md`, the wire format in `docs/protocol.md`.
//!
//! | chapter | what it shows |
//! |---|---|
//! | [`first_steps`] | the dependencies, a server and a client, sends and requests, the three ways to call (async, `try_`, `_blocking`) |
//! | [`answers`] | delegation, replies later, async handlers, typed remote errors, handlers with state |
//! | [`site_refs`] | site references inside messages, the node as a site of its own, a layer's own references inside messages (`context`, node extensions, `WeakNode`) |
//! | [`completions`] | tracked deliveries, cooperations (scatter/gather), batches |
//! | [`bodies`] | large bodies in parts and streamed, raw messages, handlers changed at run time |
//! | [`failures`] | what is guaranteed, what a failure hands back, fault states and node events, upgrades |
//! | [`security`] | what any peer may cost, the three levels of trust, cookies, TLS |
//! | [`many_sites`] | channel slots, idle sites, threads, the idle spin, transports and descriptors |
//! | [`observability`] | metrics, OpenMetrics, tracing a request across sites |
//! | [`simulation`] | a runtime author's protocol on the deterministic simulator |
//!
//! ## The patterns, at a glance
//!
//! Every communication pattern of the systems sitenet is built from, as one
//! API:
//!
//! | pattern | from | sitenet | example |
//! |---|---|---|---|
//! | typed one-way send, priorities, bodies in parts | Mozart, BMI list I/O | `SiteRef::send`, `SendBuilder::{priority, body, parts, try_now}` | `pingpong` |
//! | request/reply with a timeout | Paradis-Net | `SiteRef::request`, `Ctx::reply` | `echo_clients` |
//! | a reply later, from any thread or task | Erlang's `gen_server:reply` | `Ctx::responder`, `Responder::{reply, fail}` | `reply_later` |
//! | an async handler answering with its future's output; typed remote errors | Erlang's `{error, Reason}` | `Node::handle_async`, `AsyncCtx`, `Node::handle_result`, `RequestBuilder::or_error` | `async_handlers` |
//! | delegation: the last site answers the origin | Paradis-Net forward | `Ctx::forward` | `delegation` |
//! | scatter/gather, receive descriptors, truncation | Paradis-Net cooperation | `Node::cooperation`, `Expect`, `Node::cooperation_reply` | `scatter_gather` |
//! | post a send, test or wait for its completion | BMI post/test | `SendBuilder::tracked`, `Delivery::test` | `tests/deliveries.rs` |
//! | many operations in flight, wait any/all, retries | IBP operation lists | `Node::batch`, `Submitted::{next_done, wait_any, wait_all}` | `batch` |
//! | a body larger than memory, handled as it arrives | Madeleine deferred receive | `Node::handle_stream`, `BodySink` | `upload` |
//! | a type id and bytes, the runtime's own marshaler and dispatch | language runtimes | `SiteRef::send_raw`, `request_raw`, `Node::handle_raw`, `Ctx::reply_raw` | `raw_dispatch` |
//! | handlers swapped or removed at run time | Erlang's code reloading | `Node::replace_handler`, `remove_handler`, `replace_raw`, `remove_raw` | `tests/raw_messages.rs` |
//! | site references inside messages | Mozart, Paradis-Net | `SiteRef` in any message, `Node::local_site` | `third_party`, `counter` |
//! | failure detection, nothing silently lost | Mozart | `Node::monitor`, `SiteRef::failure`, `HandedBack`, `ReturnedMessage::decode`, `SiteRef::resend` | `cut_recovery` |
//! | node-wide events: sites up, unreachable, down, peers refused | Erlang's `monitor_nodes` | `Node::events`, `NodeEvent` | `node_events` |
//! | many sites, few descriptors | Mozart | `NodeConfig::trans_controller`, `TransController` | `echo_clients`, `transports` |
//!
//! The examples are in the repository's `examples/` (`cargo run --release
//! --example NAME`); `tests/examples.rs` runs each one.

pub mod answers {
    #![doc = include_str!("answers.md")]
}
pub mod bodies {
    #![doc = include_str!("bodies.md")]
}
pub mod completions {
    #![doc = include_str!("completions.md")]
}
pub mod failures {
    #![doc = include_str!("failures.md")]
}
pub mod first_steps {
    #![doc = include_str!("first_steps.md")]
}
pub mod many_sites {
    #![doc = include_str!("many_sites.md")]
}
pub mod observability {
    #![doc = include_str!("observability.md")]
}
pub mod security {
    #![doc = include_str!("security.md")]
}
pub mod simulation {
    #![doc = include_str!("simulation.md")]
}
pub mod site_refs {
    #![doc = include_str!("site_refs.md")]
}
