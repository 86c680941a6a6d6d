//! `termgate-control`: the control service, and `token` for dev sign-in.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "termgate-control", version, about = "termgate control service")]
struct Cli {
    /// Configuration file.
    #[arg(long, global = true, default_value = "termgate.toml")]
    config: PathBuf,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Print a signed JWT (dev sign-in and tests); needs a secret or private key.
    Token {
        /// Subject of the token.
        #[arg(long)]
        sub: String,
        /// Grant the configured admin role.
        #[arg(long)]
        admin: bool,
        /// Lifetime in seconds (default: auth.token_ttl_seconds).
        #[arg(long)]
        ttl: Option<u64>,
    },
    /// Load and validate the configuration, then exit.
    Check,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match config::load(&cli.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("termgate-control: {}: {e}", cli.config.display());
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Some(Command::Token { sub, admin, ttl }) => match token(&config, &sub, admin, ttl) {
            Ok(t) => {
                println!("{t}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("termgate-control token: {e}");
                ExitCode::from(2)
            }
        },
        Some(Command::Check) | None => {
            println!("configuration {} is valid", cli.config.display());
            ExitCode::SUCCESS
        }
    }
}

fn token(
    config: &config::Config,
    sub: &str,
    admin: bool,
    ttl: Option<u64>,
) -> Result<String, String> {
    if policy::Sub::parse(sub).is_none() {
        return Err(format!(
            "--sub {sub:?}: must be 1-128 characters of A-Z a-z 0-9 . _ @ -"
        ));
    }
    let signer = config.signer().ok_or(
        "no signing key: configure auth.hs256_secret_file, or auth.signing_key_file next to public keys",
    )?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs();
    let claims = policy::TokenClaims {
        sub: sub.to_owned(),
        exp: now + ttl.unwrap_or(config.auth.token_ttl_seconds),
        iat: now,
        iss: config.auth.issuer.clone(),
        aud: config.auth.audience.clone(),
        roles: if admin {
            vec![config.auth.admin_role.clone()]
        } else {
            Vec::new()
        },
    };
    signer.sign(&claims).map_err(|e| e.to_string())
}
