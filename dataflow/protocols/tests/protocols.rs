//! The dataflow protocols over a virtual network: each rule of
//! docs/dataflow.md, deterministic scenarios and seeded random workloads.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{id, Net};
use proptest::prelude::*;
use rand::Rng;
use sitenet_dataflow_protocols::{Answer, EntityId, FailMode, Kind, OpError, Value, Wire};

fn bytes_of(a: &Result<Answer, OpError>) -> Vec<u8> {
    match a {
        Ok(Answer::Value(v)) => v.bytes.to_vec(),
        other => panic!("not a value: {other:?}"),
    }
}

#[test]
fn a_binding_reaches_every_waiting_site_and_a_different_bind_fails_everywhere() {
    let mut net = Net::new(3, 1);
    let v = net.sites[0].new_var(false);
    net.pass(v, 0, 1);
    net.pass(v, 0, 2);
    let (w1, w2) = (net.op(), net.op());
    net.sites[1].wait(w1, v, FailMode::Wait);
    net.sites[2].wait(w2, v, FailMode::Wait);
    net.run();
    assert!(net.answer(1, w1).is_none(), "no binding yet");
    let b = net.op();
    let value = net.value(2, b"42");
    net.sites[2].bind(b, v, value, FailMode::Wait);
    net.run();
    assert_eq!(net.answer(2, b), Some(&Ok(Answer::Done)));
    assert_eq!(bytes_of(net.answer(1, w1).unwrap()), b"42");
    assert_eq!(bytes_of(net.answer(2, w2).unwrap()), b"42");
    // A different value fails at the home and at a proxy; an equal one is fine.
    for site in 0..3 {
        let (other, same) = (net.op(), net.op());
        let x = net.value(site, b"7");
        net.sites[site].bind(other, v, x, FailMode::Wait);
        let y = net.value(site, b"42");
        net.sites[site].bind(same, v, y, FailMode::Wait);
        net.run();
        assert_eq!(net.answer(site, other), Some(&Err(OpError::Conflict)));
        assert_eq!(net.answer(site, same), Some(&Ok(Answer::Done)));
    }
}

#[test]
fn two_racing_binds_agree_on_one_winner() {
    for seed in 0..50 {
        let mut net = Net::new(3, seed);
        let v = net.sites[0].new_var(false);
        net.pass(v, 0, 1);
        net.pass(v, 0, 2);
        let (b1, b2) = (net.op(), net.op());
        let x = net.value(1, b"one");
        let y = net.value(2, b"two");
        net.sites[1].bind(b1, v, x, FailMode::Wait);
        net.sites[2].bind(b2, v, y, FailMode::Wait);
        net.run();
        let won: Vec<bool> = [(1, b1), (2, b2)]
            .iter()
            .map(|&(s, b)| net.answer(s, b) == Some(&Ok(Answer::Done)))
            .collect();
        assert_eq!(won.iter().filter(|&&w| w).count(), 1, "seed {seed}");
        let w = net.op();
        net.sites[0].wait(w, v, FailMode::Wait);
        net.run();
        let expect: &[u8] = if won[0] { b"one" } else { b"two" };
        assert_eq!(bytes_of(net.answer(0, w).unwrap()), expect);
    }
}

#[test]
fn a_by_need_variable_runs_its_producer_once_on_the_first_wait() {
    let mut net = Net::new(3, 2);
    let v = net.sites[0].new_var(true);
    net.pass(v, 0, 1);
    net.pass(v, 0, 2);
    net.run();
    assert!(net.needs.is_empty(), "nobody waited yet");
    let (w1, w2) = (net.op(), net.op());
    net.sites[1].wait(w1, v, FailMode::Wait);
    net.sites[2].wait(w2, v, FailMode::Wait);
    net.run();
    assert_eq!(net.needs, vec![(0, v)]);
    let b = net.op();
    let x = net.value(0, b"made");
    net.sites[0].bind(b, v, x, FailMode::Wait);
    net.run();
    assert_eq!(bytes_of(net.answer(1, w1).unwrap()), b"made");
}

/// Reads a stream from `head` at `site` until `n` items, returning them.
fn read_stream(net: &mut Net, site: usize, head: EntityId, n: usize) -> Vec<Vec<u8>> {
    let mut items = Vec::new();
    let mut at = head;
    net.sites[site].acquire(at);
    for _ in 0..n {
        let w = net.op();
        net.sites[site].wait(w, at, FailMode::Wait);
        net.run();
        let Some(Ok(Answer::Value(cell))) = net.done.remove(&(site, w)) else {
            panic!("stream cell {} never came", items.len());
        };
        let (item, rest) = cell.split_stream_cell().expect("a stream cell");
        items.push(item.bytes.to_vec());
        net.sites[site].acquire(rest);
        net.sites[site].release_value(&cell);
        net.sites[site].release(at);
        net.sites[site].settle_now();
        at = rest;
    }
    net.sites[site].release(at);
    net.sites[site].settle_now();
    net.pump();
    items
}

#[test]
fn a_port_keeps_each_senders_order_and_a_remote_reader_reads_its_stream() {
    let mut net = Net::new(4, 3);
    let (port, stream) = net.sites[0].new_port();
    for s in 1..4 {
        net.pass(port, 0, s);
    }
    net.pass(stream, 0, 3);
    for k in 0..20u8 {
        for s in 1..3 {
            let x = net.value(s, &[s as u8, k]);
            net.sites[s].send(None, port, x, FailMode::Wait);
            // Deliver some of it now and then, in random order.
            if net.rng.gen_bool(0.3) {
                net.step();
            }
        }
    }
    net.run();
    let items = read_stream(&mut net, 3, stream, 40);
    for s in 1..3u8 {
        let from_s: Vec<u8> = items.iter().filter(|i| i[0] == s).map(|i| i[1]).collect();
        assert_eq!(from_s, (0..20).collect::<Vec<u8>>(), "sender {s}'s order");
    }
}

