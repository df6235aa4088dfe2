//! The pictures of `sitenet stress`: one run over time (`--plot`), and a
//! sweep over the number of clients (`--sweep`, like Figure 5 of the Mozart
//! paper). SVG, drawn with plotters.
//!
//! Round trips are drawn on a log scale: a loaded server's probes span
//! three or four decades (a fraction of a millisecond in the steady state,
//! seconds for one that waited for a slot or in the drain), and on a
//! linear axis the slow ones flatten everything else to the floor.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use sitenet::stress::{Sample, Spread, StressReport};

mod kit;

use kit::*;

/// The caption of the round-trip panel of a run's picture.
const RUN_RTT: &str = "round trip of the probes per 100 ms (log scale)";
/// The start of the caption of its per-client panel.
const RUN_CLIENTS: &str = "per-client completion";
/// The caption of the sweep's round-trip panel.
const SWEEP_RTT: &str = "round trip against clients (log scale) \u{2014} cf. Mozart Figure 5";

/// A thing's spread in words: "mean 1.20, p50 1.00, p99 4.10 ms".
fn spread(s: &Spread) -> String {
    format!(
        "mean {}, p50 {}, p99 {} ms",
        tick(&round2(s.mean_us / 1000.0)),
        tick(&round2(ms(s.p50_us))),
        tick(&round2(ms(s.p99_us)))
    )
}

/// `v` to two decimals (three significant figures past 10).
fn round2(v: f64) -> f64 {
    if v >= 10.0 {
        v.round()
    } else {
        (v * 100.0).round() / 100.0
    }
}

/// The dark green of the steady probes, the orange of the first contact,
/// the light blue under the slots in use.
const STEADY: RGBColor = RGBColor(0, 130, 0);
const FIRST: RGBColor = RGBColor(230, 120, 0);
const SLOTS_FILL: RGBColor = RGBColor(190, 210, 240);

