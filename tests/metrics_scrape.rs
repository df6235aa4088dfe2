//! A node's metrics scraped over HTTP: the OpenMetrics
//! text of `Node::openmetrics` served by `sitenet::metrics_http` and by
//! `sitenet node --metrics tcp:HOST:PORT`, fetched with a real HTTP client
//! (ureq), and the responder's bounds against clients that never finish
//! their request.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::cli::start_node_with;
use common::PATIENCE;
use sitenet::metrics_http::{self, Limits};
use sitenet::services::{Echo, EchoReply};
use sitenet::{Node, OPENMETRICS_CONTENT_TYPE};

/// An HTTP client that reports 4xx as responses, goes through no proxy
/// (the environment's may name one: traffic stays on loopback) and gives
/// up after a generous time.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(PATIENCE))
        .build()
        .into()
}

/// `GET http://ADDR/PATH` for `tcp:ADDR`: status, content type, body.
fn get(address: &str, path: &str) -> (u16, String, String) {
    let host = address.strip_prefix("tcp:").expect("a tcp: address");
    let mut r = agent()
        .get(format!("http://{host}{path}"))
        .call()
        .expect("the scrape is answered");
    let content_type = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = r.body_mut().read_to_string().expect("a text body");
    (r.status().as_u16(), content_type, body)
}

/// The value of the sample named exactly `name` (no labels).
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// A runtime for the responder: it runs on its own thread while the test
/// blocks on the client.
fn server_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// Binds a responder on a free loopback port and serves `render` there.
fn serve(
    rt: &tokio::runtime::Runtime,
    render: impl Fn() -> String + Send + Sync + 'static,
    limits: Limits,
) -> String {
    let listener = rt
        .block_on(metrics_http::bind("tcp:127.0.0.1:0"))
        .expect("binds");
    let address = metrics_http::local_address(&listener).unwrap();
    assert!(!address.ends_with(":0"), "a real port: {address}");
    rt.spawn(metrics_http::serve(listener, render, limits));
    address
}

fn echo_server() -> Node {
    Node::builder()
        .listen("tcp:127.0.0.1:0")
        .configure(|c| c.builtin_services = true)
        .start()
        .unwrap()
}

fn echo(client: &Node, server: &Node, n: u64) {
    let site = client.site(&server.listen_addresses()[0]).unwrap();
    for seq in 0..n {
        site.request::<Echo, EchoReply>(&Echo { seq })
            .timeout(PATIENCE)
            .blocking()
            .unwrap();
    }
}

#[test]
fn a_scrape_carries_every_counter_with_the_nodes_values() {
    let server = echo_server();
    let client = Node::builder().start().unwrap();
    echo(&client, &server, 25);
    assert!(server
        .wait_until_blocking(|m| m.messages_delivered >= 25, PATIENCE)
        .unwrap());

    let rt = server_runtime();
    let address = rt.block_on(async {
        let listener = metrics_http::bind("tcp:127.0.0.1:0").await.unwrap();
        let address = metrics_http::local_address(&listener).unwrap();
        tokio::spawn(metrics_http::serve_node(
            listener,
            server.clone(),
            Limits::default(),
        ));
        address
    });

    let before = server.metrics();
    let (status, content_type, text) = get(&address, "/metrics");
    let after = server.metrics();
    assert_eq!(status, 200);
    assert_eq!(content_type, OPENMETRICS_CONTENT_TYPE);
    assert!(text.ends_with("\n# EOF\n"), "no # EOF terminator");
    assert_eq!(text.matches("# EOF").count(), 1);

    // The counter moved, and the scrape read the node's own value (taken
    // between the two snapshots around it).
    let delivered = sample(&text, "sitenet_messages_delivered_total").expect("delivered") as u64;
    assert!(delivered >= 25, "{delivered}");
    assert!(
        (before.messages_delivered..=after.messages_delivered).contains(&delivered),
        "{} <= {delivered} <= {}",
        before.messages_delivered,
        after.messages_delivered
    );
    let opened = sample(&text, "sitenet_channels_opened_total").unwrap() as u64;
    assert!((before.channels_opened..=after.channels_opened).contains(&opened));

    // Every field of `Metrics` is there, as a counter or (the few marked
    // so) a gauge, with a HELP line.
    let fields = serde_json::to_value(after).unwrap();
    for name in fields.as_object().unwrap().keys() {
        let family = format!("sitenet_{name}");
        assert!(
            text.contains(&format!("# HELP {family} ")),
            "{family}: no HELP"
        );
        let counter = sample(&text, &format!("{family}_total"));
        let gauge = sample(&text, &family);
        assert!(
            counter.is_some() != gauge.is_some(),
            "{family}: one sample, counter or gauge"
        );
    }
    for gauge in [
        "sitenet_slots_in_use",
        "sitenet_slots_hard_limit",
        "sitenet_slots_weak_limit",
        "sitenet_transport_bytes_bound",
        "sitenet_sites_live",
        "sitenet_sites_idle",
        "sitenet_sites_parked",
        "sitenet_output_bytes",
        "sitenet_output_bytes_bound",
        "sitenet_handshakes_pending",
        "sitenet_handshakes_pending_bound",
    ] {
        assert!(text.contains(&format!("# TYPE {gauge} gauge\n")), "{gauge}");
        assert!(sample(&text, gauge).is_some(), "{gauge}");
    }
    assert_eq!(sample(&text, "sitenet_sites_live"), Some(1.0));
    // The one client's per-site series, labelled with its id.
    let id = client.id().to_string();
    assert!(
        text.lines().any(|l| l.starts_with(&format!(
            "sitenet_site_messages_received_total{{site=\"{id}\","
        )) && l.contains("level=\"3\"")),
        "{text}"
    );

    // Other paths and methods.
    let (status, _, body) = get(&address, "/");
    assert_eq!(status, 404, "{body}");
    let (status, _, _) = get(&address, "/metrics/x");
    assert_eq!(status, 404);
    let r = agent()
        .post(format!("http://{}/metrics", &address[4..]))
        .send("")
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    // Still serving after all that.
    assert_eq!(get(&address, "/metrics").0, 200);
}

