use std::time::Duration;

use serde::{Deserialize, Serialize};
use sitenet::{Message, Node};

#[derive(Debug, Serialize, Deserialize)]
struct Ping {
    n: u64,
}
impl Message for Ping {
    const ID: u32 = 1;
}
#[derive(Debug, Serialize, Deserialize)]
struct Pong {
    n: u64,
}
impl Message for Pong {
    const ID: u32 = 2;
}

#[test]
fn request_reply_over_tcp() {
    let server = Node::builder().listen("tcp:127.0.0.1:0").start().unwrap();
    server
        .handle(|ctx, p: Ping| {
            ctx.reply(&Pong { n: p.n + 1 }).unwrap();
        })
        .unwrap();
    let client = Node::builder().start().unwrap();
    let site = client.site(&server.listen_addresses()[0]).unwrap();
    for i in 0..100 {
        let r = site
            .request::<Ping, Pong>(&Ping { n: i })
            .timeout(Duration::from_secs(10))
            .blocking()
            .unwrap();
        assert_eq!(r.msg.n, i + 1);
    }
    assert_eq!(site.id(), Some(server.id()));
}