/// A run over time: round trip (p50 and p99 per interval, log scale, the
/// drain marked), messages delivered per client (the fairness), slots in
/// use against the hard limit, preemptions so far; each panel's key on
/// its right.
pub(crate) fn run(r: &StressReport, path: &Path) -> Result<()> {
    let root = SVGBackend::new(path, (WIDTH, 1300)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let body = root
        .titled(
            &format!(
                "sitenet stress: {} clients, {} slots, policy {}, admission {}, over {}",
                r.clients, r.slot_limit, r.policy, r.admission, r.transport
            ),
            ("sans-serif", 18),
        )
        .map_err(err)?;
    let panels = body.split_evenly((4, 1));
    let t_max = r.timeline.last().map_or(1.0, |s| s.t_s).max(0.1);
    let drain = (r.duration_s.min(t_max), t_max);
    round_trips(r, &panels[0], t_max)?;
    per_client(r, &panels[1])?;
    slots(r, &panels[2], t_max, drain)?;

    let (area, side) = beside_key(&panels[3]);
    let p_max = r.timeline.last().map_or(0, |s| s.preemptions).max(1) as f64 * 1.1;
    let mut c = chart(
        &area,
        "preemptions so far",
        (t_max, "seconds"),
        (p_max, "preemptions"),
    )?;
    mark_drain(&mut c, drain, (0.0, p_max), false)?;
    c.draw_series(LineSeries::new(
        r.timeline.iter().map(|s| (s.t_s, s.preemptions as f64)),
        MAGENTA.stroke_width(2),
    ))
    .map_err(err)?;
    let reasons: Vec<String> = r
        .preemptions_by_reason
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let mut entries = vec![(
        Mark::Line(MAGENTA),
        format!("preemptions so far ({})", r.preemptions),
    )];
    for chunk in reasons.chunks(2) {
        entries.push((Mark::Text, chunk.join(", ")));
    }
    entries.push((Mark::Fill(DRAIN), "drain".into()));
    key(&side, &entries)?;
    root.present().map_err(err)
}

/// The round-trip panel: p50 and p99 of each interval's probes on a log
/// scale (intervals without a probe are left out), the p99 of its steady
/// probes beside them, the drain marked; the run's figures in the key.
fn round_trips(r: &StressReport, area: &Area<'_>, t_max: f64) -> Result<()> {
    let (area, side) = beside_key(area);
    let probed = || r.timeline.iter().filter(|s| s.rtt_p50_us > 0);
    let steady = || r.timeline.iter().filter(|s| s.steady_rtt_p99_us > 0);
    let (lo, hi) = log_range(
        probed()
            .flat_map(|s| [ms(s.rtt_p50_us), ms(s.rtt_p99_us)])
            .chain(steady().map(|s| ms(s.steady_rtt_p99_us))),
    );
    let mut c = log_chart(&area, RUN_RTT, (t_max, "seconds"), (lo, hi, "ms"))?;
    mark_drain(&mut c, (r.duration_s.min(t_max), t_max), (lo, hi), true)?;
    c.draw_series(LineSeries::new(
        steady().map(|s| (s.t_s, ms(s.steady_rtt_p99_us))),
        STEADY.stroke_width(2),
    ))
    .map_err(err)?;
    let series: [Series<Sample>; 2] = [
        ("p50", BLUE, |s| ms(s.rtt_p50_us)),
        ("p99", RED, |s| ms(s.rtt_p99_us)),
    ];
    for (_, color, f) in series {
        c.draw_series(LineSeries::new(probed().map(|s| (s.t_s, f(s))), &color))
            .map_err(err)?;
    }
    let drain = (r.elapsed_s - r.duration_s).max(0.0);
    key(
        &side,
        &[
            (Mark::Line(BLUE), "p50, every probe".into()),
            (Mark::Line(RED), "p99, every probe".into()),
            (
                Mark::Line(STEADY),
                "p99, steady probes only\n(their channel open throughout;\nabove it: waits for a slot)".into(),
            ),
            (
                Mark::Fill(DRAIN),
                format!(
                    "drain: sending stopped at {} s,\nthe last acknowledged {} s later",
                    tick(&round2(r.duration_s)),
                    tick(&round2(drain))
                ),
            ),
            (Mark::Text, "over the run:".into()),
            (
                Mark::Text,
                format!(
                    "steady, {} probes:\n  {}",
                    r.steady_rtt.count,
                    spread(&r.steady_rtt)
                ),
            ),
            (
                Mark::Text,
                format!(
                    "first contact (start to first\nreply, in line), {} clients:\n  {}",
                    r.first_contact.count,
                    spread(&r.first_contact)
                ),
            ),
            (
                Mark::Text,
                format!(
                    "after a reconnect, {} probes:\n  {}",
                    r.reconnect_rtt.count,
                    spread(&r.reconnect_rtt)
                ),
            ),
        ],
    )
}

/// The slots panel: the slots in use, filled, under the hard limit drawn
/// dashed on top (a full server's slots run along it), the drain marked.
fn slots(r: &StressReport, area: &Area<'_>, t_max: f64, drain: (f64, f64)) -> Result<()> {
    let (area, side) = beside_key(area);
    let limit = r.slot_limit as f64;
    let y_max = (limit * 1.25).max(1.0);
    let mut c = chart(
        &area,
        "slots in use at the server",
        (t_max, "seconds"),
        (y_max, "slots"),
    )?;
    mark_drain(&mut c, drain, (0.0, y_max), false)?;
    let used = || r.timeline.iter().map(|s| (s.t_s, s.slots_in_use as f64));
    let outline: Vec<(f64, f64)> =
        std::iter::once((r.timeline.first().map_or(0.0, |s| s.t_s), 0.0))
            .chain(used())
            .chain(std::iter::once((
                r.timeline.last().map_or(0.0, |s| s.t_s),
                0.0,
            )))
            .collect();
    c.draw_series(std::iter::once(Polygon::new(outline, SLOTS_FILL.filled())))
        .map_err(err)?;
    c.draw_series(LineSeries::new(used(), BLUE.stroke_width(1)))
        .map_err(err)?;
    c.draw_series(DashedLineSeries::new(
        [(0.0, limit), (t_max, limit)],
        8,
        4,
        RED.stroke_width(3),
    ))
    .map_err(err)?;
    let style = ("sans-serif", 12)
        .into_font()
        .color(&RED)
        .pos(Pos::new(HPos::Left, VPos::Bottom));
    c.draw_series(std::iter::once(
        EmptyElement::at((0.0, limit))
            + Text::new(format!("hard limit {}", r.slot_limit), (6, -4), style),
    ))
    .map_err(err)?;
    key(
        &side,
        &[
            (Mark::Fill(SLOTS_FILL), "slots in use (every 100 ms)".into()),
            (
                Mark::Dashed(RED),
                format!(
                    "hard limit ({}): the server\nnever holds more (peak {})",
                    r.slot_limit, r.peak_slots
                ),
            ),
            (Mark::Fill(DRAIN), "drain".into()),
        ],
    )
}
/// The per-client panel: the messages each client got through, clients
/// sorted from the least served to the most (the report's percentiles),
/// against the mean — a flat line is a fair run — its largest step
/// marked, and in the key what the clients got by the threads they and
/// the server's sites for them ran on, which is what the steps of a run
/// on more than one thread follow.
fn per_client(r: &StressReport, area: &Area<'_>) -> Result<()> {
    let (area, side) = beside_key(area);
    let q = &r.per_client_delivered_quantiles;
    let mean = r.delivered as f64 / r.clients.max(1) as f64;
    let y_max = q.iter().copied().max().unwrap_or(0) as f64;
    let y_max = y_max.max(mean).max(1.0) * 1.15;
    let mut c = chart(
        &area,
        format!(
            "{RUN_CLIENTS}: messages delivered per client, sorted (Jain {:.3})",
            r.fairness_jain
        ),
        (100.0, "clients, least served first (percent)"),
        (y_max, "messages delivered"),
    )?;
    c.draw_series(DashedLineSeries::new(
        [(0.0, mean), (100.0, mean)],
        6,
        4,
        BLACK.stroke_width(1),
    ))
    .map_err(err)?;
    c.draw_series(LineSeries::new(
        q.iter().enumerate().map(|(i, &n)| (i as f64, n as f64)),
        BLUE.stroke_width(2),
    ))
    .map_err(err)?;
    let mut entries = vec![
        (
            Mark::Line(BLUE),
            "messages the server delivered\nper client, sorted".into(),
        ),
        (
            Mark::Dashed(BLACK),
            format!("their mean ({})", tick(&mean.round())),
        ),
    ];
    if let Some(at) = step(q) {
        let style = ("sans-serif", 12)
            .into_font()
            .color(&RGBColor(60, 60, 60))
            .pos(Pos::new(HPos::Right, VPos::Top));
        c.draw_series(DashedLineSeries::new(
            [(at, 0.0), (at, y_max)],
            3,
            3,
            RGBColor(90, 90, 90).stroke_width(1),
        ))
        .map_err(err)?;
        c.draw_series(std::iter::once(
            EmptyElement::at((at, y_max)) + Text::new("step \u{2192}", (-4, 4), style),
        ))
        .map_err(err)?;
        entries.push((
            Mark::Dashed(RGBColor(90, 90, 90)),
            format!("the largest step, at {}%", tick(&at.round())),
        ));
    }
    if r.delivered_by_threads.len() > 1 {
        entries.push((
            Mark::Text,
            "mean delivered by thread, client\n/ server's site for it (steps\nfollow these groups):".into(),
        ));
        let mut groups = r.delivered_by_threads.clone();
        groups.sort_by(|a, b| a.delivered_mean.total_cmp(&b.delivered_mean));
        for g in &groups {
            let home = if g.server_thread == r.server_home_thread {
                " (server's home)"
            } else {
                ""
            };
            entries.push((
                Mark::Text,
                format!(
                    "{} / {}{home}: {} clients,\nmean {}",
                    g.client_thread,
                    g.server_thread,
                    g.clients,
                    tick(&g.delivered_mean.round())
                ),
            ));
        }
    }
    entries.push((
        Mark::Text,
        format!("admission {}, {} threads", r.admission, r.threads),
    ));
    key(&side, &entries)
}

/// Where the largest step of a per-client curve (101 percentiles) is, in
/// percent of clients, if it is a step: at least a fifth of the median.
fn step(delivered: &[u64]) -> Option<f64> {
    let (i, jump) = delivered
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]))
        .enumerate()
        .max_by_key(|&(i, d)| (d, std::cmp::Reverse(i)))?;
    let median = delivered.get(delivered.len() / 2).copied().unwrap_or(0);
    (jump > 0 && jump * 5 >= median).then_some(i as f64 + 0.5)
}

