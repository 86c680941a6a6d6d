//! `termgate`: termgate sessions from the terminal you already use. Sign in to a
//! gateway, list, create and end sessions, and attach to a session's terminal through
//! the gateway, with the checks the sessions page gets.

mod attach;
mod credentials;
mod failure;
mod gateway;
mod login;
mod sessions;

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use serde_json::json;

use failure::{Failure, Status};
use sessions::NewSession;

#[derive(Parser)]
#[command(
    name = "termgate",
    version,
    about = "termgate sessions from your terminal: sign in, list, create, end, attach",
    after_help = failure::STATUSES
)]
struct Cli {
    /// The gateway to use when signed in to several (default: the last signed in to).
    #[arg(long, global = true, value_name = "URL")]
    gateway: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Sign in to a gateway with a token (the kind its sign-in page takes).
    Login {
        /// The gateway, e.g. https://term.example.com
        url: String,
        /// Read the token from standard input (for scripts) instead of asking for it.
        #[arg(long)]
        token_stdin: bool,
        /// Trust the gateway's certificate through this CA (PEM) too, not only the
        /// system's roots.
        #[arg(long, value_name = "FILE")]
        ca_file: Option<PathBuf>,
    },
    /// Sign out: the sign-in is revoked at the gateway, then forgotten here.
    Logout,
    /// List your sessions (and those you were invited to, and the targets you may open).
    Ls {
        /// Print the gateway's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create a session.
    New {
        #[command(flatten)]
        new: NewArgs,
        /// Print the new session as JSON.
        #[arg(long)]
        json: bool,
    },
    /// End a session (its container is removed).
    End {
        /// The session's id or its unique name.
        session: String,
        /// Print the ended session as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Attach to a session's terminal; the detach keys leave it running.
    Attach {
        /// The session's id or its unique name (with --new: the new session's name).
        #[arg(required_unless_present = "new")]
        session: Option<String>,
        /// Create a session and attach to it.
        #[arg(long)]
        new: bool,
        #[command(flatten)]
        create: NewArgs,
        /// Keys that detach, as Docker spells them ("" for none).
        #[arg(long, value_name = "KEYS", default_value = attach::DEFAULT_DETACH_KEYS)]
        detach_keys: String,
    },
}

#[derive(Args)]
struct NewArgs {
    /// The session's profile.
    #[arg(long, default_value = "default")]
    profile: String,
    /// The session's name (default: the profile's).
    #[arg(long)]
    name: Option<String>,
    /// An option of the profile, NAME=VALUE (repeatable).
    #[arg(long = "option", value_name = "NAME=VALUE", value_parser = sessions::option)]
    options: Vec<(String, String)>,
}

impl NewArgs {
    fn session(self, name: Option<String>) -> NewSession {
        NewSession {
            profile: self.profile,
            name: name.or(self.name),
            options: self.options.into_iter().collect::<BTreeMap<_, _>>(),
        }
    }
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn main() {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("termgate: cannot start: {e}");
            std::process::exit(Status::Error.code());
        }
    };
    let status = match runtime.block_on(run(cli)) {
        Ok(status) => status,
        Err(f) => {
            eprintln!("termgate: {f}");
            f.status
        }
    };
    // The thread reading a terminal cannot be joined: the exit ends it.
    std::process::exit(status.code());
}

async fn run(cli: Cli) -> Result<Status, Failure> {
    let gateway = cli.gateway.as_deref();
    match cli.command {
        Command::Login {
            url,
            token_stdin,
            ca_file,
        } => {
            println!(
                "{}",
                login::login(&url, token_stdin, ca_file.as_deref()).await?
            );
        }
        Command::Logout => println!("{}", login::logout(gateway).await?),
        Command::Ls { json } => {
            let gw = login::signed_in(gateway)?;
            let listed = sessions::list(&gw).await?;
            if json {
                let views: Vec<_> = listed.into_iter().map(|s| s.view).collect();
                print_json(&json!(views));
            } else {
                print!("{}", sessions::table(&listed, now()));
            }
        }
        Command::New { new, json } => {
            let gw = login::signed_in(gateway)?;
            let s = sessions::create(&gw, &new.session(None)).await?;
            if json {
                print_json(&s.view);
            } else {
                println!("created {} ({}): termgate attach {}", s.name, s.id, s.id);
            }
        }
        Command::End { session, json } => {
            let gw = login::signed_in(gateway)?;
            let s = sessions::end(&gw, &session).await?;
            if json {
                print_json(&json!({"id": s.id, "name": s.name, "ended": true}));
            } else {
                println!("ended {session} ({})", s.id);
            }
        }
        Command::Attach {
            session,
            new,
            create,
            detach_keys,
        } => {
            let keys = attach::parse_detach_keys(&detach_keys)
                .map_err(|e| Failure::error(format!("--detach-keys: {e}")))?;
            let gw = login::signed_in(gateway)?;
            let (target, wanted) = if new {
                let s = sessions::create(&gw, &create.session(session)).await?;
                let wanted = s.id.clone();
                (s, wanted)
            } else {
                let wanted = session.unwrap_or_default();
                (sessions::find(&gw, &wanted).await?, wanted)
            };
            let ended = attach::attach(&gw, &target, &wanted, keys).await?;
            eprintln!("{}", ended.message);
            return Ok(ended.status);
        }
    }
    Ok(Status::Done)
}

fn print_json(value: &serde_json::Value) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        Err(_) => println!("{value}"),
    }
}
