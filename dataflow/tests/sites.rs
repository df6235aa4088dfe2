//! The dataflow layer between nodes over TCP loopback: each entity's
//! protocol end to end, references inside sitenet messages, tickets,
//! collection and failures.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sitenet::{Message, Node};
use sitenet_dataflow::{Cell, CellMode, Dataflow, DataflowError, Port, Stream, Ticket, Var};

const PATIENCE: Duration = Duration::from_secs(120);

fn node() -> Node {
    Node::builder()
        .listen("tcp:127.0.0.1:0")
        .start()
        .expect("a node on loopback")
}

#[path = "../examples/common/procs.rs"]
mod procs;

fn quick_give_up_node() -> Node {
    procs::node(Duration::from_secs(2))
}

/// Waits (bounded) until `f` holds: for books that have no notification.
fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    f()
}

fn empty(dfs: &[&Dataflow]) -> bool {
    dfs.iter().all(|d| d.entities() == (0, 0))
}

#[test]
fn a_variable_bound_on_one_site_is_seen_on_every_site_and_bound_once() {
    let (a, b, c) = (node(), node(), node());
    let (da, db, dc) = (Dataflow::on(&a), Dataflow::on(&b), Dataflow::on(&c));
    let x: Var<String> = Var::new(&da);
    let t = da.offer(&x);
    let xb: Var<String> = db.take(&t).unwrap();
    let xc: Var<String> = dc.take(&t).unwrap();
    let waiter = {
        let xc = xc.clone();
        std::thread::spawn(move || xc.wait_blocking())
    };
    xb.bind_blocking("bound at b".into()).unwrap();
    assert_eq!(waiter.join().unwrap().unwrap(), "bound at b");
    assert_eq!(x.wait_blocking().unwrap(), "bound at b");
    assert_eq!(
        xc.bind_blocking("other".into()),
        Err(DataflowError::Conflict)
    );
    assert_eq!(
        x.bind_blocking("other".into()),
        Err(DataflowError::Conflict)
    );
    assert_eq!(xc.bind_blocking("bound at b".into()), Ok(()));
    drop((x, xb, xc));
    assert!(da.withdraw(&t));
    assert!(
        eventually(|| empty(&[&da, &db, &dc])),
        "{:?}",
        da.entities()
    );
}

/// A message of the application's own that carries a variable.
#[derive(Serialize, Deserialize)]
struct Answer(Var<u64>);
impl Message for Answer {
    const ID: u32 = 7001;
}

#[test]
fn a_variable_travels_inside_a_sitenet_message_and_is_collected_after() {
    let (a, b) = (node(), node());
    let (da, db) = (Dataflow::on(&a), Dataflow::on(&b));
    // b binds every variable it receives to 99.
    b.handle(move |ctx, Answer(v): Answer| {
        ctx.spawn(async move {
            v.bind(99).await.unwrap();
        });
    })
    .unwrap();
    // A reference goes only to a site whose id is known: here from its
    // descriptor.
    let site = a.site_from_descriptor(&b.descriptor()).unwrap();
    for _ in 0..20 {
        let v: Var<u64> = Var::new(&da);
        site.send(&Answer(v.clone())).blocking().unwrap();
        assert_eq!(v.wait_blocking().unwrap(), 99);
    }
    assert!(
        eventually(|| da.entities().0 == 0 && db.entities().1 == 0),
        "a: {:?}, b: {:?}",
        da.entities(),
        db.entities()
    );
}

#[test]
fn a_by_need_variable_runs_its_producer_when_another_site_first_waits() {
    let (a, b) = (node(), node());
    let (da, db) = (Dataflow::on(&a), Dataflow::on(&b));
    let (tx, rx) = std::sync::mpsc::channel();
    let lazy: Var<u32> = Var::by_need(&da, move |v| {
        tx.send(()).unwrap();
        std::thread::spawn(move || v.bind_blocking(5).unwrap());
    });
    let t = da.offer(&lazy);
    let remote: Var<u32> = db.take(&t).unwrap();
    assert!(rx.try_recv().is_err(), "nobody waited yet");
    assert_eq!(remote.wait_blocking().unwrap(), 5);
    rx.recv_timeout(PATIENCE).unwrap();
    assert!(rx.try_recv().is_err(), "the producer ran once");
}

#[test]
fn a_port_keeps_each_senders_order_and_its_stream_is_read_on_another_site() {
    let (a, b, c) = (node(), node(), node());
    let (da, db, dc) = (Dataflow::on(&a), Dataflow::on(&b), Dataflow::on(&c));
    let (port, stream) = Port::<(u8, u32)>::new(&da);
    let pt = da.offer(&port);
    let st = da.offer(&stream);
    drop(stream);
    let pb: Port<(u8, u32)> = db.take(&pt).unwrap();
    let pc: Port<(u8, u32)> = dc.take(&pt).unwrap();
    const N: u32 = 500;
    let senders: Vec<_> = [(1u8, pb), (2u8, pc)]
        .into_iter()
        .map(|(who, p)| {
            std::thread::spawn(move || {
                for k in 0..N {
                    p.send((who, k)).unwrap();
                }
            })
        })
        .collect();
    // The stream read on c, a site that is not the port's home.
    let mut read: Stream<(u8, u32)> = dc.take(&st).unwrap();
    let mut next = [0u32; 3];
    for _ in 0..2 * N {
        let (who, k) = read.next_blocking().unwrap();
        assert_eq!(k, next[who as usize], "sender {who}'s order");
        next[who as usize] += 1;
    }
    for s in senders {
        s.join().unwrap();
    }
    drop((port, read));
    da.withdraw(&pt);
    da.withdraw(&st);
    assert!(
        eventually(|| empty(&[&da, &db, &dc])),
        "{:?} {:?} {:?}",
        da.entities(),
        db.entities(),
        dc.entities()
    );
}

