//! `hookbus bench`: every benchmark scenario with its baselines, ratios and targets.

use std::io::Write;
use std::process::ExitCode;

use hookbus::benchmark::{run_only, steps, BenchConfig, BenchResult, RuntimeKind, Unit};
use indicatif::{ProgressBar, ProgressStyle};

/// Options of `hookbus bench`.
#[derive(clap::Args)]
pub struct BenchArgs {
    /// Shorter samples: the whole run within a minute.
    #[arg(long)]
    quick: bool,
    /// `text` (a table) or `json` (one object with every result).
    #[arg(long, value_parser = ["text", "json"], default_value = "text")]
    format: String,
    /// Only the scenario groups whose name contains this (`pair`, `throughput`, `sessions`,
    /// `pipeline`, `idle`, ...).
    #[arg(long)]
    only: Option<String>,
}

/// Runs the benchmarks. Blocking: it builds its own runtimes.
pub fn run_bench(args: BenchArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let config = if args.quick {
        BenchConfig::quick()
    } else {
        BenchConfig::full()
    };
    let only = args.only.as_deref();
    let bar = ProgressBar::new(steps(only));
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut first = true;
    let results = run_only(&config, only, |step| {
        if !first {
            bar.inc(1);
        }
        first = false;
        bar.set_message(step.to_owned());
    });
    bar.finish_and_clear();
    let mut out = std::io::stdout().lock();
    if args.format == "json" {
        let doc = serde_json::json!({ "results": results });
        writeln!(out, "{doc}")?;
    } else {
        write!(out, "{}", table(&results))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn figure(value: Option<f64>, unit: Unit) -> String {
    match value {
        None => "-".into(),
        Some(v) => match unit {
            Unit::Ns if v >= 1e6 => format!("{:.2} ms", v / 1e6),
            Unit::Ns if v >= 1e3 => format!("{:.2} µs", v / 1e3),
            Unit::Ns => format!("{v:.0} ns"),
            Unit::PairsPerS => format!("{v:.0}/s"),
            Unit::Bytes => format!("{v:.0} B"),
        },
    }
}

/// The results as an aligned table.
pub fn table(results: &[BenchResult]) -> String {
    let rows: Vec<[String; 8]> = results
        .iter()
        .map(|r| {
            [
                r.scenario.clone(),
                match r.runtime {
                    Some(RuntimeKind::MultiThread) => "multi_thread".into(),
                    Some(RuntimeKind::CurrentThread) => "current_thread".into(),
                    None => "-".into(),
                },
                figure(Some(r.hookbus), r.unit),
                figure(r.direct, r.unit),
                figure(r.join_all, r.unit),
                figure(r.actor_baseline, r.unit),
                if r.pass { "pass".into() } else { "FAIL".into() },
                r.target.clone(),
            ]
        })
        .collect();
    let header = [
        "scenario",
        "runtime",
        "hookbus",
        "direct",
        "join_all",
        "actor_baseline",
        "",
        "target",
    ]
    .map(String::from);
    let mut widths = [0usize; 8];
    for row in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}
