//! The plotting kit the stress pictures are drawn with: linear and log
//! charts over an SVG area, a log axis that spans the data, ticks without
//! trailing zeros, a key beside each panel, and the drain's shading. What
//! the pictures show is `plot/mod.rs`'s.

use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

pub(super) type Result<T> = std::result::Result<T, String>;

/// A chart with a linear y axis, and one with a logarithmic y axis.
pub(super) type Linear<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;
pub(super) type Log<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, LogCoord<f64>>>;
pub(super) type Area<'b> = DrawingArea<SVGBackend<'b>, plotters::coord::Shift>;
/// A line of a round-trip panel: its name in the legend, its colour, and
/// its value (ms) in a sample or a run.
pub(super) type Series<T> = (&'static str, RGBColor, fn(&T) -> f64);

pub(super) fn err(e: impl std::fmt::Display) -> String {
    format!("cannot draw the plot: {e}")
}

/// The light grey of the drain's rectangle.
pub(super) const DRAIN: RGBColor = RGBColor(225, 225, 225);

/// Milliseconds from microseconds.
pub(super) fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// A chart on `area`: its caption, the x axis from 0 to `x.0` named `x.1`,
/// the y axis from 0 to `y.0` named `y.1`, its mesh drawn. Every linear
/// panel of both pictures is one.
pub(super) fn chart<'a, 'b>(
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
pub(super) fn log_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
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
pub(super) fn tick(v: &f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A chart like [`chart`]'s, with the y axis logarithmic from `y.0` to
/// `y.1` (both above 0: see [`log_range`]) named `y.2`.
pub(super) fn log_chart<'a, 'b>(
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
pub(super) const WIDTH: u32 = 1000;
pub(super) const KEY_WIDTH: u32 = 250;

/// A panel's plotting area (left) and its key's column (right).
pub(super) fn beside_key<'b>(panel: &Area<'b>) -> (Area<'b>, Area<'b>) {
    panel.split_horizontally(WIDTH - KEY_WIDTH)
}

/// How an entry of a key shows the thing it names.
#[derive(Clone, Copy)]
pub(super) enum Mark {
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
pub(super) fn key(area: &Area<'_>, entries: &[(Mark, String)]) -> Result<()> {
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
pub(super) fn mark_drain<'a, 'b, Y>(
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
