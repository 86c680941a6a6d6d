//! Tables for people: a header row and rows, each column as wide as its widest cell.

/// The rows under `header`, columns two spaces apart, no space at a line's end.
pub fn render<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let padded: Vec<String> = cells
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(padded.join("  ").trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_under_their_headers() {
        let t = render(
            ["ID", "NAME"],
            &[
                ["a".into(), "build".into()],
                ["longer-id".into(), "x".into()],
            ],
        );
        assert_eq!(t, "ID         NAME\na          build\nlonger-id  x\n");
    }
}
