//! The real `aiwg-serve` binary as a child process, for what only a process can show: `kill -9`,
//! signals, several replicas.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use super::Client;

/// The real `aiwg-serve` binary as a child process.
pub struct Process {
    pub child: Child,
    pub base: String,
}

impl Process {
    /// `aiwg-serve serve` on a port of its own, with its store in `data_dir`.
    pub fn start(data_dir: &std::path::Path) -> Process {
        Process::start_with(data_dir, &[])
    }

    /// The same with `env` set (`AIWG_SERVE_*` settings).
    pub fn start_with(data_dir: &std::path::Path, env: &[(&str, &str)]) -> Process {
        let mut child = Command::new(env!("CARGO_BIN_EXE_aiwg-serve"))
            .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .env("AIWG_SERVE_LOG", "info")
            .envs(env.iter().copied())
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn aiwg-serve");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.split_whitespace().find_map(|w| w.strip_prefix("addr=")) {
                    let _ = tx.send(addr.to_owned());
                }
            }
        });
        let addr = rx.recv_timeout(crate::support::WAIT).expect("aiwg-serve reports its address");
        Process { child, base: format!("http://{addr}") }
    }

    pub fn client(&self) -> Client {
        Client::new(&self.base)
    }

    pub fn ws(&self, path: &str) -> String {
        format!("{}{path}", self.base.replacen("http://", "ws://", 1))
    }

    pub fn signal(&self, name: &str) {
        let status = Command::new("kill").args([&format!("-{name}"), &self.child.id().to_string()]).status().unwrap();
        assert!(status.success());
    }

    pub fn kill9(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
