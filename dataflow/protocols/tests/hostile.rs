//! Whatever another site sends, a site's protocols neither panic nor grow
//! without bound: random messages from made-up and real peers, about real
//! and made-up entities, into a site that has entities of its own.

use proptest::prelude::*;
use sitenet_dataflow_protocols::{EntityId, FailMode, Kind, OpId, Refused, Site, Value, Wire};
use sitenet_protocols::{FaultState, SiteId};

const ME: SiteId = SiteId(1);

fn site_id() -> impl Strategy<Value = SiteId> {
    (1u128..5).prop_map(SiteId)
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Var),
        Just(Kind::Port),
        Just(Kind::MobileCell),
        Just(Kind::StationaryCell)
    ]
}

fn entity() -> impl Strategy<Value = EntityId> {
    (site_id(), 0u64..8, kind()).prop_map(|(home, serial, kind)| EntityId { home, serial, kind })
}

fn value() -> impl Strategy<Value = Value> {
    (
        proptest::collection::vec(any::<u8>(), 0..8),
        proptest::collection::vec(entity(), 0..4),
    )
        .prop_map(|(b, refs)| Value {
            bytes: b.into(),
            refs,
        })
}

fn refused() -> impl Strategy<Value = Option<Refused>> {
    prop_oneof![
        Just(None),
        Just(Some(Refused::Conflict)),
        Just(Some(Refused::Gone))
    ]
}

fn wire() -> impl Strategy<Value = Wire> {
    let op = (0u64..6).prop_map(OpId);
    prop_oneof![
        (entity(), 0u64..3).prop_map(|(entity, home_copies)| Wire::Dirty {
            entity,
            home_copies
        }),
        entity().prop_map(|entity| Wire::DirtyAck { entity }),
        entity().prop_map(|entity| Wire::Clean { entity }),
        entity().prop_map(|entity| Wire::Release { entity }),
        entity().prop_map(|entity| Wire::Gone { entity }),
        entity().prop_map(|entity| Wire::Audit { entity }),
        entity().prop_map(|entity| Wire::Forgotten { entity }),
        entity().prop_map(|var| Wire::Register { var }),
        (entity(), op.clone(), value()).prop_map(|(var, op, value)| Wire::Bind { var, op, value }),
        (entity(), op.clone(), refused()).prop_map(|(var, op, refused)| Wire::BindAck {
            var,
            op,
            refused
        }),
        (entity(), value()).prop_map(|(var, value)| Wire::Bound { var, value }),
        (entity(), value(), proptest::option::of(op.clone()))
            .prop_map(|(port, value, op)| Wire::PortSend { port, value, op }),
        (entity(), op.clone(), refused()).prop_map(|(port, op, refused)| Wire::PortAck {
            port,
            op,
            refused
        }),
        (entity(), op.clone(), value()).prop_map(|(cell, op, new)| Wire::Exchange {
            cell,
            op,
            new
        }),
        (entity(), op, value()).prop_map(|(cell, op, v)| Wire::Exchanged {
            cell,
            op,
            old: Ok(v)
        }),
        entity().prop_map(|cell| Wire::Get { cell }),
        (entity(), site_id()).prop_map(|(cell, to)| Wire::Forward { cell, to }),
        (entity(), value()).prop_map(|(cell, content)| Wire::Put { cell, content }),
        entity().prop_map(|cell| Wire::Got { cell }),
        (entity(), value()).prop_map(|(cell, content)| Wire::Return { cell, content }),
        entity().prop_map(|cell| Wire::ReturnAck { cell }),
        entity().prop_map(|cell| Wire::Lost { cell }),
        entity().prop_map(|cell| Wire::MaybeLost { cell }),
    ]
}

#[derive(Debug, Clone)]
enum Input {
    Msg(SiteId, Wire),
    Fault(SiteId, FaultState),
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        8 => (site_id(), wire()).prop_map(|(s, w)| Input::Msg(s, w)),
        1 => (site_id(), prop_oneof![Just(FaultState::Ok), Just(FaultState::TempFailed), Just(FaultState::PermFailed)])
            .prop_map(|(s, f)| Input::Fault(s, f)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn any_messages_from_any_peers_neither_panic_nor_grow_a_site(inputs in proptest::collection::vec(input(), 0..60)) {
        let mut site = Site::new(ME);
        // Entities of its own, and operations under way on them and others.
        let v = site.new_var(true);
        let (p, s) = site.new_port();
        let c = site.new_cell(true, Value::plain(b"c".to_vec()));
        let d = site.new_cell(false, Value::plain(b"d".to_vec()));
        site.wait(OpId(100), s, FailMode::Wait);
        let remote = EntityId { home: SiteId(2), serial: 1, kind: Kind::MobileCell };
        site.take(remote);
        site.exchange(OpId(101), remote, Value::plain(b"x".to_vec()), FailMode::Fail);
        let n = inputs.len();
        for i in inputs {
            match i {
                Input::Msg(from, w) => site.received(from, w),
                Input::Fault(s, f) => site.site_fault(s, f),
            }
            while site.poll_action().is_some() {}
        }
        // Made-up entities make no home; proxies stay within what arrived.
        prop_assert!(site.homes() <= 6 + 2 * n, "{} homes", site.homes());
        prop_assert!(site.proxies() <= 1 + 5 * n, "{} proxies", site.proxies());
        let _ = (v, p, c, d);
    }
}

#[test]
fn a_port_send_naming_one_of_our_variables_is_refused_not_a_panic() {
    let mut site = Site::new(ME);
    let v = site.new_var(false);
    let forged = EntityId {
        kind: Kind::Var,
        ..v
    };
    site.received(
        SiteId(2),
        Wire::PortSend {
            port: forged,
            value: Value::plain(b"x".to_vec()),
            op: Some(OpId(1)),
        },
    );
    let answers: Vec<_> = std::iter::from_fn(|| site.poll_action()).collect();
    assert!(
        answers.iter().any(|a| matches!(
            a,
            sitenet_dataflow_protocols::Action::Send {
                msg: Wire::PortAck {
                    refused: Some(Refused::Gone),
                    ..
                },
                ..
            }
        )),
        "{answers:?}"
    );
}

#[test]
fn releases_a_peer_never_owed_neither_underflow_nor_collect_a_pinned_entity() {
    let mut site = Site::new(ME);
    let v = site.new_var(false);
    // v is pinned for site 2 (a copy on its way), then forged Releases
    // from site 3, and more than one from site 2.
    site.lend(v, SiteId(2));
    site.release(v);
    for _ in 0..3 {
        site.received(SiteId(3), Wire::Release { entity: v });
    }
    while site.poll_action().is_some() {}
    assert_eq!(site.homes(), 1, "still pinned for site 2");
    for _ in 0..3 {
        site.received(SiteId(2), Wire::Release { entity: v });
    }
    while site.poll_action().is_some() {}
    assert_eq!(site.homes(), 0, "released: collected");
}
