//! Watching a node and its sites: failing one on purpose, its fault
//! states, the node's counters, faults and statistics, and waiting until
//! they say something.

use super::*;

/// Faults, metrics and statistics.
impl Node {
    /// Fails a site permanently on purpose: its channel is closed, and every
    /// message not acknowledged is handed back (see [`SiteRef::failure`]).
    /// The local site (see [`local_site`](Self::local_site)) cannot fail:
    /// killing it does nothing.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use sitenet_runtime::{FaultState, Message, Node, SendOptions};
    /// #[derive(Serialize, Deserialize)]
    /// struct Job(u32);
    /// impl Message for Job { const ID: u32 = 7; }
    ///
    /// let node = Node::builder().start()?;
    /// // Nothing listens there: the messages wait, and are handed back on kill.
    /// let site = node.site("tcp:127.0.0.1:9")?;
    /// site.send(&Job(1)).try_now()?;
    /// site.send(&Job(2)).try_now()?;
    /// node.kill(&site);
    /// assert!(node.wait_until_blocking(|_| site.failure().is_some(), Duration::from_secs(30))?);
    /// assert_eq!(site.fault_state(), FaultState::PermFailed);
    /// let (reason, back) = site.failure().unwrap();
    /// println!("{reason}");
    /// assert_eq!(back.not_sent.len() + back.maybe_delivered.len(), 2); // nothing lost
    /// assert!(site.send(&Job(3)).try_now().is_err()); // and nothing more accepted
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn kill(&self, site: &SiteRef) {
        if site.is_local() {
            return;
        }
        crate::com_object::ComObject::send(&self.inner, site.entry.resolved(), Kill);
    }

    /// A stream of the site's fault-state changes: ok → temporarily failed
    /// → ok, or permanently failed. The first item is the current state.
    ///
    /// ```
    /// # use sitenet_runtime::{FaultState, Node};
    /// use futures::StreamExt;
    ///
    /// let node = Node::builder().start()?;
    /// let site = node.site("tcp:127.0.0.1:9")?;
    /// let mut events = node.monitor(&site);
    /// futures::executor::block_on(async {
    ///     assert_eq!(events.next().await.unwrap().state, FaultState::Ok); // now
    ///     node.kill(&site);
    ///     // (a site that cannot be reached would report TempFailed first)
    ///     while let Some(e) = events.next().await {
    ///         if e.state == FaultState::PermFailed {
    ///             println!("gone: {}", e.reason);
    ///             break;
    ///         }
    ///     }
    /// });
    /// # Ok::<(), sitenet_runtime::NodeError>(())
    /// ```
    pub fn monitor(
        &self,
        site: &SiteRef,
    ) -> futures::channel::mpsc::UnboundedReceiver<crate::site_entry::FaultEvent> {
        site.entry.resolved().monitor()
    }