#[test]
fn a_remote_stream_reader_registers_once_and_gets_every_cell_pushed() {
    let mut net = Net::new(2, 11);
    let (port, stream) = net.sites[0].new_port();
    net.pass(stream, 0, 1);
    // The reader waits first: one Register; then 50 sends, none read yet.
    let w = net.op();
    net.sites[1].wait(w, stream, FailMode::Wait);
    for k in 0..50u8 {
        let x = net.value(0, &[k]);
        net.sites[0].send(None, port, x, FailMode::Wait);
    }
    net.run();
    let registers = net.registers;
    let items = read_stream(&mut net, 1, stream, 50);
    assert_eq!(items, (0..50u8).map(|k| vec![k]).collect::<Vec<_>>());
    assert_eq!(registers, 1, "one registration for the whole stream");
    assert_eq!(
        net.registers, 1,
        "reading the pushed cells registers nothing"
    );
}

#[derive(Default)]
struct History {
    /// Old contents answered, each at most once.
    olds: BTreeSet<Vec<u8>>,
    written: BTreeSet<Vec<u8>>,
}

fn exchange_many(net: &mut Net, cell: EntityId, sites: &[usize], rounds: u32) -> History {
    let mut ops = Vec::new();
    let mut h = History::default();
    for r in 0..rounds {
        for &s in sites {
            let new = format!("{s}:{r}").into_bytes();
            h.written.insert(new.clone());
            let x = net.value(s, &new);
            let op = net.op();
            net.sites[s].exchange(op, cell, x, FailMode::Wait);
            ops.push((s, op));
            for _ in 0..net.rng.gen_range(0..4) {
                net.step();
            }
        }
    }
    net.run();
    for (s, op) in ops {
        let old = bytes_of(net.answer(s, op).expect("every exchange ends"));
        assert!(
            h.olds.insert(old.clone()),
            "{:?} answered twice",
            String::from_utf8_lossy(&old)
        );
    }
    h
}

fn check_linearizable(h: &History, init: &[u8], final_content: &[u8]) {
    let mut all = h.written.clone();
    all.insert(init.to_vec());
    let mut returned = h.olds.clone();
    returned.insert(final_content.to_vec());
    assert_eq!(
        returned, all,
        "each value written is answered once or is the content"
    );
}

#[test]
fn exchanges_on_a_mobile_cell_are_linearizable_and_move_the_content() {
    for seed in 0..20 {
        let mut net = Net::new(4, seed);
        let init = net.value(0, b"init");
        let cell = net.sites[0].new_cell(true, init);
        for s in 1..4 {
            net.pass(cell, 0, s);
        }
        let h = exchange_many(&mut net, cell, &[0, 1, 2, 3], 10);
        let op = net.op();
        let last = net.value(1, b"last");
        net.sites[1].exchange(op, cell, last, FailMode::Wait);
        net.run();
        let fin = bytes_of(net.answer(1, op).unwrap());
        check_linearizable(&h, b"init", &fin);
    }
}

#[test]
fn exchanges_on_a_stationary_cell_are_linearizable() {
    let mut net = Net::new(3, 9);
    let init = net.value(0, b"init");
    let cell = net.sites[0].new_cell(false, init);
    net.pass(cell, 0, 1);
    net.pass(cell, 0, 2);
    let h = exchange_many(&mut net, cell, &[0, 1, 2], 10);
    let op = net.op();
    let last = net.value(0, b"last");
    net.sites[0].exchange(op, cell, last, FailMode::Wait);
    net.run();
    let fin = bytes_of(net.answer(0, op).unwrap());
    check_linearizable(&h, b"init", &fin);
}

#[test]
fn every_entity_is_collected_once_no_site_refers_to_it() {
    let mut net = Net::new(3, 4);
    let v = net.sites[0].new_var(false);
    let init = net.value(1, b"c");
    let cell = net.sites[1].new_cell(true, init);
    // A value naming the cell, bound into the variable.
    net.pass(cell, 1, 2);
    net.pass(v, 0, 2);
    let b = net.op();
    let x = net.sites[2].make_value(b"cell inside".to_vec(), vec![cell]);
    net.sites[2].bind(b, v, x, FailMode::Wait);
    net.run();
    // Site 2 moves the cell's content to itself, then drops everything.
    let op = net.op();
    let y = net.value(2, b"moved");
    net.sites[2].exchange(op, cell, y, FailMode::Wait);
    net.run();
    net.drop_handle(2, cell);
    net.drop_handle(2, v);
    net.drop_handle(1, cell);
    net.run();
    assert_eq!(
        net.sites[1].homes(),
        1,
        "the variable's value holds the cell"
    );
    net.drop_handle(0, v);
    net.run();
    assert!(net.empty(), "{}", net.books());
    assert_eq!(net.reclaimed.len(), 2);
}

