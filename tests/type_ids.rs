//! Message type ids are printed as they are declared (`const ID: u32 =
//! 100` reads "100"), in errors and in what a peer answers: a user looking
//! for the type in the code finds it.

mod common;

use common::*;
use serde::{Deserialize, Serialize};
use sitenet::{DecodeError, Message, Node, NodeError, RequestError, SendError};

/// A request type the server has no handler for.
#[derive(Debug, Serialize, Deserialize)]
struct Unhandled;
impl Message for Unhandled {
    const ID: u32 = 4242;
}

#[test]
fn errors_name_type_ids_in_decimal() {
    let node = Node::builder().start().unwrap();
    node.handle(|_ctx, _: Numbered| {}).unwrap();
    let twice = node.handle(|_ctx, _: Numbered| {}).unwrap_err();
    assert!(matches!(twice, NodeError::DuplicateHandler(100)));
    let shown = [
        twice.to_string(),
        NodeError::ReservedId(4_294_901_761).to_string(),
        SendError::ReservedId(4_294_901_761).to_string(),
        DecodeError::WrongType {
            expected: 100,
            got: 101,
        }
        .to_string(),
        DecodeError::Header {
            type_id: 100,
            reason: "eof".into(),
        }
        .to_string(),
    ];
    for s in &shown {
        assert!(!s.contains("0x64") && !s.contains("0xffff0001"), "{s}");
    }
    assert!(shown[0].contains("type id 100 "), "{}", shown[0]);
    assert!(shown[1].contains("4294901761"), "{}", shown[1]);
    assert!(shown[2].contains("4294901761"), "{}", shown[2]);
    assert!(shown[3].contains("type 101, not 100"), "{}", shown[3]);
    assert!(shown[4].contains("type 100:"), "{}", shown[4]);
}

/// A peer without a handler for a request's type says so naming the type
/// as declared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_without_a_handler_names_the_type_in_decimal() {
    let server = listening_node();
    let client = Node::builder().start().unwrap();
    let site = client.site(addr(&server)).unwrap();
    let e = site
        .request::<Unhandled, Unhandled>(&Unhandled)
        .timeout(PATIENCE)
        .await
        .unwrap_err();
    assert!(
        matches!(e, RequestError::NoHandler { type_id: 4242 }),
        "{e}"
    );
    assert!(e.to_string().contains("type 4242"), "{e}");
}
