//! The pictures of `sitenet stress`: one run over time (`--plot`), and a
//! sweep over the number of clients (`--sweep`, like Figure 5 of the Mozart
//! paper). SVG, drawn with plotters.
//!
//! Round trips are drawn on a log scale: a loaded server's probes span
//! three or four decades (a fraction of a millisecond in the steady state,
//! seconds for one that waited for a slot or in the drain), and on a
//! linear axis the slow ones flatten everything else to the floor.

use std::path::Path;

use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use sitenet::stress::{Sample, Spread, StressReport};

type Result<T> = std::result::Result<T, String>;

/// A chart with a linear y axis, and one with a logarithmic y axis.
type Linear<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;
type Log<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, LogCoord<f64>>>;
type Area<'b> = DrawingArea<SVGBackend<'b>, plotters::coord::Shift>;
/// A line of a round-trip panel: its name in the legend, its colour, and
/// its value (ms) in a sample or a run.
type Series<T> = (&'static str, RGBColor, fn(&T) -> f64);

fn err(e: impl std::fmt::Display) -> String {
    format!("cannot draw the plot: {e}")
}

/// The light grey of the drain's rectangle.
const DRAIN: RGBColor = RGBColor(225, 225, 225);

/// Milliseconds from microseconds.
fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// A chart on `area`: its caption, the x axis from 0 to `x.0` named `x.1`,
/// the y axis from 0 to `y.0` named `y.1`, its mesh drawn. Every linear
/// panel of both pictures is one.
fn chart<'a, 'b>(
    area: &'a Area<'b>,
    caption: impl AsRef<str>,
    x: (f64, &str),
    y: (f64, &str),
) -> Result<Linear<'a, 'b>> {
    let mut c = ChartBuilder::on(area)
        .caption(caption.as_ref(), ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..x.0, 0.0..y.0)
        .map_err(err)?;
    c.configure_mesh()
        .x_desc(x.1)
        .y_desc(y.1)
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .draw()
        .map_err(err)?;
    Ok(c)
}

/// The y range of a log axis holding `values` (milliseconds): a margin
/// either side, zeros (no probe) and non-finite values left out — a log
/// axis has no room for them — and a decade around 1 ms if nothing is
/// left.
fn log_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0.0_f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if hi <= 0.0 {
        return (0.1, 10.0);
    }
    // At least a decade, so that the axis has labels, and room at the
    // top for the drain's name.
    let (lo, hi) = (lo / 1.5, hi * 3.0);
    if hi / lo < 10.0 {
        let mid = (lo * hi).sqrt();
        (mid / 10f64.sqrt(), mid * 10f64.sqrt())
    } else {
        (lo, hi)
    }
}

/// A tick's label: the number with no trailing zeros (0.05, 0.5, 2, 9000,
/// not 2.0 or 9000.0).
fn tick(v: &f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A chart like [`chart`]'s, with the y axis logarithmic from `y.0` to
/// `y.1` (both above 0: see [`log_range`]) named `y.2`.
fn log_chart<'a, 'b>(
    area: &'a Area<'b>,
    caption: impl AsRef<str>,
    x: (f64, &str),
    y: (f64, f64, &str),
) -> Result<Log<'a, 'b>> {
    let mut c = ChartBuilder::on(area)
        .caption(caption.as_ref(), ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..x.0, (y.0..y.1).log_scale())
        .map_err(err)?;
    c.configure_mesh()
        .x_desc(x.1)
        .y_desc(y.2)
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .draw()
        .map_err(err)?;
    Ok(c)
}

/// The width of a picture, and of the column right of each panel that
/// holds its key: the key never covers the data.
const WIDTH: u32 = 1000;
const KEY_WIDTH: u32 = 250;

/// A panel's plotting area (left) and its key's column (right).
fn beside_key<'b>(panel: &Area<'b>) -> (Area<'b>, Area<'b>) {
    panel.split_horizontally(WIDTH - KEY_WIDTH)
}

