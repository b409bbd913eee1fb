//! Certificates made in the test (rcgen): a CA, serve's certificate and executors' client certificates
//! signed by it, written as PEM files where serve and its clients read them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use aiwg_client::TlsOptions;
use tokio_rustls::rustls::ClientConfig;

/// A certificate authority of the test's own.
pub struct Ca {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
    /// Its certificate's PEM file.
    pub pem: PathBuf,
}

/// A certificate signed by a [`Ca`], and its key, as PEM files.
pub struct Leaf {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Ca {
    /// A CA named `name`, its certificate written into `dir`.
    pub fn new(dir: &Path, name: &str) -> Ca {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let pem = dir.join(format!("{name}.pem"));
        std::fs::write(&pem, cert.pem()).unwrap();
        Ca { cert, key, pem }
    }

    /// A certificate for `names` (DNS names or IP addresses) valid until `not_after` (`YYYY-MM-DD`),
    /// written into `dir` as `<stem>.pem` and `<stem>.key`.
    pub fn issue(&self, dir: &Path, stem: &str, names: &[&str], not_after: &str) -> Leaf {
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        let ymd: Vec<i32> = not_after.split('-').map(|p| p.parse().unwrap()).collect();
        params.not_after = rcgen::date_time_ymd(ymd[0], ymd[1] as u8, ymd[2] as u8);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let leaf = Leaf { cert: dir.join(format!("{stem}.pem")), key: dir.join(format!("{stem}.key")) };
        // The key first: serve may look at the pair between the two writes, and a new key with the
        // old certificate fails to load (and is retried), where the other order could not be told apart.
        write_atomically(&leaf.key, &key.serialize_pem());
        write_atomically(&leaf.cert, &cert.pem());
        leaf
    }

    /// How a client that trusts this CA (and presents `leaf`, when given) meets serve: the production
    /// client's own configuration.
    pub fn client_config(&self, leaf: Option<&Leaf>) -> Arc<ClientConfig> {
        let options = TlsOptions {
            ca_cert: Some(self.pem.clone()),
            client_cert: leaf.map(|l| l.cert.clone()),
            client_key: leaf.map(|l| l.key.clone()),
        };
        options.client_config().unwrap()
    }
}

/// As a renewal tool writes: a new file renamed over the old, never a half-written one.
fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}
