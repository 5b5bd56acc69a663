//! One line per figure for the bench table (`scripts/bench` gathers them from every
//! bench and prints one table): what was measured, its value, the baseline measured
//! beside it in the same run (when the figure has one), the ratio, the limit it is
//! measured against, and whether it meets it.

/// What a figure is measured against.
#[derive(Debug, Clone, Copy)]
#[allow(dead_code)] // each bench uses the kinds it needs
pub enum Limit {
    None,
    /// Lower is better: a target, and a bar it must not pass.
    Below {
        target: f64,
        bar: f64,
    },
    /// Higher is better: at least this.
    AtLeast(f64),
    /// The ratio to the baseline must not exceed this.
    RatioAtMost(f64),
    /// Neither the value nor its ratio to the baseline may exceed these.
    AtMostAndRatioAtMost(f64, f64),
}

/// Prints one row: `value` in `unit`, with `baseline` (its name and value in the
/// same unit) and `limit`.
pub fn row(
    group: &str,
    what: &str,
    value: f64,
    unit: &str,
    baseline: Option<(&str, f64)>,
    limit: Limit,
) {
    let ratio = baseline.and_then(|(_, base)| (base > 0.0).then(|| value / base));
    let (name, base) = match baseline {
        Some((name, base)) => (name.to_string(), format!("{base:.3}")),
        None => ("-".into(), "-".into()),
    };
    let (limit, status) = match limit {
        Limit::None => ("-".to_string(), "-"),
        Limit::Below { target, bar } => (
            format!("{target} (bar {bar})"),
            if value <= target {
                "target met"
            } else if value <= bar {
                "bar met, target missed"
            } else {
                "BAR MISSED"
            },
        ),
        Limit::AtLeast(min) => (
            format!("≥ {min}"),
            if value >= min { "met" } else { "MISSED" },
        ),
        Limit::RatioAtMost(max) => (
            format!("ratio ≤ {max}"),
            if ratio.is_some_and(|r| r <= max) {
                "met"
            } else {
                "MISSED"
            },
        ),
        Limit::AtMostAndRatioAtMost(most, max) => (
            format!("≤ {most}, ratio ≤ {max}"),
            if value <= most && ratio.is_some_and(|r| r <= max) {
                "met"
            } else {
                "MISSED"
            },
        ),
    };
    let ratio = ratio.map_or("-".to_string(), |r| format!("{r:.2}"));
    #[allow(clippy::print_stdout)]
    {
        println!(
            "row\t{group}\t{what}\t{value:.3}\t{unit}\t{name}\t{base}\t{ratio}\t{limit}\t{status}"
        );
    }
}