/// Round trip (mean, median and 99th percentile of every probe, and the
/// steady probes' and the first contacts' means, log scale) and total
/// time against the number of clients: the Mozart paper's Figure 5 plots
/// the average round trip and the total time so.
pub(crate) fn sweep(rs: &[StressReport], path: &Path) -> Result<()> {
    let root = SVGBackend::new(path, (WIDTH, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let panels = root.split_evenly((2, 1));
    let x_max = rs.iter().map(|r| r.clients).max().unwrap_or(1) as f64 * 1.05;
    let series: [Series<StressReport>; 5] = [
        ("mean, every probe", BLACK, |r| r.rtt_mean_us / 1000.0),
        ("p50, every probe", BLUE, |r| ms(r.rtt_p50_us)),
        ("p99, every probe", RED, |r| ms(r.rtt_p99_us)),
        ("mean, steady probes", STEADY, |r| {
            r.steady_rtt.mean_us / 1000.0
        }),
        (
            "mean first contact (start to\nfirst reply, in line)",
            FIRST,
            |r| r.first_contact.mean_us / 1000.0,
        ),
    ];
    let (area, side) = beside_key(&panels[0]);
    let (lo, hi) = log_range(rs.iter().flat_map(|r| series.map(|(_, _, f)| f(r))));
    let mut c = log_chart(&area, SWEEP_RTT, (x_max, "clients"), (lo, hi, "ms"))?;
    for (_, color, f) in series {
        // A run without probes has no round trip to put on a log axis (a
        // zero is left out).
        let points = || {
            rs.iter()
                .filter(|r| r.round_trips > 0 && f(r) > 0.0)
                .map(|r| (r.clients as f64, f(r)))
        };
        c.draw_series(LineSeries::new(points(), color.stroke_width(2)))
            .map_err(err)?;
        c.draw_series(points().map(|p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
    }
    key(
        &side,
        &series.map(|(name, color, _)| (Mark::Line(color), name.to_string())),
    )?;
    let (area, side) = beside_key(&panels[1]);
    let t_max = rs.iter().map(|r| r.elapsed_s).fold(0.1, f64::max) * 1.1;
    let mut c = chart(
        &area,
        "total time against clients (same work per client)",
        (x_max, "clients"),
        (t_max, "seconds"),
    )?;
    c.draw_series(LineSeries::new(
        rs.iter().map(|r| (r.clients as f64, r.elapsed_s)),
        BLACK.stroke_width(2),
    ))
    .map_err(err)?;
    c.draw_series(
        rs.iter()
            .map(|r| Circle::new((r.clients as f64, r.elapsed_s), 3, BLACK.filled())),
    )
    .map_err(err)?;
    key(
        &side,
        &[(Mark::Line(BLACK), "total time, draining included".into())],
    )?;
    root.present().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_step_of_a_curve_is_found_where_it_rises() {
        // Half the clients got 100, half 300: the step between 50 and 51.
        let q: Vec<u64> = (0..=100).map(|i| if i <= 50 { 100 } else { 300 }).collect();
        assert_eq!(step(&q), Some(50.5));
        // A smooth rise, or a flat line: no step.
        let smooth: Vec<u64> = (0..=100).map(|i| 1000 + i).collect();
        assert_eq!(step(&smooth), None);
        assert_eq!(step(&[7; 101]), None);
        assert_eq!(step(&[]), None);
    }
}
