//! The floor: the least a proxy on tokio does. It accepts, connects to ttyd's socket and
//! copies bytes both ways until either side ends; it reads no HTTP, checks nothing and
//! logs nothing. Its runtime is the gateway's (multi-threaded, two workers), so what
//! termgate adds to it is authentication, admission, the tunnel's checks and the logs.
//! `BENCH_RELAY_THREADS=1` makes it one thread with a single-threaded runtime, the shape
//! of one nginx worker.
//!
//! It runs as a process of its own (`bench_paths --relay <socket>`), so its CPU time is
//! read like the other proxies'.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use tokio::net::{TcpListener, TcpStream, UnixStream};

/// The argument that makes `bench_paths` the relay.
pub const ARG: &str = "--relay";

/// A running relay process, killed when dropped.
pub struct Relay {
    child: Child,
    /// Its loopback port.
    pub port: u16,
}

impl Relay {
    /// Starts this executable as a relay in front of `socket`.
    pub fn start(socket: &Path) -> Relay {
        let exe = std::env::current_exe().expect("the bench's own executable");
        let mut child = Command::new(exe)
            .arg(ARG)
            .arg(socket)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the relay");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("the relay's stdout"))
            .read_line(&mut line)
            .expect("the relay's port");
        let port = line.trim().parse().expect("a port");
        Relay { child, port }
    }

    /// The relay's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Serves as the relay in front of `socket` until killed; prints its port first.
pub fn serve(socket: &Path) {
    let threads = std::env::var("BENCH_RELAY_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(2);
    let mut builder = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    let runtime = builder.enable_all().build().expect("a runtime");
    runtime.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("local address").port();
        let mut out = std::io::stdout();
        let _ = writeln!(out, "{port}");
        let _ = out.flush();
        loop {
            let Ok((client, _)) = listener.accept().await else {
                // Out of descriptors, say: a pause, as nginx and Pingora take, rather than
                // a core spent retrying beside the paths being measured.
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            };
            let socket = socket.to_path_buf();
            tokio::spawn(async move {
                let _ = relay(client, &socket).await;
            });
        }
    });
}

async fn relay(mut client: TcpStream, socket: &Path) -> std::io::Result<()> {
    client.set_nodelay(true)?;
    let mut ttyd = UnixStream::connect(socket).await?;
    tokio::io::copy_bidirectional(&mut client, &mut ttyd).await?;
    Ok(())
}