#[test]
fn per_site_series_are_capped_to_the_deepest_queues() {
    let server = echo_server();
    let clients: Vec<Node> = (0..5).map(|_| Node::builder().start().unwrap()).collect();
    for c in &clients {
        echo(c, &server, 1);
    }
    // Each site publishes its counters when its channel opens.
    assert!(server
        .wait_until_blocking(|m| m.channels_opened >= 5, PATIENCE)
        .unwrap());

    let series = |text: &str| {
        text.lines()
            .filter(|l| l.starts_with("sitenet_site_queue_depth{"))
            .count()
    };
    let all = server.openmetrics();
    assert_eq!(sample(&all, "sitenet_sites_live"), Some(5.0));
    assert_eq!(series(&all), 5, "5 sites, under the default cap");
    assert_eq!(sample(&all, "sitenet_sites_exported"), Some(5.0));

    let two = server.openmetrics_top_sites(2);
    assert_eq!(series(&two), 2);
    assert_eq!(sample(&two, "sitenet_sites_exported"), Some(2.0));
    assert_eq!(sample(&two, "sitenet_sites_live"), Some(5.0));
    // Four levels of three by-level counters, five other families: per site.
    let per_site_lines = two
        .lines()
        .filter(|l| l.starts_with("sitenet_site_"))
        .count();
    assert_eq!(per_site_lines, 2 * (3 * 4 + 5));

    let none = server.openmetrics_top_sites(0);
    assert_eq!(series(&none), 0);
    assert_eq!(sample(&none, "sitenet_sites_exported"), Some(0.0));
    assert!(none.ends_with("# EOF\n"));
}

#[test]
fn sitenet_node_serves_its_metrics() {
    let (_node, first) = start_node_with(&["--metrics", "tcp:127.0.0.1:0"]);
    // The existing keys are unchanged; "metrics" is added.
    let listen = first["listen"][0].as_str().unwrap().to_string();
    assert!(listen.starts_with("tcp:127.0.0.1:"), "{first}");
    assert!(first["site_id"].is_string() && first["protocol"].is_u64());
    let metrics = first["metrics"]
        .as_str()
        .expect("a metrics key")
        .to_string();
    assert!(
        metrics.starts_with("tcp:127.0.0.1:") && !metrics.ends_with(":0"),
        "{metrics}"
    );

    let ping = common::cli::json_of(&["ping", &listen, "--count", "10", "--json"]);
    assert_eq!(ping["count"], 10);

    let (status, content_type, text) = get(&metrics, "/metrics");
    assert_eq!(status, 200);
    assert_eq!(content_type, OPENMETRICS_CONTENT_TYPE);
    assert!(text.ends_with("\n# EOF\n"));
    let delivered = sample(&text, "sitenet_messages_delivered_total").unwrap();
    assert!(delivered >= 10.0, "the pings were delivered: {delivered}");
    assert!(text.contains("# TYPE sitenet_slots_in_use gauge\n"));
    assert_eq!(get(&metrics, "/nope").0, 404);

    // Without --metrics the line is what it was.
    let (_plain, first) = start_node_with(&[]);
    assert!(first.get("metrics").is_none(), "{first}");
}

