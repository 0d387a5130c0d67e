//! A private `nats-server` with JetStream for a test: a free loopback port, its store in a
//! temporary directory, killed when dropped. Never the system's service.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct NatsServer {
    child: Child,
    pub url: String,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where `nats-server` is: on `PATH`, or where Debian puts it.
fn find() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("nats-server"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
    })
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address").port()
}

impl NatsServer {
    /// Starts a private server, or reports the test skipped (`None`) when `nats-server` is not
    /// installed — a failure under `HOOKBUS_REQUIRE_EXTERNAL=1`.
    pub fn start() -> Option<NatsServer> {
        let Some(program) = find() else {
            let reason = "skipped: nats-server not installed (the fleet runs on NATS)";
            if std::env::var("HOOKBUS_REQUIRE_EXTERNAL").as_deref() == Ok("1") {
                panic!("{reason}; HOOKBUS_REQUIRE_EXTERNAL=1 makes a skip a failure");
            }
            eprintln!("{reason}");
            return None;
        };
        let dir = tempfile::tempdir().expect("a temporary directory");
        let port = free_port();
        let child = Command::new(program)
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        let server = NatsServer {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            port,
            dir,
        };
        server.wait_ready();
        Some(server)
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("nats-server did not listen on {} within 20 s", self.port);
    }

    /// The server's store directory.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// A client connection.
    pub async fn client(&self) -> async_nats::Client {
        // The port may be open a moment before the server takes clients.
        let mut tries = 0;
        loop {
            match async_nats::connect(&self.url).await {
                Ok(client) => return client,
                Err(e) if tries < 100 => {
                    tries += 1;
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("connect to the test nats-server: {e}"),
            }
        }
    }
}
