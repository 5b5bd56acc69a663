//! One line per figure for the bench table (`scripts/bench` gathers them from every
//! bench and prints one table): what was measured, its value, the baseline measured
//! beside it in the same run, the ratio, and the limit it is held to.

/// Prints one row: `value` in `unit`, with `baseline` (its name and value in the
/// same unit) and `limit` (a target and bar, or what the ratio must not exceed).
pub fn row(
    group: &str,
    what: &str,
    value: f64,
    unit: &str,
    baseline: Option<(&str, f64)>,
    limit: &str,
) {
    let (name, base, ratio) = match baseline {
        Some((name, base)) if base > 0.0 => (
            name.to_string(),
            format!("{base:.3}"),
            format!("{:.2}", value / base),
        ),
        Some((name, base)) => (name.to_string(), format!("{base:.3}"), "-".into()),
        None => ("-".into(), "-".into(), "-".into()),
    };
    #[allow(clippy::print_stdout)]
    {
        println!("row\t{group}\t{what}\t{value:.3}\t{unit}\t{name}\t{base}\t{ratio}\t{limit}");
    }
}