#[test]
fn sitenet_node_refuses_a_metrics_address_that_is_not_tcp() {
    for bad in [
        "unix:/tmp/sitenet-metrics.sock",
        "127.0.0.1:9464",
        "tcp:127.0.0.1:x",
    ] {
        let out = common::cli::run(&["node", "--metrics", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--metrics"), "{bad}: {err}");
    }
}

/// A client that sends header bytes for ever is answered (431) and
/// closed once the head passes the limit: the server reads at most that
/// much, so its writes soon fail instead of filling the server's memory.
#[test]
fn an_endless_request_head_is_cut_off() {
    let rt = server_runtime();
    let address = serve(&rt, || "# EOF\n".to_string(), Limits::default());
    let mut s = TcpStream::connect(&address[4..]).unwrap();
    s.set_write_timeout(Some(PATIENCE)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nX-Endless: ")
        .unwrap();
    let chunk = vec![b'a'; 64 * 1024];
    let mut sent = 0usize;
    let started = Instant::now();
    let cut = loop {
        match s.write(&chunk) {
            Ok(n) => sent += n,
            Err(e) => break e,
        }
        // Socket buffers on both sides hold a few MiB at most: far past
        // that, the server would be reading it all.
        assert!(sent < 256 << 20, "256 MiB sent and still accepted");
        assert!(started.elapsed() < PATIENCE, "still writing");
    };
    eprintln!("cut off after {sent} bytes: {cut}");

    // And it still answers a well-behaved scraper.
    let (status, _, body) = get(&address, "/metrics");
    assert_eq!((status, body.as_str()), (200, "# EOF\n"));
}

/// A client that drips its head a line at a time never finishes it: the
/// deadline is for the whole head, so it is answered 408 and closed.
#[test]
fn a_dripping_request_head_meets_the_deadline() {
    let rt = server_runtime();
    let limits = Limits {
        head_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let address = serve(&rt, || "# EOF\n".to_string(), limits);
    let mut s = TcpStream::connect(&address[4..]).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    let mut dripper = s.try_clone().unwrap();
    let started = Instant::now();
    let drip = std::thread::spawn(move || {
        // Paced writes (the point of the test), each well inside the
        // deadline, at most for PATIENCE; ends when the server closes.
        while started.elapsed() < PATIENCE {
            if dripper.write_all(b"X-Drip: 1\r\n").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let mut answer = Vec::new();
    // Read until the server closes (EOF, or a reset once it has).
    let _ = s.read_to_end(&mut answer);
    let waited = started.elapsed();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer:?}");
    assert!(waited < Duration::from_secs(30), "closed after {waited:?}");
    drip.join().unwrap();
}

/// Past `max_connections`, a scraper is answered at once: the oldest
/// connection still sending its head is closed to make room for it, the
/// other keeps its place until its own deadline (answered 408).
#[test]
fn past_the_cap_the_oldest_silent_connection_makes_room() {
    let rt = server_runtime();
    let limits = Limits {
        max_connections: 2,
        head_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let address = serve(&rt, || "# EOF\n".to_string(), limits);
    let silent: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(&address[4..]).unwrap())
        .collect();
    let (status, _, body) = get(&address, "/metrics");
    assert_eq!((status, body.as_str()), (200, "# EOF\n"));
    let answers: Vec<String> = silent
        .into_iter()
        .map(|mut s| {
            s.set_read_timeout(Some(PATIENCE)).unwrap();
            let mut answer = Vec::new();
            let _ = s.read_to_end(&mut answer);
            String::from_utf8_lossy(&answer).into_owned()
        })
        .collect();
    assert_eq!(answers[0], "", "the oldest is closed without an answer");
    assert!(answers[1].starts_with("HTTP/1.1 408 "), "{:?}", answers[1]);
}
