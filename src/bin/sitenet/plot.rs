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
use plotters::prelude::*;

use sitenet::stress::{Sample, StressReport};

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
    // top for the legend.
    let (lo, hi) = (lo / 1.5, hi * 8.0);
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

/// The legend of a chart, top left (the drain is on the right, and round
/// trips grow with clients), on a white box.
fn legend<'a, 'b: 'a, CT: CoordTranslate>(
    c: &mut ChartContext<'a, SVGBackend<'b>, CT>,
) -> Result<()> {
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)
}

/// The caption of the round-trip panel of a run's picture.
const RUN_RTT: &str = "round trip per 100 ms (log scale): p50 and p99";
/// The start of the caption of its per-client panel.
const RUN_CLIENTS: &str = "per-client completion";
/// The caption of the sweep's round-trip panel.
const SWEEP_RTT: &str =
    "round trip against clients (log scale): mean, p50 and p99 — cf. Mozart Figure 5";

/// A run over time: round trip (p50 and p99 per interval, log scale, the
/// drain shaded), messages delivered per client (the fairness), slots in
/// use against the limit, preemptions so far.
pub(crate) fn run(r: &StressReport, path: &Path) -> Result<()> {
    let root = SVGBackend::new(path, (900, 1200)).into_drawing_area();
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
    round_trips(r, &panels[0], t_max)?;
    per_client(r, &panels[1])?;

    let mut c = chart(
        &panels[2],
        "slots in use (red: the hard limit)",
        (t_max, "seconds"),
        ((r.slot_limit as f64 * 1.2).max(1.0), "slots"),
    )?;
    c.draw_series(LineSeries::new(
        r.timeline.iter().map(|s| (s.t_s, s.slots_in_use as f64)),
        &BLACK,
    ))
    .map_err(err)?;
    c.draw_series(LineSeries::new(
        [(0.0, r.slot_limit as f64), (t_max, r.slot_limit as f64)],
        &RED,
    ))
    .map_err(err)?;

    let p_max = r.timeline.last().map_or(0, |s| s.preemptions).max(1) as f64;
    let mut c = chart(
        &panels[3],
        "preemptions so far",
        (t_max, "seconds"),
        (p_max * 1.1, "preemptions"),
    )?;
    c.draw_series(LineSeries::new(
        r.timeline.iter().map(|s| (s.t_s, s.preemptions as f64)),
        &MAGENTA,
    ))
    .map_err(err)?;
    root.present().map_err(err)
}

/// The round-trip panel: p50 and p99 of each interval's probes on a log
/// scale (intervals without a probe are left out), the drain shaded.
fn round_trips(r: &StressReport, area: &Area<'_>, t_max: f64) -> Result<()> {
    let probed = || r.timeline.iter().filter(|s| s.rtt_p50_us > 0);
    let (lo, hi) = log_range(probed().flat_map(|s| [ms(s.rtt_p50_us), ms(s.rtt_p99_us)]));
    let mut c = log_chart(area, RUN_RTT, (t_max, "seconds"), (lo, hi, "ms"))?;
    // The drain: from the end of sending to the end of the run.
    let drain = r.duration_s.min(t_max);
    c.draw_series(std::iter::once(Rectangle::new(
        [(drain, lo), (t_max, hi)],
        DRAIN.filled(),
    )))
    .map_err(err)?
    .label("drain (sending stopped)")
    .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], DRAIN.filled()));
    let series: [Series<Sample>; 2] = [
        ("p50", BLUE, |s| ms(s.rtt_p50_us)),
        ("p99", RED, |s| ms(s.rtt_p99_us)),
    ];
    for (name, color, f) in series {
        c.draw_series(LineSeries::new(probed().map(|s| (s.t_s, f(s))), &color))
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 15, y)], color));
    }
    legend(&mut c)
}

/// The per-client panel: the messages each client got through, clients
/// sorted from the least served to the most (the report's percentiles),
/// against the mean — a flat line is a fair run.
fn per_client(r: &StressReport, area: &Area<'_>) -> Result<()> {
    let q = &r.per_client_delivered_quantiles;
    let mean = r.delivered as f64 / r.clients.max(1) as f64;
    let y_max = q.iter().copied().max().unwrap_or(0) as f64;
    let mut c = chart(
        area,
        format!(
            "{RUN_CLIENTS}: messages delivered per client, sorted (Jain {:.3}, admission {})",
            r.fairness_jain, r.admission
        ),
        (100.0, "percent of clients (least served first)"),
        (y_max.max(mean).max(1.0) * 1.1, "messages"),
    )?;
    c.draw_series(LineSeries::new(
        q.iter().enumerate().map(|(i, &n)| (i as f64, n as f64)),
        &BLUE,
    ))
    .map_err(err)?
    .label("delivered, sorted")
    .legend(|(x, y)| PathElement::new([(x, y), (x + 15, y)], BLUE));
    c.draw_series(LineSeries::new([(0.0, mean), (100.0, mean)], &BLACK))
        .map_err(err)?
        .label("mean")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 15, y)], BLACK));
    legend(&mut c)
}

/// Round trip (mean, median and 99th percentile, log scale) and total
/// time against the number of clients: the Mozart paper's Figure 5 plots
/// the average round trip and the total time so.
pub(crate) fn sweep(rs: &[StressReport], path: &Path) -> Result<()> {
    let root = SVGBackend::new(path, (900, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let panels = root.split_evenly((2, 1));
    let x_max = rs.iter().map(|r| r.clients).max().unwrap_or(1) as f64 * 1.05;
    let series: [Series<StressReport>; 3] = [
        ("mean", BLACK, |r| r.rtt_mean_us / 1000.0),
        ("p50", BLUE, |r| ms(r.rtt_p50_us)),
        ("p99", RED, |r| ms(r.rtt_p99_us)),
    ];
    let (lo, hi) = log_range(rs.iter().flat_map(|r| series.map(|(_, _, f)| f(r))));
    let mut c = log_chart(&panels[0], SWEEP_RTT, (x_max, "clients"), (lo, hi, "ms"))?;
    for (name, color, f) in series {
        // A run without probes has no round trip to put on a log axis.
        let points = || rs.iter().filter(|r| r.round_trips > 0);
        c.draw_series(LineSeries::new(
            points().map(|r| (r.clients as f64, f(r))),
            &color,
        ))
        .map_err(err)?
        .label(name)
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 15, y)], color));
        c.draw_series(points().map(|r| Circle::new((r.clients as f64, f(r)), 3, color.filled())))
            .map_err(err)?;
    }
    legend(&mut c)?;
    let t_max = rs.iter().map(|r| r.elapsed_s).fold(0.1, f64::max) * 1.1;
    let mut c = chart(
        &panels[1],
        "total time against clients (same work per client)",
        (x_max, "clients"),
        (t_max, "seconds"),
    )?;
    c.draw_series(LineSeries::new(
        rs.iter().map(|r| (r.clients as f64, r.elapsed_s)),
        &BLACK,
    ))
    .map_err(err)?;
    c.draw_series(
        rs.iter()
            .map(|r| Circle::new((r.clients as f64, r.elapsed_s), 3, BLACK.filled())),
    )
    .map_err(err)?;
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
    fn ticks_have_no_trailing_zeros() {
        assert_eq!(tick(&9000.0), "9000");
        assert_eq!(tick(&0.5), "0.5");
        assert_eq!(tick(&0.05), "0.05");
        assert_eq!(tick(&2.25), "2.25");
        assert_eq!(tick(&0.0), "0");
    }
}
