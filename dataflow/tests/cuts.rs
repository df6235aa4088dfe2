//! Cuts between the sites during a run lose no binding, port message or
//! exchange: sitenet resends what a cut channel lost, in order, and the
//! protocols need nothing more.

use std::collections::BTreeSet;
use std::time::Duration;

use sitenet::transport::FaultInjector;
use sitenet::{Node, NodeConfig};
use sitenet_dataflow::{Cell, CellMode, Dataflow, Port, Var};

/// A node whose channels a seeded injector cuts every ~`mean` bytes.
fn cut_node(faults: &FaultInjector) -> Node {
    let mut cfg = NodeConfig::default();
    cfg.fault_injector = Some(faults.clone());
    cfg.reconnect_max = Duration::from_millis(50);
    Node::builder()
        .listen("tcp:127.0.0.1:0")
        .config(cfg)
        .start()
        .expect("a node on loopback")
}

#[test]
fn cuts_between_three_sites_lose_no_binding_message_or_exchange() {
    let faults = FaultInjector::from_env_or_random("SITENET_DATAFLOW_CUT_SEED");
    let _report = faults.report_on_panic();
    let nodes: Vec<Node> = (0..3).map(|_| cut_node(&faults)).collect();
    let dfs: Vec<Dataflow> = nodes.iter().map(Dataflow::on).collect();
    // A port at site 0 that sites 1 and 2 send to; a mobile cell of
    // variables at site 0 that every site increments; variables each
    // site makes and the next one binds.
    let (port, mut stream) = Port::<(u8, u32)>::new(&dfs[0]);
    let pt = dfs[0].offer(&port);
    let cell = Cell::new(&dfs[0], CellMode::Mobile, {
        let v: Var<u64> = Var::new(&dfs[0]);
        v.bind_blocking(0).unwrap();
        v
    })
    .unwrap();
    let ct = dfs[0].offer(&cell);
    faults.random_cuts(20_000);
    const MSGS: u32 = 3_000;
    const INCS: u64 = 100;
    let workers: Vec<_> = (0..3)
        .map(|i| {
            let df = dfs[i].clone();
            let port: Port<(u8, u32)> = df.take(&pt).unwrap();
            let cell: Cell<Var<u64>> = df.take(&ct).unwrap();
            std::thread::spawn(move || {
                if i > 0 {
                    for k in 0..MSGS {
                        port.send((i as u8, k)).unwrap();
                    }
                }
                for _ in 0..INCS {
                    let new: Var<u64> = Var::new(&df);
                    let old = cell.exchange_blocking(new.clone()).unwrap();
                    new.bind_blocking(old.wait_blocking().unwrap() + 1).unwrap();
                }
            })
        })
        .collect();
    let mut next = [0u32; 3];
    for _ in 0..2 * MSGS {
        let (who, k) = stream.next_blocking().unwrap();
        assert_eq!(k, next[who as usize], "sender {who}'s order");
        next[who as usize] += 1;
    }
    for w in workers {
        w.join().unwrap();
    }
    faults.stop_random_cuts();
    let last: Var<u64> = Var::new(&dfs[0]);
    let old = cell.exchange_blocking(last.clone()).unwrap();
    assert_eq!(old.wait_blocking().unwrap(), 3 * INCS, "no exchange lost");
    assert!(
        faults.cuts() >= 10,
        "the channels were cut: {}",
        faults.cuts()
    );
    let seen: BTreeSet<u32> = next.iter().copied().collect();
    assert_eq!(seen, [0, MSGS].into_iter().collect());
}
