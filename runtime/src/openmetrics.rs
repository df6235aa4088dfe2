//! The OpenMetrics text exposition of a node: every
//! counter of [`Metrics`] and the gauges of [`NodeStats`], in the format
//! Prometheus and its kin scrape, so an operator watches a node with the
//! tools they already run instead of polling `sitenet stats`.
//!
//! Nothing is registered ahead of time and nothing is kept: a scrape takes
//! one snapshot of the counters and of the node's stats and encodes it
//! (through `prometheus-client`, which writes the text). A node that is
//! never scraped pays nothing.
//!
//! Names: `sitenet_<counter>_total` for each counter (its HELP is the
//! field's doc comment), `sitenet_<name>` for each gauge, and per-site
//! series `sitenet_site_*{site, address}` for at most a few sites — those
//! with the deepest queues — so a node with 100,000 sites still gives a
//! scrape of a few hundred lines.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

use crate::metrics::{Kind, Metrics};
use crate::stats::{NodeStats, SiteStats};

/// The `Content-Type` of [`Node::openmetrics`](crate::Node::openmetrics)'s
/// text: what an HTTP server answering a scrape sends, so the scraper
/// parses OpenMetrics (not the older Prometheus text format).
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How many sites [`Node::openmetrics`](crate::Node::openmetrics) gives
/// per-site series for: those with the deepest queues (the ones an
/// operator looks at first). The series of the others are left out so a
/// scrape stays small whatever the number of sites;
/// [`Node::openmetrics_top_sites`](crate::Node::openmetrics_top_sites)
/// chooses another number.
pub const OPENMETRICS_TOP_SITES: usize = 10;

/// The prefix of every metric name.
const PREFIX: &str = "sitenet";

/// What one scrape encodes: taken once, encoded once, dropped.
#[derive(Debug)]
struct Snapshot {
    metrics: Metrics,
    /// `per_site` holds only the sites to export, deepest queue first.
    stats: NodeStats,
}

/// The exposition of `metrics` and `stats`, `# EOF` included. `stats`'s
/// `per_site` must hold only the sites to export (at most a few): each
/// gives about twenty lines.
pub(crate) fn encode(metrics: Metrics, stats: NodeStats) -> String {
    let lines = 4 * 40 + 20 * stats.per_site.len();
    let mut registry = Registry::with_prefix(PREFIX);
    registry.register_collector(Box::new(Snapshot { metrics, stats }));
    let mut out = String::with_capacity(lines * 100);
    // A `String` never refuses a write and the collector fails only when
    // its writer does: an error here would be a bug in the encoder.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
        tracing::error!(error = %e, "encoding the OpenMetrics exposition failed");
    }
    out
}

/// A HELP text as OpenMetrics wants it: one line, with backslashes and
/// double quotes escaped (prometheus-client writes HELP as given).
fn help(doc: &str) -> String {
    let mut out = String::with_capacity(doc.len());
    for (i, word) in doc.split_whitespace().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        for c in word.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                c => out.push(c),
            }
        }
    }
    out
}

fn counter(enc: &mut DescriptorEncoder, name: &str, doc: &str, v: u64) -> fmt::Result {
    let c = ConstCounter::new(v);
    c.encode(enc.encode_descriptor(name, &help(doc), None, c.metric_type())?)
}

fn gauge(enc: &mut DescriptorEncoder, name: &str, doc: &str, v: u64) -> fmt::Result {
    let g = ConstGauge::new(v);
    g.encode(enc.encode_descriptor(name, &help(doc), None, g.metric_type())?)
}

