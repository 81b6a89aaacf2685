//! SVG plots with plotters (SVG backend only; text is left to the viewer's
//! fonts, so nothing here needs a font library).

use anyhow::{Result, anyhow};
use plotters::prelude::*;

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Empirical CDFs of `series` (name, samples in ms) on a log x axis, with
/// optional vertical markers (label, x).
pub fn cdf(
    title: &str,
    x_label: &str,
    series: &[(String, Vec<f64>)],
    markers: Option<&[(String, f64)]>,
) -> Result<String> {
    let all = series.iter().flat_map(|(_, v)| v.iter().copied());
    let marks = markers.unwrap_or(&[]).iter().map(|(_, x)| *x);
    let (lo, hi) = all
        .chain(marks)
        .filter(|x| x.is_finite() && *x > 0.0)
        .fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
    if lo > hi {
        return Err(anyhow!("no samples to plot for {title}"));
    }
    let (lo, hi) = (lo * 0.8, hi * 1.25);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (800, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(56)
            .build_cartesian_2d((lo..hi).log_scale(), 0.0..1.0)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc("fraction of samples ≤ x")
            .draw()
            .map_err(plot_error)?;
        for (i, (name, samples)) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let mut sorted: Vec<f64> = samples.iter().copied().filter(|x| *x > 0.0).collect();
            sorted.sort_by(f64::total_cmp);
            let n = sorted.len() as f64;
            let points: Vec<(f64, f64)> = sorted
                .iter()
                .enumerate()
                .map(|(k, x)| (*x, (k + 1) as f64 / n))
                .collect();
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(plot_error)?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
        }
        for (i, (label, x)) in markers.unwrap_or(&[]).iter().enumerate() {
            let color = COLORS[(series.len() + i) % COLORS.len()];
            chart
                .draw_series(LineSeries::new(
                    vec![(*x, 0.0), (*x, 1.0)],
                    color.stroke_width(1),
                ))
                .map_err(plot_error)?
                .label(label.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(1))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(plot_error)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

/// Lines of (x, y) points per series on linear axes.
pub fn lines(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<String> {
    let points = series.iter().flat_map(|(_, v)| v.iter().copied());
    let (x_hi, y_hi) = points.fold((0.0f64, 0.0f64), |(a, b), (x, y)| (a.max(x), b.max(y)));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (800, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..x_hi * 1.05 + 1.0, 0.0..y_hi * 1.1 + 1e-9)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .draw()
            .map_err(plot_error)?;
        for (i, (name, data)) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            chart
                .draw_series(LineSeries::new(data.clone(), color.stroke_width(2)))
                .map_err(plot_error)?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart
                .draw_series(data.iter().map(|p| Circle::new(*p, 3, color.filled())))
                .map_err(plot_error)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(plot_error)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

fn plot_error<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("plotting: {e}")
}
