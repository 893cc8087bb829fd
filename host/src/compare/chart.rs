//! The report as one SVG: latency, throughput, energy per operation and
//! error against float64, one horizontal bar per device and problem, on log
//! axes (the devices differ by orders of magnitude). Bars are coloured by
//! provenance and every label ends in its marker, so a projected FPGA bar is
//! never mistaken for a measured one. SVG only: text is left to the viewer's
//! fonts, so nothing here needs system fonts or image libraries.
use super::report::{si, Provenance, Report};
use anyhow::{Context, Result};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

/// One bar: its label, value (`None`: not available) and provenance (`None`
/// for errors, which are computed from the outputs rather than timed or modelled).
struct Bar {
    label: String,
    value: Option<f64>,
    label_kind: Option<Provenance>,
}

struct Panel {
    title: &'static str,
    unit: &'static str,
    bars: Vec<Bar>,
}

fn colour(p: Option<Provenance>) -> RGBColor {
    match p {
        Some(Provenance::Measured) => RGBColor(120, 165, 230),
        Some(Provenance::Projected) => RGBColor(245, 170, 90),
        Some(Provenance::Estimated) => RGBColor(185, 185, 185),
        None => RGBColor(150, 205, 150),
    }
}

/// A value in a panel's unit: SI prefixes, or scientific notation for unitless errors.
fn format(v: f64, unit: &str) -> String {
    if unit.is_empty() {
        format!("{v:.3e}")
    } else {
        si(v, unit)
    }
}

fn panels(r: &Report) -> Vec<Panel> {
    let mut latency = Panel { title: "latency (lower is better)", unit: "s", bars: Vec::new() };
    let mut throughput =
        Panel { title: "throughput, 1 MAC = 2 ops (higher is better)", unit: "op/s", bars: Vec::new() };
    let mut energy = Panel { title: "energy per op (lower is better)", unit: "J", bars: Vec::new() };
    let mut error = Panel { title: "max |error| vs float64, in each row's unit", unit: "", bars: Vec::new() };
    for case in &r.cases {
        for row in &case.rows {
            let clock = row.fpga.as_ref().map_or(String::new(), |f| format!(" @ {}", f.clock_short()));
            let label = format!("{} {} · {}{clock}", case.workload.id(), case.size, row.device.id());
            latency.bars.push(Bar {
                label: label.clone(),
                value: Some(row.latency_s.value),
                label_kind: Some(row.latency_s.label),
            });
            throughput.bars.push(Bar {
                label: label.clone(),
                value: Some(row.ops_per_s.value),
                label_kind: Some(row.ops_per_s.label),
            });
            let e = row.energy.per_op;
            energy.bars.push(Bar { label: label.clone(), value: e.map(|e| e.value), label_kind: e.map(|e| e.label) });
            error.bars.push(Bar {
                label: format!("{label} ({})", row.accuracy.unit),
                value: Some(row.accuracy.max_abs),
                label_kind: None,
            });
        }
    }
    vec![latency, throughput, energy, error]
}

/// Height in pixels of one panel with `bars` bars.
fn panel_height(bars: usize) -> u32 {
    90 + 26 * bars as u32
}

/// Write the chart of `r` to `path`.
pub fn write_svg(r: &Report, path: &Path) -> Result<()> {
    let panels = panels(r);
    let rows = panels.first().map_or(0, |p| p.bars.len());
    let height = 50 + panels.len() as u32 * panel_height(rows);
    let root = SVGBackend::new(path, (1100, height)).into_drawing_area();
    draw(&root, &panels).with_context(|| format!("drawing {}", path.display()))?;
    root.present().with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn draw(root: &Area, panels: &[Panel]) -> Result<()> {
    root.fill(&WHITE)?;
    let body = root.titled(
        "ferrite compare — blue [M] measured · orange [P] projected from simulated cycles at the clock named · grey [E] estimated · \
         green: error of the device's own output",
        ("sans-serif", 16),
    )?;
    for (area, panel) in body.split_evenly((panels.len(), 1)).iter().zip(panels) {
        draw_panel(area, panel)?;
    }
    Ok(())
}

fn draw_panel(area: &Area, panel: &Panel) -> Result<()> {
    let positive: Vec<f64> = panel.bars.iter().filter_map(|b| b.value).filter(|v| *v > 0.0 && v.is_finite()).collect();
    let (lo, hi) = match (positive.iter().cloned().reduce(f64::min), positive.iter().cloned().reduce(f64::max)) {
        (Some(lo), Some(hi)) => (lo / 4.0, hi * 4.0),
        _ => (1e-3, 1.0),
    };
    let n = panel.bars.len().max(1) as f64;
    let unit = panel.unit;
    let mut chart = ChartBuilder::on(area)
        .caption(panel.title, ("sans-serif", 15))
        .margin(10)
        .x_label_area_size(28)
        .y_label_area_size(8)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..n)?;
    chart.configure_mesh().disable_y_mesh().y_labels(0).x_labels(8).x_label_formatter(&|v| format(*v, unit)).draw()?;
    let font = ("sans-serif", 13).into_font().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, bar) in panel.bars.iter().enumerate() {
        let y = n - i as f64 - 1.0;
        let text = match bar.value {
            Some(v) if v > 0.0 && v.is_finite() => {
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(lo, y + 0.12), (v, y + 0.88)],
                    colour(bar.label_kind).filled(),
                )))?;
                format!("{}: {}{}", bar.label, format(v, unit), bar.label_kind.map_or("", |k| k.marker()))
            }
            Some(0.0) => format!("{}: 0 (exact)", bar.label),
            Some(v) => format!("{}: {v}", bar.label),
            None => format!("{}: not available (see report.md)", bar.label),
        };
        chart.draw_series(std::iter::once(Text::new(text, (lo * 1.05, y + 0.5), font.clone())))?;
    }
    Ok(())
}