/// The labels of a site's series: its id and the address it was asked
/// for (or, for a site that only connected to us, the first address it
/// listed, else its channel's peer; empty when none is known).
fn site_labels(s: &SiteStats) -> [(&'static str, &str); 2] {
    let address = s
        .address
        .as_deref()
        .or(s.addresses.first().map(String::as_str))
        .or(s.channel.as_deref())
        .unwrap_or_default();
    [
        ("site", s.site.as_deref().unwrap_or_default()),
        ("address", address),
    ]
}

impl Snapshot {
    /// The per-site families, one series per exported site (per level
    /// for the counters kept by level).
    fn encode_sites(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        // Two entries may name the same site (one contacted under an
        // address the site did not list, then redirected): a label set
        // appears once, the deeper queue's.
        let mut seen = std::collections::HashSet::new();
        let sites: Vec<&SiteStats> = self
            .stats
            .per_site
            .iter()
            .filter(|s| seen.insert(site_labels(s)))
            .collect();
        gauge(
            enc,
            "sites_exported",
            "Sites whose per-site series (sitenet_site_*) this scrape carries: those with the \
             deepest queues, at most a few (the others are left out).",
            sites.len() as u64,
        )?;

        type Get = fn(&SiteStats) -> u64;
        let gauges: [(&str, &str, Get); 2] = [
            (
                "site_queue_depth",
                "Messages queued, partly sent or unacknowledged for the site.",
                |s| s.queue_depth,
            ),
            (
                "site_connected",
                "1 while a channel to the site works, else 0.",
                |s| u64::from(s.connected),
            ),
        ];
        for (name, doc, get) in gauges {
            let mut m = enc.encode_descriptor(name, &help(doc), None, MetricType::Gauge)?;
            for s in &sites {
                m.encode_family(&site_labels(s))?.encode_gauge(&get(s))?;
            }
        }

        let counters: [(&str, &str, Get); 3] = [
            (
                "site_retransmitted",
                "Messages resent to the site after a lost channel.",
                |s| s.retransmitted,
            ),
            (
                "site_reconnects",
                "Channels opened to or accepted from the site beyond the first.",
                |s| s.reconnects,
            ),
            (
                "site_preemptions",
                "Channels to the site closed because the slot controller preempted them.",
                |s| s.preemptions,
            ),
        ];
        for (name, doc, get) in counters {
            let mut m = enc.encode_descriptor(name, &help(doc), None, MetricType::Counter)?;
            for s in &sites {
                m.encode_family(&site_labels(s))?
                    .encode_counter::<NoLabelSet, u64, f64>(&get(s), None)?;
            }
        }

        type ByLevel = fn(&SiteStats) -> [u64; 4];
        let by_level: [(&str, &str, ByLevel); 3] = [
            (
                "site_messages_sent",
                "Messages sent to the site for the first time, by priority level (1 to 4).",
                |s| s.messages_sent,
            ),
            (
                "site_bytes_sent",
                "Frame bytes written to the site for application messages, by level \
                 (resends included).",
                |s| s.bytes_sent,
            ),
            (
                "site_messages_received",
                "Messages delivered from the site, by level.",
                |s| s.messages_received,
            ),
        ];
        const LEVELS: [&str; 4] = ["1", "2", "3", "4"];
        for (name, doc, get) in by_level {
            let mut m = enc.encode_descriptor(name, &help(doc), None, MetricType::Counter)?;
            for s in &sites {
                let [site, address] = site_labels(s);
                for (level, v) in LEVELS.iter().zip(get(s)) {
                    m.encode_family(&[site, address, ("level", level)])?
                        .encode_counter::<NoLabelSet, u64, f64>(&v, None)?;
                }
            }
        }
        Ok(())
    }
}

impl Collector for Snapshot {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        for (name, doc, kind, v) in self.metrics.fields() {
            match kind {
                Kind::Counter => counter(&mut enc, name, doc, v)?,
                Kind::Gauge => gauge(&mut enc, name, doc, v)?,
            }
        }

        let s = &self.stats;
        let slots = &s.slots;
        // The slot controller's own counts (shared with the other nodes of
        // the process unless the node has its own: hence `slots_`).
        let shared = " (the node's TransController: shared with the other nodes of the process \
                      unless the node has its own).";
        let gauges: [(&str, String, u64); 9] = [
            (
                "slots_in_use",
                format!("Channel slots in use{shared}"),
                slots.in_use as u64,
            ),
            (
                "slots_waiting",
                format!("Sites waiting for a channel slot{shared}"),
                slots.waiting as u64,
            ),
            (
                "slots_weak_limit",
                format!("Channel slots in use above which idle channels are closed weakly{shared}"),
                slots.weak as u64,
            ),
            (
                "slots_hard_limit",
                format!("Channel slots never exceeded: at this limit accepts are refused{shared}"),
                slots.hard as u64,
            ),
            (
                "slots_in_use_peak",
                format!("The most channel slots in use at once{shared}"),
                slots.peak_in_use as u64,
            ),
            (
                "slots_waiting_peak",
                format!("The most sites waiting for a slot at once{shared}"),
                slots.peak_waiting as u64,
            ),
            (
                "slots_line",
                format!(
                    "Accepted peers waiting in line for a slot, told to wait instead of being \
                     refused{shared}"
                ),
                slots.in_line as u64,
            ),
            (
                "slots_line_limit",
                format!("Accepted peers that may wait in line at most{shared}"),
                slots.line_limit as u64,
            ),
            (
                "slots_line_peak",
                format!("The most accepted peers in line at once{shared}"),
                slots.peak_line as u64,
            ),
        ];
        for (name, doc, v) in &gauges {
            gauge(&mut enc, name, doc, *v)?;
        }
        let counters: [(&str, String, u64); 7] = [
            (
                "slots_granted",
                format!("Channel slots granted{shared}"),
                slots.granted,
            ),
            (
                "slots_queued",
                format!("Slot requests that had to wait{shared}"),
                slots.queued,
            ),
            (
                "slots_accepts_refused",
                format!(
                    "Accepted connections refused at the hard limit (the line full, or a peer \
                     that cannot wait){shared}"
                ),
                slots.accepts_refused,
            ),
            (
                "slots_line_waits",
                format!("Accepted peers told to wait in line{shared}"),
                slots.line_waits,
            ),
            (
                "slots_line_grants",
                format!("Slots granted from the line{shared}"),
                slots.grants,
            ),
            (
                "slots_line_expired",
                format!("Line entries that waited their whole hold time{shared}"),
                slots.line_expired,
            ),
            (
                "slots_line_left",
                format!(
                    "Line entries that left before their turn (the peer closed, or a newer \
                     connection of the site replaced it){shared}"
                ),
                slots.line_left,
            ),
        ];
        for (name, doc, v) in &counters {
            counter(&mut enc, name, doc, *v)?;
        }
        {
            let mut m = enc.encode_descriptor(
                "slots_preemptions",
                &help(&format!(
                    "Channels preempted by the slot policy, by reason{shared}"
                )),
                None,
                MetricType::Counter,
            )?;
            for (reason, n) in &slots.preemptions {
                m.encode_family(&[("reason", *reason)])?
                    .encode_counter::<NoLabelSet, u64, f64>(n, None)?;
            }
        }
        let policy = Info::new([("policy", slots.policy), ("admission", slots.admission)]);
        policy.encode(enc.encode_descriptor(
            "slots_policy",
            "The slot controller's preemption policy, and its admission policy (who gives a \
             slot up while peers wait in line: fifo or share).",
            None,
            Info::<[(&str, &str); 2]>::TYPE,
        )?)?;

        let gauges: [(&str, &str, u64); 7] = [
            (
                "transport_bytes_bound",
                "What sitenet_channel_buffer_bytes can never exceed: the slot controller's hard \
                 limit times two buffers times the buffer size.",
                s.transport_bytes_bound,
            ),
            (
                "sites_live",
                "Remote sites in the site table.",
                s.sites_live as u64,
            ),
            (
                "sites_idle",
                "Remote sites in the site table with no channel.",
                s.sites_idle as u64,
            ),
            (
                "sites_parked",
                "Remote sites whose ComObject is parked: no actor, what it must remember kept \
                 in the site's entry.",
                s.sites_parked as u64,
            ),
            (
                "output_bytes",
                "Bytes of output held for all sites together (queued, being sent, unacknowledged).",
                s.output_bytes,
            ),
            (
                "output_bytes_bound",
                "What sitenet_output_bytes never exceeds (NodeConfig::node_output_bound).",
                s.output_bytes_bound,
            ),
            (
                "handshakes_pending_bound",
                "What sitenet_handshakes_pending never exceeds \
                 (NodeConfig::max_pending_handshakes).",
                s.handshakes_pending_bound as u64,
            ),
        ];
        for (name, doc, v) in gauges {
            gauge(&mut enc, name, doc, v)?;
        }

        self.encode_sites(&mut enc)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    /// Every family's name and type, checked against the exposition's
    /// grammar as far as a scraper needs it: each sample belongs to a
    /// family declared with `# TYPE` (and `# HELP`) before it, its name
    /// is the family's plus the suffix its type allows, its labels are
    /// well formed, its value is a number, and `# EOF` ends the text.
    /// prometheus-client has no parser; this is the part we rely on.
    fn check(text: &str) -> BTreeMap<String, String> {
        assert!(text.ends_with("# EOF\n"), "no # EOF at the end");
        let mut types: BTreeMap<String, String> = BTreeMap::new();
        let mut helped = BTreeSet::new();
        let mut series = BTreeSet::new();
        let body = &text[..text.len() - "# EOF\n".len()];
        for line in body.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, _) = rest.split_once(' ').expect("HELP NAME TEXT");
                assert!(helped.insert(name.to_string()), "two HELP for {name}");
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, ty) = rest.split_once(' ').expect("TYPE NAME TYPE");
                assert!(helped.contains(name), "TYPE before HELP for {name}");
                assert!(
                    ["counter", "gauge", "info"].contains(&ty),
                    "{name}: type {ty}"
                );
                assert!(
                    types.insert(name.to_string(), ty.to_string()).is_none(),
                    "family {name} declared twice"
                );
                continue;
            }
            assert!(!line.starts_with('#'), "unexpected comment {line:?}");
            let (name_labels, value) = line.rsplit_once(' ').expect("NAME VALUE");
            assert!(
                value.parse::<f64>().is_ok_and(f64::is_finite),
                "{line}: value {value:?} is not a number"
            );
            let (name, labels) = match name_labels.split_once('{') {
                Some((n, l)) => (n, Some(l)),
                None => (name_labels, None),
            };
            assert!(
                name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{line}: name {name:?}"
            );
            if let Some(l) = labels {
                let l = l.strip_suffix('}').expect("labels end with }");
                for pair in l.split("\",") {
                    let (k, v) = pair.split_once("=\"").expect("key=\"value\"");
                    assert!(
                        k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                        "{line}: label {k:?}"
                    );
                    assert!(!v.contains('\n'), "{line}");
                }
            }
            let family = [("_total", "counter"), ("_info", "info"), ("", "gauge")]
                .iter()
                .find_map(|(suffix, ty)| {
                    let f = name.strip_suffix(suffix)?;
                    (types.get(f).map(String::as_str) == Some(*ty)).then_some(f)
                })
                .unwrap_or_else(|| panic!("{line}: no # TYPE for its family"));
            assert!(family.starts_with("sitenet_"), "{line}");
            assert!(series.insert(name_labels.to_string()), "{line} twice");
        }
        types
    }

    fn site(id: &str, depth: u64) -> SiteStats {
        SiteStats {
            site: Some(id.into()),
            address: Some(format!("tcp:127.0.0.1:{}", 7000 + depth)),
            queue_depth: depth,
            messages_sent: [1, 2, 3, 4],
            connected: true,
            ..Default::default()
        }
    }

    fn stats(per_site: Vec<SiteStats>) -> NodeStats {
        NodeStats {
            slots: sitenet_transport::SlotSnapshot {
                policy: "least_recently_active",
                weak: 8,
                hard: 10,
                in_use: 3,
                waiting: 0,
                peak_in_use: 5,
                peak_waiting: 1,
                granted: 12,
                queued: 1,
                accepts_refused: 0,
                preemptions: vec![("naive_idle", 2), ("least_recently_active", 1)],
                admission: "share",
                in_line: 4,
                line_limit: 120,
                peak_line: 9,
                line_waits: 30,
                grants: 26,
                line_expired: 0,
                line_left: 0,
            },
            transport_bytes: 0,
            transport_bytes_peak: 0,
            transport_bytes_bound: 1 << 20,
            sites_live: 7,
            sites_idle: 4,
            sites_parked: 3,
            sites_reclaimed: 0,
            per_site,
            output_bytes: 100,
            output_bytes_bound: 1 << 30,
            handshakes_pending: 0,
            handshakes_pending_peak: 0,
            handshakes_pending_bound: 256,
            auth_refused: 0,
        }
    }

    #[test]
    fn the_exposition_parses_and_exports_every_counter() {
        let metrics = Metrics {
            messages_delivered: 42,
            handshakes_pending: 3,
            ..Default::default()
        };
        let text = encode(
            metrics,
            stats(vec![site("aa", 5), site("bb", 2), site("aa", 5)]),
        );
        let types = check(&text);
        for (name, doc, kind, _) in metrics.fields() {
            let family = format!("sitenet_{name}");
            let want = match kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
            };
            assert_eq!(
                types.get(&family).map(String::as_str),
                Some(want),
                "{family}"
            );
            assert!(
                text.contains(&format!("# HELP {family} {}\n", help(doc))),
                "{family}: HELP is its doc comment"
            );
        }
        assert!(
            text.contains("\nsitenet_messages_delivered_total 42\n"),
            "{text}"
        );
        assert!(text.contains("\nsitenet_handshakes_pending 3\n"));
        assert!(text.contains("\nsitenet_slots_hard_limit 10\n"));
        assert!(text.contains(
            "\nsitenet_slots_policy_info{policy=\"least_recently_active\",admission=\"share\"} 1\n"
        ));
        assert!(text.contains("\nsitenet_slots_line 4\n"), "{text}");
        assert!(text.contains("\nsitenet_slots_line_grants_total 26\n"));
        assert!(text.contains("\nsitenet_slots_preemptions_total{reason=\"naive_idle\"} 2\n"));
        assert!(text.contains(
            "\nsitenet_site_messages_sent_total{site=\"bb\",address=\"tcp:127.0.0.1:7002\",level=\"4\"} 4\n"
        ));
        // The duplicate label set is exported once.
        assert!(text.contains("\nsitenet_sites_exported 2\n"), "{text}");
        assert_eq!(text.matches("sitenet_site_queue_depth{").count(), 2);
    }

    #[test]
    fn help_is_one_escaped_line() {
        assert_eq!(
            help(" Bytes held\n by \"all\" sites\\\n"),
            "Bytes held by \\\"all\\\" sites\\\\"
        );
    }
}