#[test]
fn a_waiter_on_a_failed_home_ends_with_perm_fail_and_temp_fail_by_its_mode() {
    let mut net = Net::new(3, 5);
    let v = net.sites[0].new_var(false);
    net.pass(v, 0, 1);
    let (waits, fails) = (net.op(), net.op());
    net.sites[1].wait(waits, v, FailMode::Wait);
    net.sites[1].wait(fails, v, FailMode::Fail);
    net.run();
    net.sites[1].site_fault(id(0), sitenet_protocols::FaultState::TempFailed);
    net.pump();
    assert_eq!(net.answer(1, fails), Some(&Err(OpError::TempFail)));
    assert!(net.answer(1, waits).is_none(), "Wait keeps waiting");
    net.kill(0);
    assert_eq!(net.answer(1, waits), Some(&Err(OpError::PermFail)));
    let later = net.op();
    net.sites[1].wait(later, v, FailMode::Wait);
    net.pump();
    assert_eq!(net.answer(1, later), Some(&Err(OpError::PermFail)));
    net.drop_handle(1, v);
    assert_eq!(net.sites[1].proxies(), 0);
}

#[test]
fn a_mobile_cell_is_lost_with_the_site_holding_its_content() {
    let mut net = Net::new(3, 6);
    let init = net.value(0, b"init");
    let cell = net.sites[0].new_cell(true, init);
    net.pass(cell, 0, 1);
    net.pass(cell, 0, 2);
    let op = net.op();
    let x = net.value(1, b"at 1");
    net.sites[1].exchange(op, cell, x, FailMode::Wait);
    net.run();
    assert_eq!(bytes_of(net.answer(1, op).unwrap()), b"init");
    net.kill(1);
    let later = net.op();
    let y = net.value(2, b"at 2");
    net.sites[2].exchange(later, cell, y, FailMode::Wait);
    net.run();
    assert_eq!(net.answer(2, later), Some(&Err(OpError::PermFail)));
}

#[test]
fn a_ticket_taken_after_its_entity_was_collected_is_gone() {
    let mut net = Net::new(2, 7);
    let v = net.sites[0].new_var(false);
    net.drop_handle(0, v);
    assert_eq!(net.sites[0].homes(), 0);
    net.sites[1].take(v);
    net.run();
    let w = net.op();
    net.sites[1].wait(w, v, FailMode::Wait);
    net.run();
    assert_eq!(net.answer(1, w), Some(&Err(OpError::Gone)));
    net.drop_handle(1, v);
    assert!(net.empty(), "{}", net.books());
}

#[test]
fn a_message_handed_back_gives_back_only_what_it_holds() {
    let mut net = Net::new(3, 12);
    let v = net.sites[0].new_var(false);
    let (port, _stream) = net.sites[2].new_port();
    net.pass(v, 0, 1);
    net.pass(port, 2, 1);
    net.run();
    assert_eq!(net.sites[1].books(v), Some((1, 0)));
    let x = net.sites[1].make_value(b"item".to_vec(), vec![v]);
    net.sites[1].send(None, port, x, FailMode::Wait);
    net.pump();
    // sitenet hands the port send back: site 2 failed for good.
    let msg = net.links.get_mut(&(1, 2)).unwrap().pop_back().unwrap();
    assert!(matches!(
        msg,
        sitenet_dataflow_protocols::Wire::PortSend { .. }
    ));
    net.sites[1].site_fault(id(2), sitenet_protocols::FaultState::PermFailed);
    net.sites[1].undelivered(id(2), msg, false);
    net.pump();
    assert_eq!(
        net.sites[1].books(v),
        Some((1, 0)),
        "site 1's own handle on v is still there"
    );
}

#[test]
fn a_mobile_cells_content_handed_back_unsent_reaches_the_next_site_through_the_manager() {
    let mut net = Net::new(3, 13);
    let init = net.value(0, b"init");
    let cell = net.sites[0].new_cell(true, init);
    net.pass(cell, 0, 1);
    net.pass(cell, 0, 2);
    // Site 1 takes the content, then site 2 asks for it.
    let a = net.op();
    let x = net.value(1, b"at 1");
    net.sites[1].exchange(a, cell, x, FailMode::Wait);
    net.run();
    let b = net.op();
    let y = net.value(2, b"at 2");
    net.sites[2].exchange(b, cell, y, FailMode::Wait);
    // Deliver until site 1 passes the content to site 2; sitenet hands
    // that Put back unsent (site 1 gave up on site 2, which is up).
    let put = loop {
        assert!(net.step(), "site 1 never passed the content");
        if let Some(q) = net.links.get_mut(&(1, 2)) {
            if let Some(i) = q.iter().position(|m| matches!(m, Wire::Put { .. })) {
                break q.remove(i).unwrap();
            }
        }
    };
    net.sites[1].undelivered(id(2), put, false);
    net.pump();
    net.run();
    assert_eq!(
        bytes_of(net.answer(2, b).expect("site 2's exchange ends")),
        b"at 1"
    );
}

#[test]
fn a_mobile_cell_proxy_goes_after_its_home_answers_gone() {
    let mut net = Net::new(2, 11);
    let init = net.value(0, b"init");
    let c = net.sites[0].new_cell(true, init);
    net.drop_handle(0, c);
    assert_eq!(net.sites[0].homes(), 0);
    net.sites[1].take(c);
    let op = net.op();
    let x = net.value(1, b"x");
    net.sites[1].exchange(op, c, x, FailMode::Wait);
    net.run();
    assert_eq!(net.answer(1, op), Some(&Err(OpError::Gone)));
    net.drop_handle(1, c);
    net.run();
    assert!(net.empty(), "{}", net.books());
}

#[test]
fn an_operation_on_the_wrong_kind_of_entity_fails() {
    let mut net = Net::new(1, 8);
    let v = net.sites[0].new_var(false);
    let op = net.op();
    let x = net.value(0, b"x");
    net.sites[0].exchange(op, v, x, FailMode::Wait);
    net.pump();
    assert_eq!(net.answer(0, op), Some(&Err(OpError::WrongKind)));
    assert_eq!(v.kind, Kind::Var);
}

