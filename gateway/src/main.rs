//! `termgate-gateway`: the single ingress.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

#[derive(Parser)]
#[command(name = "termgate-gateway", version, about = "termgate gateway")]
struct Cli {
    /// Configuration file.
    #[arg(long, default_value = "termgate.toml")]
    config: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match config::load(&cli.config) {
        Ok(_) => {
            println!("configuration {} is valid", cli.config.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("termgate-gateway: {}: {e}", cli.config.display());
            ExitCode::from(2)
        }
    }
}
