//! A private PostgreSQL server for one test: `initdb` into a temporary directory, a postmaster
//! listening on a free loopback port (its Unix socket in that directory too), password
//! authentication, stopped (immediate shutdown) when dropped. The machine's own PostgreSQL
//! service is never touched.
//!
//! The programs are looked up on `PATH`, then under `/usr/lib/postgresql/*/bin` (Debian's
//! layout, where a fresh machine has them only). PostgreSQL refuses to run as root: as root
//! the directory is handed to the `postgres` user (or `nobody`) and the server runs as it.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The superuser of the private server.
pub const USER: &str = "hookbus";

/// The programs a server needs.
const PROGRAMS: &[&str] = &["initdb", "postgres"];

/// The directory holding `initdb` and `postgres`: on `PATH`, else the newest
/// `/usr/lib/postgresql/*/bin`.
pub fn find_bin() -> Result<PathBuf, String> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    debian.sort_by_key(|d| std::cmp::Reverse(d.0));
    dirs.extend(debian.into_iter().map(|(_, dir)| dir));
    dirs.into_iter()
        .find(|dir| PROGRAMS.iter().all(|p| dir.join(p).is_file()))
        .ok_or_else(|| {
            "initdb and postgres are not on PATH nor under /usr/lib/postgresql/*/bin".to_owned()
        })
}

/// Who the server runs as: this process, or — as root, which PostgreSQL refuses — the
/// `postgres` user, else `nobody`.
pub fn server_user() -> Result<Option<(u32, u32)>, String> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    for name in ["postgres", "nobody"] {
        if let Ok(Some(user)) = nix::unistd::User::from_name(name) {
            return Ok(Some((user.uid.as_raw(), user.gid.as_raw())));
        }
    }
    Err(
        "running as root, and there is neither a `postgres` nor a `nobody` user to run \
         PostgreSQL as"
            .to_owned(),
    )
}

/// Whether a private server can be started here. When it cannot, the test reports itself
/// skipped with the reason and returns — unless `HOOKBUS_REQUIRE_EXTERNAL=1` (set by CI, which
/// installs PostgreSQL), where it fails.
pub fn postgres_available(why: &str) -> Option<PathBuf> {
    match find_bin().and_then(|bin| server_user().map(|_| bin)) {
        Ok(bin) => Some(bin),
        Err(reason) => {
            let reason = format!("skipped: {reason} ({why})");
            if std::env::var("HOOKBUS_REQUIRE_EXTERNAL").as_deref() == Ok("1") {
                panic!("{reason}; HOOKBUS_REQUIRE_EXTERNAL=1 makes a skip a failure");
            }
            eprintln!("{reason}");
            None
        }
    }
}

/// A private server; stopped when dropped.
pub struct PgServer {
    bin: PathBuf,
    /// Holds `data/`, the socket, the password file and the logs.
    dir: tempfile::TempDir,
    user: Option<(u32, u32)>,
    port: u16,
    password: String,
    postmaster: Option<Child>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

impl PgServer {
    /// Starts a server, or returns `None` (the test skipped, see [`postgres_available`]).
    pub fn start_or_skip(why: &str) -> Option<Self> {
        postgres_available(why).map(|bin| Self::start(&bin))
    }

    /// Initializes a cluster and starts its postmaster with the programs in `bin`.
    pub fn start(bin: &Path) -> Self {
        let user = server_user().expect("a user to run PostgreSQL as");
        let dir = tempfile::Builder::new()
            .prefix("hookbus-pg")
            .tempdir()
            .expect("a temporary directory");
        let password: String = (0..24).map(|_| fastrand::alphanumeric()).collect();
        std::fs::write(dir.path().join("pwfile"), format!("{password}\n")).expect("pwfile");
        if let Some((uid, gid)) = user {
            for path in [dir.path().to_owned(), dir.path().join("pwfile")] {
                std::os::unix::fs::chown(&path, Some(uid), Some(gid)).expect("chown");
            }
        }
        let mut server = Self {
            bin: bin.to_owned(),
            dir,
            user,
            port: 0,
            password,
            postmaster: None,
        };
        server.initdb();
        for _ in 0..5 {
            server.port = free_port();
            if server.spawn_postmaster() {
                return server;
            }
        }
        panic!("PostgreSQL did not start:\n{}", server.log());
    }

    /// A command running `program` from the server's directory, as the server's user.
    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(self.bin.join(program));
        command.current_dir(self.dir.path()).stdin(Stdio::null());
        if let Some((uid, gid)) = self.user {
            command.uid(uid).gid(gid);
        }
        command
    }

    fn initdb(&self) {
        let log = self.dir.path().join("initdb.log");
        let out = std::fs::File::create(&log).expect("initdb.log");
        let status = self
            .command("initdb")
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args([
                "-U",
                USER,
                "--auth=scram-sha-256",
                "--no-locale",
                "-E",
                "UTF8",
            ])
            .args(["--no-sync", "--pwfile"])
            .arg(self.dir.path().join("pwfile"))
            .stdout(out.try_clone().expect("log handle"))
            .stderr(out)
            .status()
            .expect("initdb runs");
        assert!(
            status.success(),
            "initdb failed:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// Starts the postmaster on `self.port`; whether it came up.
    fn spawn_postmaster(&mut self) -> bool {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("server.log"))
            .expect("server.log");
        if let Some((uid, gid)) = self.user {
            let _ =
                std::os::unix::fs::chown(self.dir.path().join("server.log"), Some(uid), Some(gid));
        }
        let before = self.log().len();
        let mut child = self
            .command("postgres")
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args([
                "-p",
                &self.port.to_string(),
                "-c",
                "listen_addresses=127.0.0.1",
            ])
            .arg("-c")
            .arg(format!(
                "unix_socket_directories={}",
                self.dir.path().display()
            ))
            .args(["-c", "shared_buffers=16MB", "-c", "max_connections=60"])
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("postgres runs");
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return false;
            }
            let ready = self
                .log()
                .get(before..)
                .is_some_and(|new| new.contains("ready to accept connections"));
            if ready && std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                self.postmaster = Some(child);
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The superuser's password (which no error message may show).
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The URL of database `db`, password included.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres://{USER}:{}@127.0.0.1:{}/{db}",
            self.password, self.port
        )
    }

    /// Runs `sql` (simple query protocol) in database `db`; returns the rows as text.
    pub fn sql(&self, db: &str, sql: &str) -> Vec<Vec<Option<String>>> {
        let url = self.url(db);
        let sql = sql.to_owned();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async move {
                let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .expect("connect to the private server");
                let driver = tokio::spawn(connection);
                let rows = client
                    .simple_query(&sql)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
                drop(client);
                let _ = driver.await;
                rows.into_iter()
                    .filter_map(|m| match m {
                        tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                            (0..row.len())
                                .map(|i| row.get(i).map(str::to_owned))
                                .collect(),
                        ),
                        _ => None,
                    })
                    .collect()
            })
        })
        .join()
        .expect("the query thread")
    }

    /// Creates database `name`; returns its URL.
    pub fn create_database(&self, name: &str) -> String {
        self.sql("postgres", &format!("CREATE DATABASE \"{name}\""));
        self.url(name)
    }

    /// Stops the server now (immediate shutdown: no checkpoint, clients cut off).
    pub fn stop(&mut self) {
        let Some(mut child) = self.postmaster.take() else {
            return;
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGQUIT);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Starts the stopped server again, on the same port and data.
    pub fn restart(&mut self) {
        self.stop();
        assert!(
            self.spawn_postmaster(),
            "PostgreSQL did not start again:\n{}",
            self.log()
        );
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
    }
}
