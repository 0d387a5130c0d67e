//! A private `nats-server` with JetStream for a test (the benchmark's
//! [`LocalNatsServer`]: a free loopback port, its store in a temporary directory, killed when
//! dropped; never the system's service), or the test reported skipped without one.

use hookbus::benchmark::fleet::LocalNatsServer;

pub struct NatsServer {
    server: LocalNatsServer,
    pub url: String,
}

impl NatsServer {
    /// Starts a private server, or reports the test skipped (`None`) when `nats-server` is not
    /// installed — a failure under `HOOKBUS_REQUIRE_EXTERNAL=1`.
    pub fn start() -> Option<NatsServer> {
        match LocalNatsServer::start() {
            Ok(server) => Some(NatsServer {
                url: server.url().to_owned(),
                server,
            }),
            Err(why) => {
                let reason = format!("skipped: {why} (the fleet runs on NATS)");
                if std::env::var("HOOKBUS_REQUIRE_EXTERNAL").as_deref() == Ok("1") {
                    panic!("{reason}; HOOKBUS_REQUIRE_EXTERNAL=1 makes a skip a failure");
                }
                eprintln!("{reason}");
                None
            }
        }
    }

    /// A client connection.
    pub async fn client(&self) -> async_nats::Client {
        self.server
            .client()
            .await
            .expect("connect to the test nats-server")
    }
}