/// How an entry of a key shows the thing it names.
#[derive(Clone, Copy)]
enum Mark {
    /// A line of this colour.
    Line(RGBColor),
    /// A dashed line of this colour.
    Dashed(RGBColor),
    /// A filled box of this colour.
    Fill(RGBColor),
    /// Words only.
    Text,
}

/// Draws a key in its column: each entry its mark and its words (lines
/// split at `\n`), from the top of the plotting area down.
fn key(area: &Area<'_>, entries: &[(Mark, String)]) -> Result<()> {
    let font = ("sans-serif", 12).into_font();
    let (x0, x1, text_x) = (6, 30, 38);
    let mut y = 40;
    for (mark, words) in entries {
        let mid = y + 6;
        match *mark {
            Mark::Line(c) => area
                .draw(&PathElement::new([(x0, mid), (x1, mid)], c.stroke_width(2)))
                .map_err(err)?,
            Mark::Dashed(c) => area
                .draw(&DashedPathElement::new(
                    [(x0, mid), (x1, mid)],
                    5,
                    3,
                    c.stroke_width(2),
                ))
                .map_err(err)?,
            Mark::Fill(c) => area
                .draw(&Rectangle::new([(x0, mid - 5), (x1, mid + 5)], c.filled()))
                .map_err(err)?,
            Mark::Text => {}
        }
        let x = if matches!(mark, Mark::Text) {
            x0
        } else {
            text_x
        };
        for line in words.split('\n') {
            area.draw(&Text::new(line.to_string(), (x, y), font.clone()))
                .map_err(err)?;
            y += 15;
        }
        y += 6;
    }
    Ok(())
}

/// Marks the drain on a time chart whose y axis runs from `y.0` to `y.1`:
/// shaded from `from` (sending stopped) to `to` (the run's end), with a
/// dashed line where it begins, so that a drain of a fraction of the run
/// is seen, and named at the top of that line when `label`.
fn mark_drain<'a, 'b, Y>(
    c: &mut ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, Y>>,
    (from, to): (f64, f64),
    (lo, hi): (f64, f64),
    label: bool,
) -> Result<()>
where
    Y: Ranged<ValueType = f64>,
{
    c.draw_series(std::iter::once(Rectangle::new(
        [(from, lo), (to, hi)],
        DRAIN.filled(),
    )))
    .map_err(err)?;
    c.draw_series(DashedLineSeries::new(
        [(from, lo), (from, hi)],
        4,
        3,
        RGBColor(90, 90, 90).stroke_width(1),
    ))
    .map_err(err)?;
    if label {
        let style = ("sans-serif", 12)
            .into_font()
            .color(&RGBColor(60, 60, 60))
            .pos(Pos::new(HPos::Right, VPos::Top));
        c.draw_series(std::iter::once(
            EmptyElement::at((from, hi)) + Text::new("drain \u{2192}", (-4, 4), style),
        ))
        .map_err(err)?;
    }
    Ok(())
}

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
    fn a_log_axis_leaves_out_zeros_and_spans_at_least_a_decade() {
        // Nothing but intervals without probes: a decade around 1 ms.
        assert_eq!(log_range([0.0, 0.0].into_iter()), (0.1, 10.0));
        assert_eq!(log_range(std::iter::empty()), (0.1, 10.0));
        for values in [vec![0.0, 2.0], vec![2.0, 2.0, f64::NAN], vec![0.5, 3000.0]] {
            let (lo, hi) = log_range(values.iter().copied());
            assert!(lo > 0.0 && hi / lo >= 10.0 - 1e-9, "{values:?}: {lo}..{hi}");
            for v in values.iter().filter(|v| **v > 0.0) {
                assert!(lo < *v && *v < hi, "{values:?}: {lo}..{hi}");
            }
        }
    }

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

    #[test]
    fn ticks_have_no_trailing_zeros() {
        assert_eq!(tick(&9000.0), "9000");
        assert_eq!(tick(&0.5), "0.5");
        assert_eq!(tick(&0.05), "0.05");
        assert_eq!(tick(&2.25), "2.25");
        assert_eq!(tick(&0.0), "0");
    }
}
