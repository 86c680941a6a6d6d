//! A session's recordings (`/api/sessions/<id>/recordings`, profiles that `record`):
//! listed, downloaded as the asciicast files they are, and played in this terminal at
//! their pace. Ended sessions keep theirs, so a session is looked for among ended ones
//! too.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::cast;
use crate::failure::Failure;
use crate::gateway::{Gateway, Streamed};
use crate::sessions::{self, Listed};

/// Where a download went.
pub enum Written {
    /// To this file.
    File(PathBuf),
    /// To standard output (`-o -`).
    Stdout,
}

/// The recordings of `wanted`, oldest first.
pub async fn list(gw: &Gateway, wanted: &str) -> Result<(Listed, Vec<Value>), Failure> {
    let session = sessions::find_any(gw, wanted).await?;
    let reply = gw
        .call(
            "GET",
            &format!("/api/sessions/{}/recordings", session.id),
            None,
        )
        .await?;
    if reply.status != 200 {
        return Err(sessions::refused(
            gw,
            &reply,
            wanted,
            &format!("listing the recordings of {wanted}"),
        ));
    }
    let list = reply.json()["recordings"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Ok((session, list))
}

/// Writes the recording `name` of `wanted` to `to` (default `<name>.cast` here; `-`:
/// standard output), whole or not at all. Where it went and how many bytes.
pub async fn download(
    gw: &Gateway,
    wanted: &str,
    name: &str,
    to: Option<&Path>,
) -> Result<(Written, u64), Failure> {
    let mut body = open(gw, wanted, name).await?;
    let path = to.map_or_else(|| PathBuf::from(format!("{name}.cast")), Path::to_path_buf);
    if path.as_os_str() == "-" {
        let mut out = std::io::stdout().lock();
        let n = copy(&mut body, &mut out).await?;
        return Ok((Written::Stdout, n));
    }
    // Written beside its name and renamed once whole: a download that breaks off
    // leaves nothing that looks like a recording.
    let part = path.with_file_name(format!(
        ".{}.part",
        path.file_name()
            .map_or_else(|| name.into(), |f| f.to_string_lossy())
    ));
    let fail = |p: &Path, e: std::io::Error| Failure::error(format!("{}: {e}", p.display()));
    let mut file = std::fs::File::create(&part).map_err(|e| fail(&part, e))?;
    let copied = copy(&mut body, &mut file).await.and_then(|n| {
        file.sync_all().map_err(|e| fail(&part, e))?;
        std::fs::rename(&part, &path).map_err(|e| fail(&path, e))?;
        Ok(n)
    });
    if copied.is_err() {
        let _ = std::fs::remove_file(&part);
    }
    Ok((Written::File(path), copied?))
}

/// Plays the recording `name` of `wanted` to standard output, `speed` times as fast
/// as it was recorded: what the terminal showed, at its pace.
pub async fn play(gw: &Gateway, wanted: &str, name: &str, speed: f64) -> Result<(), Failure> {
    let mut body = open(gw, wanted, name).await?;
    let mut out = std::io::stdout();
    let mut pending = Vec::new();
    let mut header_read = false;
    let mut last = 0.0;
    loop {
        let piece = body.next().await?;
        let done = piece.is_none();
        if let Some(p) = piece {
            pending.extend_from_slice(&p);
        }
        // Whole lines only; at the end, whatever is left is the last line.
        let cut = if done {
            pending.len()
        } else {
            pending
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |i| i + 1)
        };
        let lines: Vec<u8> = pending.drain(..cut).collect();
        for line in String::from_utf8_lossy(&lines).lines() {
            if line.trim().is_empty() {
                continue;
            }
            if !header_read {
                cast::header(line).map_err(Failure::error)?;
                header_read = true;
                continue;
            }
            if let Some((at, text)) = cast::output(line).map_err(Failure::error)? {
                tokio::time::sleep(cast::pause(last, at, speed)).await;
                last = last.max(at);
                out.write_all(text.as_bytes())
                    .and_then(|()| out.flush())
                    .map_err(|e| Failure::error(format!("writing the recording: {e}")))?;
            }
        }
        if done {
            break;
        }
    }
    if !header_read {
        return Err(Failure::error(format!("the recording {name} is empty")));
    }
    Ok(())
}

/// The recording `name` of `wanted`, its body to read.
async fn open(gw: &Gateway, wanted: &str, name: &str) -> Result<Streamed, Failure> {
    // The name is a segment of the path: the few characters recordings are named with.
    let valid = (1..=100).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !valid {
        return Err(Failure::error(format!(
            "not a recording's name: {name:?} (termgate recordings ls SESSION lists them)"
        )));
    }
    let session = sessions::find_any(gw, wanted).await?;
    let body = gw
        .stream(&format!("/api/sessions/{}/recordings/{name}", session.id))
        .await?;
    if body.status == 200 {
        return Ok(body);
    }
    let reply = body.reply().await?;
    // Control answers a missing recording as it does a session that is not the
    // caller's; a session the caller was listed is theirs, so the recording is missing.
    if reply.status == 404 && !session.view.is_null() {
        return Err(Failure::error(format!(
            "{wanted} has no recording {name:?} (termgate recordings ls {wanted} lists them)"
        )));
    }
    Err(sessions::refused(
        gw,
        &reply,
        wanted,
        &format!("reading the recording {name} of {wanted}"),
    ))
}

async fn copy(body: &mut Streamed, to: &mut dyn Write) -> Result<u64, Failure> {
    let mut n = 0;
    while let Some(piece) = body.next().await? {
        to.write_all(&piece)
            .map_err(|e| Failure::error(format!("writing the recording: {e}")))?;
        n += piece.len() as u64;
    }
    to.flush()
        .map_err(|e| Failure::error(format!("writing the recording: {e}")))?;
    Ok(n)
}

/// The recordings as a table for people.
pub fn table(recordings: &[Value], now: u64) -> String {
    let rows: Vec<[String; 4]> = recordings
        .iter()
        .map(|r| {
            [
                r["name"].as_str().unwrap_or("-").to_owned(),
                r["started"]
                    .as_u64()
                    .map_or("-".into(), |t| sessions::ago(now, t)),
                r["duration"].as_f64().map_or("-".into(), duration),
                r["size"].as_u64().map_or("-".into(), size),
            ]
        })
        .collect();
    crate::table::render(["NAME", "STARTED", "DURATION", "SIZE"], &rows)
}

fn duration(secs: f64) -> String {
    // Whole seconds: a recording's length to the millisecond says nothing more here.
    let s = secs.max(0.0).round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

fn size(bytes: u64) -> String {
    match bytes {
        0..=1023 => format!("{bytes} B"),
        1024..=1_048_575 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_table_shows_each_recordings_name_age_length_and_size() {
        let t = table(
            &[
                json!({"name": "t1-abc", "started": 100, "duration": 65.4, "size": 2048}),
                json!({"name": "t2", "started": 390, "duration": 3.2, "size": 10}),
            ],
            400,
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "NAME    STARTED  DURATION  SIZE");
        assert_eq!(lines[1], "t1-abc  5m ago   1m05s     2.0 KiB");
        assert_eq!(lines[2], "t2      10s ago  3s        10 B");
    }

    #[test]
    fn lengths_and_sizes_read_at_a_glance() {
        assert_eq!(duration(7322.0), "2h02m");
        assert_eq!(size(5 << 20), "5.0 MiB");
    }
}