/// A random workload over `n` sites: variables, ports and cells made,
/// passed around, bound, sent on, exchanged, and dropped, with the
/// messages delivered in a random order; then every claim is checked.
fn random_workload(seed: u64, n: usize, steps: usize) {
    let mut net = Net::new(n, seed);
    // (site, entity) handles held by the "language".
    let mut held: Vec<(usize, EntityId)> = Vec::new();
    let mut binds: BTreeMap<EntityId, Vec<(usize, sitenet_dataflow_protocols::OpId, Vec<u8>)>> =
        BTreeMap::new();
    let mut waits: Vec<(usize, sitenet_dataflow_protocols::OpId, EntityId)> = Vec::new();
    let mut exchanges: BTreeMap<EntityId, History> = BTreeMap::new();
    let mut ex_ops: Vec<(usize, sitenet_dataflow_protocols::OpId, EntityId)> = Vec::new();
    let mut counter = 0u64;
    for _ in 0..steps {
        let s = net.rng.gen_range(0..n);
        match net.rng.gen_range(0..10) {
            0 => {
                let v = net.sites[s].new_var(false);
                held.push((s, v));
            }
            1 => {
                counter += 1;
                let init = net.value(s, format!("init{counter}").as_bytes());
                let mobile = net.rng.gen_bool(0.5);
                let c = net.sites[s].new_cell(mobile, init);
                exchanges.entry(c).or_default();
                held.push((s, c));
            }
            2 | 3 if !held.is_empty() => {
                let k = net.rng.gen_range(0..held.len());
                let (from, e) = held[k];
                let to = net.rng.gen_range(0..n);
                net.pass(e, from, to);
                held.push((to, e));
            }
            4 if !held.is_empty() => {
                let k = net.rng.gen_range(0..held.len());
                let (site, e) = held.swap_remove(k);
                net.drop_handle(site, e);
            }
            5 | 6 if !held.is_empty() => {
                let k = net.rng.gen_range(0..held.len());
                let (site, e) = held[k];
                let op = net.op();
                counter += 1;
                let bytes = format!("{counter}").into_bytes();
                let x = net.value(site, &bytes);
                match e.kind {
                    Kind::Var => {
                        if net.rng.gen_bool(0.5) {
                            net.sites[site].bind(op, e, x, FailMode::Wait);
                            binds.entry(e).or_default().push((site, op, bytes));
                        } else {
                            net.sites[site].release_value(&x);
                            net.sites[site].wait(op, e, FailMode::Wait);
                            waits.push((site, op, e));
                        }
                    }
                    _ => {
                        net.sites[site].exchange(op, e, x, FailMode::Wait);
                        exchanges.entry(e).or_default().written.insert(bytes);
                        ex_ops.push((site, op, e));
                    }
                }
                net.sites[site].settle_now();
                net.pump();
            }
            _ => {
                // An audit round now and then: it must never unlist a
                // site that holds the entity.
                if net.rng.gen_ratio(1, 3) {
                    net.sites[s].audit();
                    net.pump();
                }
                for _ in 0..net.rng.gen_range(0..6) {
                    net.step();
                }
            }
        }
    }
    net.run();
    // Single assignment: the bind that succeeded first is every waiter's
    // value; binds of other values failed.
    let mut bound: BTreeMap<EntityId, BTreeSet<Vec<u8>>> = BTreeMap::new();
    for (e, bs) in &binds {
        for (site, op, bytes) in bs {
            match net.answer(*site, *op).expect("every bind ends") {
                Ok(_) => {
                    bound.entry(*e).or_default().insert(bytes.clone());
                }
                Err(OpError::Conflict) => {}
                Err(other) => panic!("seed {seed}: a bind failed with {other:?}"),
            }
        }
    }
    for (e, values) in &bound {
        assert_eq!(values.len(), 1, "seed {seed}: {e:?} bound to {values:?}");
    }
    for (site, op, e) in &waits {
        if let Some(a) = net.answer(*site, *op) {
            let got = bytes_of(a);
            assert!(
                bound.get(e).is_some_and(|b| b.contains(&got)),
                "seed {seed}: a wait saw a value no bind won"
            );
        } else {
            assert!(
                !bound.contains_key(e),
                "seed {seed}: a waiter missed the binding: site {site} {e:?} {:?} home {:?}",
                net.sites[*site].books(*e),
                net.sites[common::index(e.home)].books(*e)
            );
        }
    }
    // Exchanges: each old content answered once.
    for (site, op, e) in &ex_ops {
        let old = bytes_of(net.answer(*site, *op).expect("every exchange ends"));
        assert!(
            exchanges.get_mut(e).unwrap().olds.insert(old),
            "seed {seed}: an old content answered twice"
        );
    }
    // Drop every handle and every pending wait's hold: all is collected.
    for (site, e) in held {
        net.drop_handle(site, e);
    }
    let pending: Vec<_> = waits
        .iter()
        .filter(|(s, op, _)| net.answer(*s, *op).is_none())
        .copied()
        .collect();
    assert!(
        pending.iter().all(|(_, _, e)| !bound.contains_key(e)),
        "seed {seed}"
    );
    net.run();
    // Waits on never-bound variables still hold them: bind them all so
    // the waits end, then everything must go.
    for (site, op, e) in pending {
        let b = net.op();
        let x = net.value(site, b"late");
        net.sites[site].bind(b, e, x, FailMode::Wait);
        net.run();
        assert!(net.answer(site, op).is_some(), "seed {seed}");
        if let Some(Ok(Answer::Value(v))) = net.done.remove(&(site, op)) {
            net.sites[site].release_value(&v);
            net.sites[site].settle_now();
        }
    }
    // Values answered to the "language" are given back.
    let answered: Vec<_> = net.done.drain().collect();
    for ((site, _), a) in answered {
        if let Ok(Answer::Value(v)) = a {
            net.sites[site].release_value(&v);
            net.sites[site].settle_now();
        }
    }
    net.pump();
    net.run();
    assert!(net.empty(), "seed {seed}: {}", net.books());
}

