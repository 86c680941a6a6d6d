//! `termgate`: termgate sessions from the terminal you already use. Sign in to a
//! gateway, list, create and end sessions, attach to a session's terminal through the
//! gateway, with the checks the sessions page gets, share it, invite peers, and read
//! its recordings.

mod attach;
mod cast;
mod credentials;
mod failure;
mod gateway;
mod handoff;
mod login;
mod peers;
mod recordings;
mod sessions;
mod shares;
mod table;

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
    about = "termgate sessions from your terminal: sign in, list, create, end, attach, share",
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
    /// Sign in to a gateway: allowed in your browser, or with a token.
    Login {
        /// The gateway, e.g. https://term.example.com
        url: String,
        /// Read a token from standard input (for scripts) instead of using the browser.
        #[arg(long, conflicts_with = "token")]
        token_stdin: bool,
        /// Ask for a token (the kind the sign-in page takes) instead of using the
        /// browser.
        #[arg(long)]
        token: bool,
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
        /// The session's id or its unique name (with --new: the new session's name);
        /// its id behind a front proxy that passes only terminals.
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
    /// Make a read-only link to watch a session (printed once); `share ls`, `share rm`.
    #[command(args_conflicts_with_subcommands = true)]
    Share {
        #[command(subcommand)]
        action: Option<ShareAction>,
        /// The session's id or its unique name.
        #[arg(required = true)]
        session: Option<String>,
        /// How long the link lets viewers in: 90s, 15m, 1h, 7d.
        #[arg(long, default_value = "1h", value_parser = sessions::ttl)]
        ttl: u64,
        /// Most viewers at once.
        #[arg(long, value_name = "N")]
        max_viewers: Option<u32>,
        /// Print the new link as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Users who may type into a session for a while.
    Peers {
        #[command(subcommand)]
        action: PeersAction,
    },
    /// A session's recordings (profiles that record).
    Recordings {
        #[command(subcommand)]
        action: RecordingsAction,
    },
}

#[derive(Subcommand)]
enum ShareAction {
    /// List live links: of one session, or of all of yours.
    Ls {
        /// The session's id or its unique name (default: all of yours).
        session: Option<String>,
        /// Print the gateway's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a link; its viewers are closed.
    Rm {
        /// The link's id (share ls lists them).
        id: String,
        /// The session it shows (default: looked for among yours).
        #[arg(long)]
        session: Option<String>,
    },
}

#[derive(Subcommand)]
enum PeersAction {
    /// Invite a user to type into a session.
    Add {
        /// The session's id or its unique name.
        session: String,
        /// The user invited.
        user: String,
        /// How long the invitation lasts: 90s, 15m, 1h, 7d.
        #[arg(long, default_value = "1h", value_parser = sessions::ttl)]
        ttl: u64,
        /// Print the invitation as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List a session's peers.
    Ls {
        /// The session's id or its unique name.
        session: String,
        /// Print the gateway's JSON.
        #[arg(long)]
        json: bool,
    },
    /// End a peer's invitation; their terminals close.
    Rm {
        /// The session's id or its unique name.
        session: String,
        /// The peer.
        user: String,
    },
}

#[derive(Subcommand)]
enum RecordingsAction {
    /// List a session's recordings (ended sessions' too).
    Ls {
        /// The session's id or its unique name.
        session: String,
        /// Print the gateway's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Save a recording as an asciicast v2 file.
    Download {
        /// The session's id or its unique name.
        session: String,
        /// The recording's name (recordings ls lists them).
        name: String,
        /// Where to write it ("-": standard output; default NAME.cast here).
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Play a recording in this terminal, at its pace.
    Play {
        /// The session's id or its unique name.
        session: String,
        /// The recording's name (recordings ls lists them).
        name: String,
        /// How many times as fast as it was recorded.
        #[arg(long, default_value_t = 1.0, value_parser = speed)]
        speed: f64,
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
            token,
            ca_file,
        } => {
            let how = match (token_stdin, token) {
                (true, _) => login::How::Stdin,
                (false, true) => login::How::Prompt,
                (false, false) => login::How::Browser,
            };
            println!("{}", login::login(&url, how, ca_file.as_deref()).await?);
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
                (sessions::find_to_open(&gw, &wanted).await?, wanted)
            };
            let ended = attach::attach(&gw, &target, &wanted, keys).await?;
            eprintln!("{}", ended.message);
            return Ok(ended.status);
        }
        Command::Share {
            action,
            session,
            ttl,
            max_viewers,
            json,
        } => {
            share(
                &login::signed_in(gateway)?,
                action,
                session,
                ttl,
                max_viewers,
                json,
            )
            .await?
        }
        Command::Peers { action } => peers(&login::signed_in(gateway)?, action).await?,
        Command::Recordings { action } => {
            recordings(&login::signed_in(gateway)?, action).await?;
        }
    }
    Ok(Status::Done)
}

async fn share(
    gw: &gateway::Gateway,
    action: Option<ShareAction>,
    session: Option<String>,
    ttl: u64,
    max_viewers: Option<u32>,
    json: bool,
) -> Result<(), Failure> {
    match action {
        None => {
            let wanted = session.unwrap_or_default();
            let made = shares::create(gw, &wanted, ttl, max_viewers).await?;
            if json {
                print_json(&made.view);
            } else {
                // The link on its own line, for a script or a copy; what it is beside it.
                println!("{}", made.url);
                eprintln!(
                    "a read-only view of {} for {}, until {} (id {}); this link is shown only now",
                    shares::session_label(&made.session),
                    if made.view["signed_in"] == true {
                        "signed-in users"
                    } else {
                        "anyone with the link"
                    },
                    sessions::until(now(), made.view["expires_at"].as_u64().unwrap_or(0)),
                    made.view["id"].as_str().unwrap_or("-"),
                );
            }
        }
        Some(ShareAction::Ls { session, json }) => {
            let live = shares::list(gw, session.as_deref()).await?;
            if json {
                let views: Vec<_> = live
                    .iter()
                    .map(|l| {
                        let mut v = l.view.clone();
                        v["session"] = json!(l.session.id);
                        v
                    })
                    .collect();
                print_json(&json!(views));
            } else {
                print!("{}", shares::table(&live, now()));
            }
        }
        Some(ShareAction::Rm { id, session }) => {
            let s = shares::remove(gw, &id, session.as_deref()).await?;
            println!("removed share link {id} of {}", shares::session_label(&s));
        }
    }
    Ok(())
}

async fn peers(gw: &gateway::Gateway, action: PeersAction) -> Result<(), Failure> {
    match action {
        PeersAction::Add {
            session,
            user,
            ttl,
            json,
        } => {
            let (s, invited) = peers::add(gw, &session, &user, ttl).await?;
            if json {
                print_json(&invited);
            } else {
                println!(
                    "{user} may type into {} until {}",
                    shares::session_label(&s),
                    sessions::until(now(), invited["expires_at"].as_u64().unwrap_or(0))
                );
            }
        }
        PeersAction::Ls { session, json } => {
            let list = peers::list(gw, &session).await?;
            if json {
                print_json(&json!(list));
            } else {
                print!("{}", peers::table(&list, now()));
            }
        }
        PeersAction::Rm { session, user } => {
            let s = peers::remove(gw, &session, &user).await?;
            println!(
                "{user} may no longer type into {}",
                shares::session_label(&s)
            );
        }
    }
    Ok(())
}

async fn recordings(gw: &gateway::Gateway, action: RecordingsAction) -> Result<(), Failure> {
    match action {
        RecordingsAction::Ls { session, json } => {
            let (_, list) = recordings::list(gw, &session).await?;
            if json {
                print_json(&json!(list));
            } else {
                print!("{}", recordings::table(&list, now()));
            }
        }
        RecordingsAction::Download {
            session,
            name,
            output,
        } => {
            let (written, n) = recordings::download(gw, &session, &name, output.as_deref()).await?;
            if let recordings::Written::File(path) = written {
                eprintln!("wrote {n} bytes to {}", path.display());
            }
        }
        RecordingsAction::Play {
            session,
            name,
            speed,
        } => recordings::play(gw, &session, &name, speed).await?,
    }
    Ok(())
}

/// Reads `--speed`: a number above zero.
fn speed(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 => Ok(s),
        _ => Err(format!("expected a number above zero, got {text:?}")),
    }
}

fn print_json(value: &serde_json::Value) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        Err(_) => println!("{value}"),
    }
}
