//! The machine a benchmark ran on, as the Markdown table docs/benchmarks.md shows above
//! each run's figures (shared by the benchmarks that print one).

use std::fmt::Write as _;
use std::process::Command;

/// The first line `cmd args…` prints (either stream), or why it could not run.
pub fn command_line(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| {
            let mut s = String::from_utf8_lossy(&o.stdout).into_owned();
            s.push_str(&String::from_utf8_lossy(&o.stderr));
            s.lines().next().unwrap_or_default().trim().to_owned()
        })
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

/// CPU, memory, kernel, Docker, ttyd, then the `extra` rows (name, value), the
/// termgate commit and the load average at start.
pub fn machine_facts(extra: &[(&str, String)]) -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or_else(|| "unknown".into(), |(_, v)| v.trim().to_owned());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let ttyd = e2e::ttyd::ttyd_binary();
    let mut rows = vec![
        ("CPU", format!("{model}, {cores} cores")),
        ("memory", format!("{mem_gib:.1} GiB")),
        ("kernel", kernel.trim().to_owned()),
        (
            "Docker",
            command_line("docker", &["version", "--format", "{{.Server.Version}}"]),
        ),
        (
            "ttyd",
            command_line(&ttyd.to_string_lossy(), &["--version"]),
        ),
    ];
    rows.extend(extra.iter().cloned());
    rows.push((
        "termgate",
        command_line("git", &["describe", "--always", "--dirty"]),
    ));
    rows.push((
        "load average at start",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    ));
    let mut s = String::from("| machine | |\n|---|---|\n");
    for (name, value) in rows {
        let _ = writeln!(s, "| {name} | {value} |");
    }
    s
}
