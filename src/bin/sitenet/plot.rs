//! The pictures of `sitenet stress`: one run over time (`--plot`), and a
//! sweep over the number of clients (`--sweep`, like Figure 5 of the Mozart
//! paper). SVG, drawn with plotters.

use std::path::Path;

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use sitenet::stress::StressReport;

type Result<T> = std::result::Result<T, String>;

fn err(e: impl std::fmt::Display) -> String {
    format!("cannot draw the plot: {e}")
}

/// A chart on `area`: its caption, the x axis from 0 to `x.0` named `x.1`,
/// the y axis from 0 to `y.0` named `y.1`, its mesh drawn. Every panel of
/// both pictures is one.
fn chart<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    caption: impl AsRef<str>,
    x: (f64, &str),
    y: (f64, &str),
) -> Result<ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>> {
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
        .draw()
        .map_err(err)?;
    Ok(c)
}

/// Round trip over time, slots in use against the limit, preemptions so far.
pub(crate) fn run(r: &StressReport, path: &Path) -> Result<()> {
    let root = SVGBackend::new(path, (900, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let panels = root.split_evenly((3, 1));
    let t_max = r.timeline.last().map_or(1.0, |s| s.t_s).max(0.1);

    let rtt_max = r
        .timeline
        .iter()
        .map(|s| s.rtt_p50_us as f64 / 1000.0)
        .fold(0.1, f64::max);
    let mut c = chart(
        &panels[0],
        format!(
            "sitenet stress: {} clients, {} slots, policy {} — round trip (median per 100 ms)",
            r.clients, r.slot_limit, r.policy
        ),
        (t_max, "seconds"),
        (rtt_max * 1.1, "ms"),
    )?;
    c.draw_series(LineSeries::new(
        r.timeline
            .iter()
            .filter(|s| s.rtt_p50_us > 0)
            .map(|s| (s.t_s, s.rtt_p50_us as f64 / 1000.0)),
        &BLUE,
    ))
    .map_err(err)?;

    let mut c = chart(
        &panels[1],
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
        &panels[2],
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

/// Round trip (median and 99th percentile) and total time against the
/// number of clients.
pub(crate) fn sweep(rs: &[StressReport], path: &Path) -> Result<()> {
    let root = SVGBackend::new(path, (900, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let panels = root.split_evenly((2, 1));
    let x_max = rs.iter().map(|r| r.clients).max().unwrap_or(1) as f64 * 1.05;
    let ms = |us: u64| us as f64 / 1000.0;
    let y_max = rs.iter().map(|r| ms(r.rtt_p99_us)).fold(0.1, f64::max) * 1.1;
    let mut c = chart(
        &panels[0],
        "round trip against clients (blue: median, red: 99th percentile)",
        (x_max, "clients"),
        (y_max, "ms"),
    )?;
    for (f, color) in [
        (
            &(|r: &StressReport| ms(r.rtt_p50_us)) as &dyn Fn(&StressReport) -> f64,
            BLUE,
        ),
        (&|r: &StressReport| ms(r.rtt_p99_us), RED),
    ] {
        c.draw_series(LineSeries::new(
            rs.iter().map(|r| (r.clients as f64, f(r))),
            &color,
        ))
        .map_err(err)?;
        c.draw_series(
            rs.iter()
                .map(|r| Circle::new((r.clients as f64, f(r)), 3, color.filled())),
        )
        .map_err(err)?;
    }
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