#[test]
fn a_random_workload_keeps_every_claim_and_leaves_nothing() {
    for seed in 0..40 {
        random_workload(seed, 4, 400);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn random_workloads_keep_every_claim(seed in any::<u64>(), n in 1usize..6) {
        random_workload(seed, n, 300);
    }
}

#[test]
fn a_million_short_lived_variables_leave_the_books_where_they_started() {
    let mut net = Net::new(3, 10);
    for k in 0..100_000u32 {
        let s = (k % 3) as usize;
        let v = net.sites[s].new_var(false);
        let to = ((k + 1) % 3) as usize;
        net.pass(v, s, to);
        let b = net.op();
        let x = net.value(to, b"x");
        net.sites[to].bind(b, v, x, FailMode::Wait);
        net.drop_handle(s, v);
        net.drop_handle(to, v);
        if k % 64 == 0 {
            net.run();
            net.done.clear();
        }
    }
    net.run();
    assert!(net.empty(), "{}", net.books());
    let _ = Value::default();
}

#[test]
fn a_registration_handed_back_is_sent_again_and_the_sender_released() {
    let mut net = Net::new(3, 14);
    let v = net.sites[0].new_var(false);
    net.pass(v, 0, 1);
    net.run();
    // Site 1 passes v on to site 2, whose Dirty is handed back (maybe
    // delivered: the home forgot the session).
    net.pass(v, 1, 2);
    let dirty = net.links.get_mut(&(2, 0)).unwrap().pop_front().unwrap();
    assert!(matches!(dirty, Wire::Dirty { .. }));
    net.sites[2].undelivered(id(0), dirty, true);
    net.pump();
    net.run();
    // Listed again: site 1 is released, and all drop to nothing.
    for s in [0, 1, 2] {
        net.drop_handle(s, v);
    }
    net.run();
    assert!(net.empty(), "{}", net.books());
}

/// What a site does when a peer fails for good does not depend on the
/// order its tables happen to hold entities in (a simulated run must
/// replay exactly: with hash order, the same seed ran two ways).
#[test]
fn a_peers_failure_is_handled_in_the_same_order_on_every_run() {
    let run = || {
        let mut site = sitenet_dataflow_protocols::Site::new(id(0));
        let vars: Vec<EntityId> = (0..40).map(|_| site.new_var(false)).collect();
        for &v in &vars {
            site.received(
                id(1),
                Wire::Dirty {
                    entity: v,
                    home_copies: 0,
                },
            );
            site.release(v);
        }
        site.settle_now();
        while site.poll_action().is_some() {}
        site.site_fault(id(1), sitenet_protocols::FaultState::PermFailed);
        std::iter::from_fn(|| site.poll_action()).collect::<Vec<_>>()
    };
    let first = run();
    assert_eq!(first.len(), 40, "every variable collected: {first:?}");
    for _ in 0..5 {
        assert_eq!(run(), first);
    }
}

/// A site that gave up on a live home (its failure detector's give-up
/// came before a partition healed) dropped what it held of the home's,
/// and its `Clean` never left. The home's audit asks it, and its answer
/// unlists it: the entity is collected.
#[test]
fn a_home_unlists_a_site_that_gave_it_up_once_its_audit_is_answered() {
    let mut net = Net::new(2, 15);
    let v = net.sites[0].new_var(false);
    net.pass(v, 0, 1);
    net.run();
    net.drop_handle(0, v);
    // Site 1 gives up on site 0, which never learns of it.
    net.sites[1].site_fault(id(0), sitenet_protocols::FaultState::PermFailed);
    net.pump();
    net.links.clear();
    net.drop_handle(1, v);
    net.links.clear();
    net.run();
    assert_eq!(
        net.sites[0].homes(),
        1,
        "listed, and nothing says otherwise"
    );
    // The first round skips site 1 (its `Dirty` was heard since the
    // last); the second asks it.
    net.sites[0].audit();
    net.run();
    assert_eq!(net.sites[0].homes(), 1);
    net.sites[0].audit();
    net.run();
    assert!(net.empty(), "{}", net.books());
}

/// A holder whose `Dirty` is on its way (it dropped the entity, took it
/// again, and the home has not read the new `Dirty` yet) still holds it:
/// the audit's answer must not unlist it after the `Dirty` lists it.
#[test]
fn an_audit_that_crosses_a_new_registration_keeps_the_holder_listed() {
    let mut net = Net::new(3, 16);
    let v = net.sites[0].new_var(false);
    net.pass(v, 0, 1);
    net.run();
    // Site 1 drops v (its Clean waits on the link), then takes a copy from
    // site 2 (which got one from the home): a new Dirty follows the Clean.
    net.pass(v, 0, 2);
    net.run();
    // A round ends: what was heard so far is forgotten.
    net.sites[0].audit();
    net.pump();
    net.drop_handle(1, v);
    net.pass(v, 2, 1);
    // The home audits site 1 before it reads either.
    net.sites[0].audit();
    net.pump();
    net.run();
    assert_eq!(
        net.sites[0].books(v).map(|b| b.1),
        Some(2),
        "{}",
        net.books()
    );
    for s in [0, 1, 2] {
        net.drop_handle(s, v);
    }
    net.run();
    assert!(net.empty(), "{}", net.books());
}

/// A holder heard from since the last round is not asked: the audit costs
/// nothing between sites that talk.
#[test]
fn a_holder_heard_from_since_the_last_round_is_not_audited() {
    let mut net = Net::new(2, 17);
    let v = net.sites[0].new_var(false);
    net.pass(v, 0, 1);
    net.run();
    let audits = |net: &Net| {
        net.links
            .values()
            .flatten()
            .filter(|w| matches!(w, Wire::Audit { .. }))
            .count()
    };
    net.sites[0].audit();
    net.pump();
    assert_eq!(audits(&net), 0, "its Dirty was heard this round");
    net.sites[0].audit();
    net.pump();
    assert_eq!(audits(&net), 1, "a quiet round: it is asked");
    net.run();
    // Site 1 speaks (it waits on v), then a round passes: it is not asked.
    let op = net.op();
    net.sites[1].wait(op, v, FailMode::Wait);
    net.pump();
    net.run();
    net.sites[0].audit();
    net.pump();
    assert_eq!(audits(&net), 0, "heard from: not asked");
    // A quiet round later it is asked again, and still holds v.
    net.sites[0].audit();
    net.pump();
    assert_eq!(audits(&net), 1);
    net.run();
    assert_eq!(net.sites[0].books(v).map(|b| b.1), Some(1));
}

/// A site drops its proxy of a bound variable (its `Clean` on the way)
/// just as a binding that names the variable reaches it: the home took it
/// as registered and holding the value, so it sent nothing more. The new
/// proxy must still get the binding, and a wait on it must end.
#[test]
fn a_variable_named_by_a_pushed_binding_just_after_its_proxy_went_still_answers_waits() {
    let mut net = Net::new(2, 18);
    let r = net.sites[0].new_var(false);
    net.pass(r, 0, 1);
    net.run();
    // Site 1 binds r: it is registered, and holds the value.
    let b = net.op();
    let val = net.value(1, b"r");
    net.sites[1].bind(b, r, val, FailMode::Wait);
    net.run();
    let w = net.sites[0].new_var(false);
    net.pass(w, 0, 1);
    net.run();
    // Site 1 binds w to a value naming r and lets go of r: only the copy
    // in the `Bind` keeps its proxy, until the home releases it.
    let b2 = net.op();
    let x = net.sites[1].make_value(b"w".to_vec(), vec![r]);
    net.sites[1].bind(b2, w, x, FailMode::Wait);
    net.drop_handle(1, r);
    net.run();
    assert_eq!(net.answer(1, b2), Some(&Ok(Answer::Done)));
    let op = net.op();
    net.sites[1].wait(op, r, FailMode::Wait);
    net.pump();
    net.run();
    assert_eq!(
        net.answer(1, op).map(bytes_of),
        Some(b"r".to_vec()),
        "{}",
        net.books()
    );
}

/// The same race with an unbound variable: the home registered the site
/// for it, the site's old proxy went (its `Clean` on the way), and a new
/// binding naming it made a new proxy that counts on the registration.
/// The `Clean` must not undo it: the binding, when it comes, reaches the
/// new proxy.
#[test]
fn a_clean_from_an_old_proxy_keeps_the_registration_a_new_one_counts_on() {
    let mut net = Net::new(2, 19);
    let r = net.sites[0].new_var(false);
    let x = net.sites[0].new_var(false);
    let y = net.sites[0].new_var(false);
    net.pass(x, 0, 1);
    net.pass(y, 0, 1);
    net.run();
    let (wx, wy) = (net.op(), net.op());
    net.sites[1].wait(wx, x, FailMode::Wait);
    net.sites[1].wait(wy, y, FailMode::Wait);
    net.run();
    // x is bound to a value naming r: site 1 is registered for r.
    let b = net.op();
    let vx = net.sites[0].make_value(b"x".to_vec(), vec![r]);
    net.sites[0].bind(b, x, vx, FailMode::Wait);
    net.run();
    if let Some(Ok(Answer::Value(v))) = net.done.get(&(1, wx)).cloned() {
        net.sites[1].release_value(&v);
    }
    // Site 1 lets go of x (and so of r: its Clean leaves) while the home
    // binds y to a value naming r.
    net.drop_handle(1, x);
    let b = net.op();
    let vy = net.sites[0].make_value(b"y".to_vec(), vec![r]);
    net.sites[0].bind(b, y, vy, FailMode::Wait);
    net.run();
    let wr = net.op();
    net.sites[1].wait(wr, r, FailMode::Wait);
    net.pump();
    net.run();
    let b = net.op();
    let vr = net.value(0, b"r");
    net.sites[0].bind(b, r, vr, FailMode::Wait);
    net.run();
    assert_eq!(
        net.answer(1, wr).map(bytes_of),
        Some(b"r".to_vec()),
        "{}",
        net.books()
    );
}

/// A site registered for a variable by an earlier proxy binds it again
/// from a new one, too late: the home sends it the binding (its new proxy
/// counts on it), and a wait there ends.
#[test]
fn a_late_binder_registered_by_an_earlier_proxy_still_gets_the_binding() {
    let mut net = Net::new(2, 20);
    let r = net.sites[0].new_var(false);
    net.pass(r, 0, 1);
    let w = net.op();
    net.sites[1].wait(w, r, FailMode::Wait);
    net.run();
    let b = net.op();
    let a = net.value(0, b"a");
    net.sites[0].bind(b, r, a, FailMode::Wait);
    net.run();
    if let Some(Ok(Answer::Value(v))) = net.done.get(&(1, w)).cloned() {
        net.sites[1].release_value(&v);
    }
    net.drop_handle(1, r);
    net.run();
    assert_eq!(net.sites[1].proxies(), 0);
    // A new proxy, which binds too late.
    net.pass(r, 0, 1);
    net.run();
    let b = net.op();
    let other = net.value(1, b"b");
    net.sites[1].bind(b, r, other, FailMode::Wait);
    net.run();
    assert_eq!(net.answer(1, b), Some(&Err(OpError::Conflict)));
    let w = net.op();
    net.sites[1].wait(w, r, FailMode::Wait);
    net.pump();
    net.run();
    assert_eq!(net.answer(1, w).map(bytes_of), Some(b"a".to_vec()));
}

/// A peer up but forgetful (it dropped the session before acknowledging)
/// makes sitenet hand messages back as maybe delivered: a `Register` is
/// sent again, so the wait still ends; a `Bind` whose fate is unknown
/// ends its operation with `TempFail` instead of waiting for an answer
/// that may never come.
#[test]
fn messages_handed_back_as_maybe_delivered_end_or_repeat_what_waits_on_them() {
    let mut net = Net::new(2, 21);
    let r = net.sites[0].new_var(false);
    net.pass(r, 0, 1);
    net.run();
    let w = net.op();
    net.sites[1].wait(w, r, FailMode::Wait);
    net.pump();
    let register = net.links.get_mut(&(1, 0)).unwrap().pop_front().unwrap();
    assert!(matches!(register, Wire::Register { .. }), "{register:?}");
    net.sites[1].undelivered(id(0), register, true);
    net.pump();
    net.run();
    let b = bind_handed_back_as_maybe_delivered(&mut net, 1, r, b"mine");
    assert_eq!(net.answer(1, b), Some(&Err(OpError::TempFail)));
    let b = net.op();
    let v = net.value(0, b"home's");
    net.sites[0].bind(b, r, v, FailMode::Wait);
    net.run();
    assert_eq!(net.answer(1, w).map(bytes_of), Some(b"home's".to_vec()));
}

/// Three sites: a mobile cell made at site 0, referred to from sites 1
/// and 2, its content moved to site 1 by an exchange there.
fn mobile_cell_held_by_site_1(seed: u64) -> (Net, EntityId) {
    let mut net = Net::new(3, seed);
    let init = net.value(0, b"init");
    let cell = net.sites[0].new_cell(true, init);
    net.pass(cell, 0, 1);
    net.pass(cell, 0, 2);
    net.run();
    let e1 = net.op();
    let v1 = net.value(1, b"one");
    net.sites[1].exchange(e1, cell, v1, FailMode::Wait);
    net.run();
    assert_eq!(net.answer(1, e1).map(bytes_of), Some(b"init".to_vec()));
    (net, cell)
}

/// Site `site` binds `var` to `bytes`, and its `Bind` is handed back as
/// maybe delivered before it leaves: the bind's operation.
fn bind_handed_back_as_maybe_delivered(
    net: &mut Net,
    site: usize,
    var: EntityId,
    bytes: &[u8],
) -> sitenet_dataflow_protocols::OpId {
    let b = net.op();
    let v = net.value(site, bytes);
    net.sites[site].bind(b, var, v, FailMode::Wait);
    net.pump();
    let home = common::index(var.home);
    let q = net.links.get_mut(&(site, home)).unwrap();
    let pos = q
        .iter()
        .position(|w| matches!(w, Wire::Bind { .. }))
        .expect("a Bind on its way");
    let bind = q.remove(pos).unwrap();
    net.sites[site].undelivered(var.home, bind, true);
    net.pump();
    b
}

/// A mobile cell's content handed back as maybe delivered (its receiver
/// may have forgotten the session, with or without it): nobody can tell
/// where it is, so the manager declares it lost. Every exchange ends
/// (`PermFail`), none is answered twice, and nothing is kept.
#[test]
fn a_mobile_cells_content_handed_back_as_maybe_delivered_is_declared_lost() {
    let (mut net, cell) = mobile_cell_held_by_site_1(22);
    // Site 2 asks; the manager forwards to site 1, which puts the content
    // to site 2: that Put is handed back as maybe delivered.
    let e2 = net.op();
    let v2 = net.value(2, b"two");
    net.sites[2].exchange(e2, cell, v2, FailMode::Wait);
    let put = loop {
        net.step();
        if let Some(q) = net.links.get_mut(&(1, 2)) {
            if let Some(pos) = q.iter().position(|w| matches!(w, Wire::Put { .. })) {
                break q.remove(pos).unwrap();
            }
        }
    };
    net.sites[1].undelivered(id(2), put, true);
    net.pump();
    net.run();
    assert_eq!(net.answer(2, e2), Some(&Err(OpError::PermFail)));
    let e3 = net.op();
    let v3 = net.value(1, b"three");
    net.sites[1].exchange(e3, cell, v3, FailMode::Wait);
    net.run();
    assert_eq!(net.answer(1, e3), Some(&Err(OpError::PermFail)));
    for s in [0, 1, 2] {
        net.drop_handle(s, cell);
    }
    net.run();
    assert!(net.empty(), "{}", net.books());
}

/// A home that gave a live site up serves it no more, and the site, never
/// told, would wait for ever. Its audit asks the home about what it waits
/// on; the home answers `Forgotten`, and the wait ends with `PermFail`.
#[test]
fn a_site_a_home_gave_up_learns_it_from_its_audit_and_its_wait_ends() {
    let mut net = Net::new(2, 23);
    let r = net.sites[0].new_var(false);
    net.pass(r, 0, 1);
    net.run();
    let w = net.op();
    net.sites[1].wait(w, r, FailMode::Wait);
    net.run();
    // The home gives site 1 up; site 1 never learns it from sitenet.
    net.sites[0].site_fault(id(1), sitenet_protocols::FaultState::PermFailed);
    net.pump();
    net.links.clear();
    let b = net.op();
    let v = net.value(0, b"bound");
    net.sites[0].bind(b, r, v, FailMode::Wait);
    net.pump();
    net.links.clear();
    assert!(net.answer(1, w).is_none(), "the binding never reaches it");
    for _ in 0..2 {
        net.sites[1].audit();
        net.pump();
        net.run();
    }
    assert_eq!(net.answer(1, w), Some(&Err(OpError::PermFail)));
    net.drop_handle(1, r);
    net.drop_handle(0, r);
    net.run();
    assert!(net.empty(), "{}", net.books());
}

/// A site that gave a live lender up never releases the copy the lender
/// pinned for it. The lender's audit asks it; it answers `Forgotten`, and
/// the lender drops what it kept for it: nothing is kept once every
/// handle went.
#[test]
fn a_lender_drops_a_pin_for_a_site_that_gave_it_up_once_its_audit_is_answered() {
    let mut net = Net::new(3, 24);
    let v = net.sites[0].new_var(false);
    net.pass(v, 0, 1);
    net.run();
    // Site 1 lends v to site 2, which gives site 1 up before releasing.
    net.sites[1].lend(v, id(2));
    net.sites[1].settle_now();
    net.sites[2].receive(v, id(1));
    net.sites[2].acquire(v);
    net.sites[2].site_fault(id(1), sitenet_protocols::FaultState::PermFailed);
    net.sites[2].settle_now();
    net.pump();
    net.run();
    for s in [0, 1, 2] {
        net.drop_handle(s, v);
    }
    net.run();
    assert_eq!(
        net.sites[1].proxies(),
        1,
        "pinned for site 2: {}",
        net.books()
    );
    for _ in 0..2 {
        net.sites[1].audit();
        net.pump();
        net.run();
    }
    assert!(net.empty(), "{}", net.books());
}

/// A `Bind` handed back as maybe delivered ends with `TempFail`; its
/// sender had counted itself registered by it, so it registers again: a
/// later wait still ends.
#[test]
fn a_wait_after_a_bind_handed_back_as_maybe_delivered_still_ends() {
    let mut net = Net::new(2, 25);
    let r = net.sites[0].new_var(false);
    net.pass(r, 0, 1);
    net.run();
    let b = bind_handed_back_as_maybe_delivered(&mut net, 1, r, b"mine");
    net.run();
    assert_eq!(net.answer(1, b), Some(&Err(OpError::TempFail)));
    let w = net.op();
    net.sites[1].wait(w, r, FailMode::Wait);
    net.pump();
    net.run();
    let b = net.op();
    let v = net.value(0, b"home's");
    net.sites[0].bind(b, r, v, FailMode::Wait);
    net.run();
    assert_eq!(net.answer(1, w).map(bytes_of), Some(b"home's".to_vec()));
}

/// A mobile cell's content that reaches a site from a peer it took for
/// failed is refused (nothing such a peer says is taken); the manager
/// learns the content is lost (`MaybeLost`), and the waiting exchange
/// ends instead of the chain waiting for ever.
#[test]
fn a_mobile_cells_content_from_a_site_taken_for_failed_is_declared_lost() {
    let (mut net, cell) = mobile_cell_held_by_site_1(26);
    // Site 2 takes site 1 for failed, then asks for the content, which
    // site 1 holds.
    net.sites[2].site_fault(id(1), sitenet_protocols::FaultState::PermFailed);
    net.pump();
    let e2 = net.op();
    let v2 = net.value(2, b"two");
    net.sites[2].exchange(e2, cell, v2, FailMode::Wait);
    net.pump();
    net.run();
    assert_eq!(net.answer(2, e2), Some(&Err(OpError::PermFail)));
    for s in [0, 1, 2] {
        net.drop_handle(s, cell);
    }
    net.run();
    assert!(net.empty(), "{}", net.books());
}

/// A holder passes a mobile cell's content on and drops the cell (its
/// proxy goes); then the content is handed back unsent (the holder gave
/// the next site up). The content still goes back to the manager, which
/// passes it to the next site: the waiting exchange is answered.
#[test]
fn a_mobile_cells_content_handed_back_unsent_after_its_holder_let_go_still_reaches_the_next_site() {
    let (mut net, cell) = mobile_cell_held_by_site_1(27);
    let e2 = net.op();
    let v2 = net.value(2, b"two");
    net.sites[2].exchange(e2, cell, v2, FailMode::Wait);
    let put = loop {
        net.step();
        if let Some(q) = net.links.get_mut(&(1, 2)) {
            if let Some(pos) = q.iter().position(|w| matches!(w, Wire::Put { .. })) {
                break q.remove(pos).unwrap();
            }
        }
    };
    net.drop_handle(1, cell);
    net.run();
    assert_eq!(net.sites[1].proxies(), 0, "site 1 let go: {}", net.books());
    net.sites[1].undelivered(id(2), put, false);
    net.pump();
    net.run();
    assert_eq!(net.answer(2, e2).map(bytes_of), Some(b"one".to_vec()));
    for s in [0, 2] {
        net.drop_handle(s, cell);
    }
    net.run();
    assert!(net.empty(), "{}", net.books());
}
