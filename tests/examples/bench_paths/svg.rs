//! Grouped bar charts as plain SVG: one group per condition (a concurrency, a count),
//! one bar per path, and an optional second value per bar drawn as a tick (p99).

/// One bar: its value and an optional tick above or below it.
pub struct Bar {
    pub value: f64,
    pub tick: Option<f64>,
}

/// A chart: the title, the unit of the axis, the series (paths) and the groups.
pub struct Chart<'a> {
    pub title: &'a str,
    pub unit: &'a str,
    pub series: &'a [&'a str],
    /// Group label, then one bar per series (`None`: not measured there).
    pub groups: Vec<(String, Vec<Option<Bar>>)>,
    pub note: &'a str,
}

const COLORS: [&str; 5] = ["#7f7f7f", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A round axis maximum at or above `v`.
fn nice(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * p >= v {
            return m * p;
        }
    }
    10.0 * p
}

fn label(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

impl Chart<'_> {
    /// The SVG text.
    pub fn render(&self) -> String {
        let (w, h) = (760.0, 400.0);
        let (left, right, top, bottom) = (70.0, 20.0, 50.0, 80.0);
        let plot_w = w - left - right;
        let plot_h = h - top - bottom;
        let max = self
            .groups
            .iter()
            .flat_map(|(_, bars)| bars.iter().flatten())
            .map(|b| b.value.max(b.tick.unwrap_or(0.0)))
            .fold(0.0, f64::max);
        let max = nice(max * 1.05);
        let y = |v: f64| top + plot_h - (v / max) * plot_h;
        let mut out = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
            w / 2.0,
            esc(self.title)
        );
        for i in 0..=5 {
            let v = max * f64::from(i) / 5.0;
            let yy = y(v);
            out.push_str(&format!(
                "<line x1=\"{left}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/>\
                 <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
                w - right,
                left - 6.0,
                yy + 4.0,
                label(v)
            ));
        }
        out.push_str(&format!(
            "<text x=\"16\" y=\"{:.1}\" transform=\"rotate(-90 16 {:.1})\" text-anchor=\"middle\">{}</text>\n",
            top + plot_h / 2.0,
            top + plot_h / 2.0,
            esc(self.unit)
        ));
        let groups = self.groups.len().max(1) as f64;
        let gw = plot_w / groups;
        let n = self.series.len().max(1) as f64;
        let bw = (gw * 0.8) / n;
        for (gi, (name, bars)) in self.groups.iter().enumerate() {
            let gx = left + gw * gi as f64 + gw * 0.1;
            for (si, bar) in bars.iter().enumerate() {
                let Some(bar) = bar else { continue };
                let x = gx + bw * si as f64;
                let color = COLORS[si % COLORS.len()];
                out.push_str(&format!(
                    "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\"><title>{}: {}</title></rect>\n",
                    y(bar.value),
                    bw * 0.9,
                    (top + plot_h - y(bar.value)).max(0.0),
                    esc(self.series[si]),
                    label(bar.value)
                ));
                let top_of = bar.value.max(bar.tick.unwrap_or(0.0));
                out.push_str(&format!(
                    "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">{}</text>\n",
                    x + bw * 0.45,
                    y(top_of) - 4.0,
                    label(bar.value)
                ));
                if let Some(t) = bar.tick {
                    out.push_str(&format!(
                        "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\" stroke-width=\"2\"/>\
                         <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>\n",
                        x + bw * 0.15,
                        x + bw * 0.75,
                        y(t),
                        y(t),
                        x + bw * 0.45,
                        x + bw * 0.45,
                        y(bar.value),
                        y(t)
                    ));
                }
            }
            out.push_str(&format!(
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
                gx + gw * 0.4,
                top + plot_h + 18.0,
                esc(name)
            ));
        }
        out.push_str(&format!(
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>\n",
            w - right,
            top + plot_h,
            top + plot_h
        ));
        let mut lx = left;
        for (si, s) in self.series.iter().enumerate() {
            out.push_str(&format!(
                "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{}\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\">{}</text>\n",
                h - 46.0,
                COLORS[si % COLORS.len()],
                lx + 16.0,
                h - 36.0,
                esc(s)
            ));
            lx += 30.0 + 7.0 * s.len() as f64;
        }
        out.push_str(&format!(
            "<text x=\"{left}\" y=\"{:.1}\" fill=\"#555\">{}</text>\n</svg>\n",
            h - 12.0,
            esc(self.note)
        ));
        out
    }
}