fn exchanges_are_linearizable(mode: CellMode) {
    let (a, b, c) = (node(), node(), node());
    let dfs = [Dataflow::on(&a), Dataflow::on(&b), Dataflow::on(&c)];
    let cell = Cell::new(&dfs[0], mode, "init".to_string()).unwrap();
    let t = dfs[0].offer(&cell);
    const N: usize = 200;
    let workers: Vec<_> = dfs
        .iter()
        .enumerate()
        .map(|(i, df)| {
            let c: Cell<String> = df.take(&t).unwrap();
            std::thread::spawn(move || {
                (0..N)
                    .map(|k| c.exchange_blocking(format!("{i}:{k}")).unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut olds = BTreeSet::new();
    for w in workers {
        for old in w.join().unwrap() {
            assert!(olds.insert(old.clone()), "{old} answered twice");
        }
    }
    let last = cell.exchange_blocking("last".into()).unwrap();
    assert!(olds.insert(last));
    let mut written: BTreeSet<String> = (0..3)
        .flat_map(|i| (0..N).map(move |k| format!("{i}:{k}")))
        .collect();
    written.insert("init".into());
    assert_eq!(olds, written, "each content answered exactly once");
    if mode == CellMode::Mobile {
        let moves: u64 = dfs.iter().map(|d| d.stats().moves).sum();
        assert!(moves > 0, "the content moved");
    }
}

#[test]
fn exchanges_on_a_mobile_cell_from_three_sites_are_linearizable() {
    exchanges_are_linearizable(CellMode::Mobile);
}

#[test]
fn exchanges_on_a_stationary_cell_from_three_sites_are_linearizable() {
    exchanges_are_linearizable(CellMode::Stationary);
}

#[test]
fn a_wait_on_a_variable_whose_home_shut_down_ends_with_perm_fail() {
    let a = node();
    let b = quick_give_up_node();
    let (da, db) = (Dataflow::on(&a), Dataflow::on(&b));
    let x: Var<u8> = Var::new(&da);
    let t = da.offer(&x);
    let xb: Var<u8> = db.take(&t).unwrap();
    let waiter = std::thread::spawn(move || xb.wait_blocking());
    // Make sure the wait reached the home before it goes.
    assert!(eventually(|| da.stats().received > 0));
    let _report = a.shutdown_blocking(Duration::from_secs(5));
    assert_eq!(waiter.join().unwrap(), Err(DataflowError::PermFail));
}

#[test]
fn a_ticket_prints_and_parses_and_a_wrong_kind_is_refused() {
    let (a, b) = (node(), node());
    let (da, db) = (Dataflow::on(&a), Dataflow::on(&b));
    let c = Cell::new(&da, CellMode::Stationary, 1u8).unwrap();
    let t = da.offer(&c);
    let text = t.to_string();
    assert!(text.starts_with("df:scell:"), "{text}");
    let parsed: Ticket = text.parse().unwrap();
    assert_eq!(parsed, t);
    assert!(matches!(
        db.take::<Var<u8>>(&parsed),
        Err(DataflowError::WrongKind)
    ));
    let cb: Cell<u8> = db.take(&parsed).unwrap();
    assert_eq!(cb.exchange_blocking(2).unwrap(), 1);
    assert!("df:nope".parse::<Ticket>().is_err());
}

#[test]
fn many_short_lived_variables_across_three_sites_leave_nothing_behind() {
    let (a, b, c) = (node(), node(), node());
    let dfs = [Dataflow::on(&a), Dataflow::on(&b), Dataflow::on(&c)];
    // Each site holds a port on the next; a variable made on one site is
    // sent to the next, which binds it; the maker waits for it and drops it.
    let mut ports = Vec::new();
    let mut streams = Vec::new();
    for df in &dfs {
        let (p, s) = Port::<Var<u32>>::new(df);
        ports.push(df.offer(&p));
        streams.push(s);
    }
    let binders: Vec<_> = streams
        .into_iter()
        .map(|mut s| {
            std::thread::spawn(move || {
                for k in 0..2_000u32 {
                    let v = s.next_blocking().unwrap();
                    v.bind_blocking(k).unwrap();
                }
            })
        })
        .collect();
    let makers: Vec<_> = (0..3)
        .map(|i| {
            let df = dfs[i].clone();
            let next: Port<Var<u32>> = df.take(&ports[(i + 1) % 3]).unwrap();
            std::thread::spawn(move || {
                for k in 0..2_000u32 {
                    let v: Var<u32> = Var::new(&df);
                    next.send(v.clone()).unwrap();
                    assert_eq!(v.wait_blocking().unwrap(), k);
                }
            })
        })
        .collect();
    for t in makers.into_iter().chain(binders) {
        t.join().unwrap();
    }
    for (df, t) in dfs.iter().zip(&ports) {
        df.withdraw(t);
    }
    assert!(
        eventually(|| dfs.iter().all(|d| d.entities() == (0, 0))),
        "{:?}",
        dfs.iter().map(|d| d.entities()).collect::<Vec<_>>()
    );
}

#[test]
fn a_wait_on_a_node_that_shuts_down_ends_with_shutdown() {
    let a = node();
    let da = Dataflow::on(&a);
    let x: Var<u8> = Var::new(&da);
    let y = x.clone();
    let waiter = std::thread::spawn(move || y.wait_blocking());
    assert!(eventually(|| da.entities().0 == 1));
    let _report = a.shutdown_blocking(Duration::from_secs(5));
    assert_eq!(waiter.join().unwrap(), Err(DataflowError::Shutdown));
    assert_eq!(x.wait_blocking(), Err(DataflowError::Shutdown));
}

/// The bank example's step, from three sites at once: a cell holding a
/// variable; take it out, put a fresh one in, bind that one to the old
/// balance plus one. The content moves between two sites that never
/// talked before (the holder learns the next site from the manager).
#[test]
fn a_mobile_cell_reaches_a_site_its_holder_never_heard_of() {
    let nodes: Vec<Node> = (0..3).map(|_| node()).collect();
    let dfs: Vec<Dataflow> = nodes.iter().map(Dataflow::on).collect();
    let v: Var<i64> = Var::new(&dfs[0]);
    v.bind_blocking(0).unwrap();
    let cell = Cell::new(&dfs[0], CellMode::Mobile, v).unwrap();
    let t = dfs[0].offer(&cell);
    const N: i64 = 30;
    let workers: Vec<_> = dfs
        .iter()
        .map(|df| {
            let df = df.clone();
            let c: Cell<Var<i64>> = df.take(&t).unwrap();
            std::thread::spawn(move || {
                for _ in 0..N {
                    let new: Var<i64> = Var::new(&df);
                    let old = c.exchange_blocking(new.clone()).unwrap();
                    let b = old.wait_blocking().unwrap();
                    new.bind_blocking(b + 1).unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let last: Var<i64> = Var::new(&dfs[0]);
    let old = cell.exchange_blocking(last.clone()).unwrap();
    assert_eq!(old.wait_blocking().unwrap(), 3 * N, "no increment lost");
}

/// Audit rounds ask a quiet holder whether it still holds an entity; one
/// that does answers nothing and keeps it: the entity outlives any number
/// of rounds while a site refers to it.
#[test]
fn audit_rounds_keep_an_entity_a_quiet_site_still_holds() {
    let (a, b) = (node(), node());
    let (da, db) = (Dataflow::on(&a), Dataflow::on(&b));
    let x: Var<u64> = Var::new(&da);
    let t = da.offer(&x);
    let xb: Var<u64> = db.take(&t).unwrap();
    // Bound from b: its registration came first, so b is listed now.
    xb.bind_blocking(7).unwrap();
    drop(x);
    assert!(da.withdraw(&t));
    da.set_audit_period(Duration::from_millis(20));
    let before = da.stats().sent;
    assert!(
        eventually(|| da.stats().sent >= before + 3),
        "audit rounds send: {:?}",
        da.stats()
    );
    assert_eq!(da.entities().0, 1, "b still holds x");
    assert_eq!(xb.wait_blocking().unwrap(), 7);
    drop(xb);
    assert!(eventually(|| empty(&[&da, &db])), "{:?}", da.entities());
}

/// A bind whose value is larger than the home's node accepts ends with
/// `Unsendable` (it never took effect) instead of waiting for ever, and
/// the variable stays unbound for a value that fits.
#[test]
fn a_bind_too_large_for_the_home_ends_unsendable() {
    let a = Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| c.max_message_size = 64 * 1024)
        .start()
        .unwrap();
    let b = node();
    let (da, db) = (Dataflow::on(&a), Dataflow::on(&b));
    let x: Var<String> = Var::new(&da);
    let t = da.offer(&x);
    let xb: Var<String> = db.take(&t).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let big = xb.clone();
    std::thread::spawn(move || {
        let _ = tx.send(big.bind_blocking("x".repeat(200 * 1024)));
    });
    let r = rx.recv_timeout(PATIENCE).expect("the bind ends");
    assert_eq!(r, Err(DataflowError::Unsendable));
    xb.bind_blocking("small".into()).unwrap();
    assert_eq!(x.wait_blocking().unwrap(), "small");
    drop((x, xb));
    assert!(da.withdraw(&t));
    assert!(eventually(|| empty(&[&da, &db])), "{:?}", da.entities());
}