    /// A stream of what the node learns about other sites and peers from
    /// now on: a site up, unreachable or down for good, a peer refused
    /// (see [`NodeEvent`](crate::NodeEvent)). Each call is a subscriber of its own, with its
    /// own bounded queue: one that reads too slowly reads
    /// [`NodeEvent::Lagged`](crate::NodeEvent::Lagged) with the count it missed, and never holds the
    /// node back. The stream ends when the node is gone.
    ///
    /// ```
    /// use futures::StreamExt;
    /// use sitenet_runtime::{Node, NodeEvent, SendOptions, services::{Echo, EchoReply}};
    ///
    /// let server = Node::builder()
    ///     .listen("tcp:127.0.0.1:0")
    ///     .configure(|c| c.builtin_services = true)
    ///     .start()?;
    /// let client = Node::builder().start()?;
    /// let mut events = client.events();
    /// let site = client.site(&server.listen_addresses()[0])?;
    /// site.request::<Echo, EchoReply>(&Echo { seq: 1 }).timeout(std::time::Duration::from_secs(30)).blocking()?;
    /// let ev = futures::executor::block_on(events.next()).unwrap();
    /// assert!(matches!(ev, NodeEvent::SiteUp { site, transport: "tcp", .. } if site == server.id()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn events(&self) -> crate::NodeEvents {
        self.inner.signals().events().subscribe()
    }

    /// A snapshot of the node's counters.
    pub fn metrics(&self) -> Metrics {
        self.inner.counters().snapshot()
    }

    /// Recent fault reports (at most 256), oldest first.
    pub fn faults(&self) -> Vec<FaultReport> {
        self.inner.faults.lock().iter().cloned().collect()
    }

    /// What the node holds against its bounds: channel slots, transport
    /// memory, sites. Cheap enough to poll (it walks the site table once).
    ///
    /// ```
    /// # use sitenet_runtime::{Node, SendOptions, services::{Echo, EchoReply}};
    /// let server = Node::builder()
    ///     .listen("tcp:127.0.0.1:0")
    ///     .configure(|c| c.builtin_services = true)
    ///     .start()?;
    /// let client = Node::builder().start()?;
    /// let site = client.site(&server.listen_addresses()[0])?;
    /// site.request::<Echo, EchoReply>(&Echo { seq: 1 }).timeout(std::time::Duration::from_secs(30)).blocking()?;
    /// let stats = client.stats();
    /// println!("{}", serde_json::to_string_pretty(&stats)?);
    /// assert_eq!(stats.per_site.len(), 1);
    /// assert_eq!(stats.per_site[0].site, Some(server.id().to_string()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> crate::NodeStats {
        self.stats_with(&self.metrics(), None)
    }

    /// [`stats`](Self::stats) from the counters `m`, with the per-site
    /// counters of every site, or (`top: Some(n)`) of the `n` sites with
    /// the deepest queues only, deepest first (ties: by the entry's
    /// place in the table, so a quiet node exports the same sites scrape
    /// after scrape).
    /// Sites that never published counters (never used) are not among
    /// those `n`. Choosing them costs a walk of the table, not a copy of
    /// every site's counters.
    fn stats_with(&self, m: &Metrics, top: Option<usize>) -> crate::NodeStats {
        let slots = self.inner.slots().stats();
        let entries = self.inner.all_entries();
        let idle = entries.iter().filter(|e| !e.liveness().connected()).count();
        let parked = entries
            .iter()
            .filter(|e| e.actor_state() == crate::site_entry::ActorState::Parked)
            .count();
        let site_stats = crate::com_object::ComObject::site_stats;
        let per_site = match top {
            None => entries
                .iter()
                .map(|e| site_stats(e).unwrap_or_default())
                .collect(),
            Some(n) => {
                let mut ranked: Vec<(std::cmp::Reverse<u64>, usize, usize)> = entries
                    .iter()
                    .enumerate()
                    .filter_map(|(i, e)| {
                        let depth = if e.actor_state() == crate::site_entry::ActorState::Parked {
                            0
                        } else {
                            e.stats().lock().as_deref()?.queue_depth
                        };
                        Some((std::cmp::Reverse(depth), e.key(), i))
                    })
                    .collect();
                if ranked.len() > n {
                    if n > 0 {
                        ranked.select_nth_unstable(n - 1);
                    }
                    ranked.truncate(n);
                }
                ranked.sort_unstable();
                ranked
                    .into_iter()
                    .filter_map(|(_, _, i)| site_stats(&entries[i]))
                    .collect()
            }
        };
        crate::NodeStats {
            transport_bytes_bound: slots.hard as u64
                * 2
                * self.inner.identity().cfg().buffer_size as u64,
            slots,
            transport_bytes: m.channel_buffer_bytes,
            transport_bytes_peak: m.channel_buffer_bytes_peak,
            sites_live: entries.len(),
            sites_idle: idle,
            sites_parked: parked,
            sites_reclaimed: m.sites_reclaimed,
            per_site,
            output_bytes: self.inner.output.node.bytes(),
            output_bytes_bound: self.inner.output.node.bound(),
            handshakes_pending: m.handshakes_pending,
            handshakes_pending_peak: m.handshakes_pending_peak,
            handshakes_pending_bound: self.inner.identity().cfg().max_pending_handshakes,
            auth_refused: m.auth_refused,
        }
    }

    /// The node's counters and gauges as OpenMetrics text, for Prometheus
    /// and the other scrapers operators already run: every counter of
    /// [`Metrics`] as `sitenet_<name>_total` (its doc comment as HELP),
    /// the gauges of [`stats`](Self::stats) (channel slots against their
    /// limits, transport and output bytes against their bounds, sites
    /// live and idle, pending handshakes against their bound), and
    /// per-site series `sitenet_site_*{site, address}` for the
    /// [`OPENMETRICS_TOP_SITES`](crate::OPENMETRICS_TOP_SITES) sites with
    /// the deepest queues only — a node with 100,000 sites still answers
    /// a scrape of a few hundred lines. Serve it with the content type
    /// [`OPENMETRICS_CONTENT_TYPE`](crate::OPENMETRICS_CONTENT_TYPE)
    /// (`sitenet node --metrics tcp:HOST:PORT` does).
    ///
    /// Built when called, from one snapshot, and nothing is kept: a node
    /// never scraped pays nothing, and a scrape costs about what
    /// [`stats`](Self::stats) does.
    ///
    /// ```
    /// # use sitenet_runtime::{Node, SendOptions, services::{Echo, EchoReply}};
    /// let server = Node::builder()
    ///     .listen("tcp:127.0.0.1:0")
    ///     .configure(|c| c.builtin_services = true)
    ///     .start()?;
    /// let client = Node::builder().start()?;
    /// let site = client.site(&server.listen_addresses()[0])?;
    /// site.request::<Echo, EchoReply>(&Echo { seq: 1 }).timeout(std::time::Duration::from_secs(30)).blocking()?;
    /// let text = client.openmetrics();
    /// assert!(text.lines().any(|l| l == "sitenet_channels_opened_total 1"));
    /// assert!(text.contains("# TYPE sitenet_slots_in_use gauge\n"));
    /// assert!(text.ends_with("# EOF\n"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn openmetrics(&self) -> String {
        self.openmetrics_top_sites(crate::OPENMETRICS_TOP_SITES)
    }

    /// [`openmetrics`](Self::openmetrics) with per-site series for the
    /// `sites` sites with the deepest queues (0: none). A large number
    /// makes a large scrape: each site gives about twenty lines.
    pub fn openmetrics_top_sites(&self, sites: usize) -> String {
        let m = self.metrics();
        let stats = self.stats_with(&m, Some(sites));
        crate::openmetrics::encode(m, stats)
    }

    /// Number of remote sites in the site table. An entry with no
    /// `SiteRef`, nothing queued or unacknowledged and no channel leaves it
    /// after the linger time (`Metrics::sites_reclaimed` counts them).
    pub fn site_count(&self) -> usize {
        self.inner.sites.lock().entries.len()
    }

    /// Waits until `pred` holds for the node's metrics, at most `timeout`;
    /// returns whether it held. Re-checked whenever a channel opens or closes,
    /// a fault state changes, a batch of messages is sent or delivered, or
    /// acknowledgements arrive, so tools and tests await conditions instead of
    /// polling.
    pub async fn wait_until(&self, pred: impl Fn(&Metrics) -> bool, timeout: Duration) -> bool {
        let timer = self.inner.rt().delay(timeout);
        futures::pin_mut!(timer);
        loop {
            let changed = self.inner.signals().when_changed();
            let acked = self.inner.signals().when_acked();
            futures::pin_mut!(changed);
            futures::pin_mut!(acked);
            changed.as_mut().enable();
            acked.as_mut().enable();
            if pred(&self.metrics()) {
                return true;
            }
            let either = futures::future::select(changed, acked);
            if let futures::future::Either::Right(_) =
                futures::future::select(either, timer.as_mut()).await
            {
                return pred(&self.metrics());
            }
        }
    }

    /// Blocking variant of [`wait_until`](Self::wait_until).
    ///
    /// `Ok(true)` once `pred` holds, `Ok(false)` if it still does not at
    /// the timeout. On the node's own runtime thread, where it would
    /// deadlock, it returns [`WouldDeadlock`](crate::WouldDeadlock) at
    /// once: await `wait_until` there.
    pub fn wait_until_blocking(
        &self,
        pred: impl Fn(&Metrics) -> bool,
        timeout: Duration,
    ) -> Result<bool, crate::error::WouldDeadlock> {
        if self.inner.rt().is_current_thread() {
            return Err(crate::error::WouldDeadlock);
        }
        Ok(futures::executor::block_on(self.wait_until(pred, timeout)))
    }
}
