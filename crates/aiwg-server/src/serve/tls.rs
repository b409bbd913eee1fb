//! TLS on serve's own listener (rustls, no OpenSSL): `server.tls_cert` and `server.tls_key` (PEM, the
//! certificate's chain allowed), and optionally `server.tls_client_ca`, the CA whose client
//! certificates executors present as a second factor beside their token (`http::peer`).
//!
//! The files are read again on [`Reload::reload`] (SIGHUP) and when they change (their length or
//! modification time, looked at every `server.tls_watch_ms`): a renewal by certbot or cert-manager,
//! which replace the files, is picked up without a restart. Each connection takes the configuration
//! current at its handshake, so a reload never touches an open connection or socket. Files that do not
//! load are logged and the previous certificate stays in use: a half-written renewal costs nothing. So
//! does a certificate that has expired (every client would refuse it); at start one is served, with a
//! warning, since there is no other. The certificate's expiry is kept in `Metrics::tls_not_after` for
//! `/healthz` and `/metrics`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, TimeZone, Utc};
use tokio::sync::{watch, Notify};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::ServerConfig;
use crate::metrics::Metrics;

/// The TLS side of the listener: what a handshake uses now, and where it comes from.
pub(super) struct Tls {
    files: Files,
    current: RwLock<Current>,
    metrics: Arc<Metrics>,
}

/// The PEM files, as configured.
struct Files {
    cert: PathBuf,
    key: PathBuf,
    client_ca: Option<PathBuf>,
}

struct Current {
    acceptor: TlsAcceptor,
    /// The files' length and modification time when they were read: a change reloads them.
    stamp: Vec<Option<(u64, SystemTime)>>,
}

/// Asks a serve to read its certificate files again (what SIGHUP does).
#[derive(Clone, Default)]
pub struct Reload(Arc<Notify>);

impl Reload {
    pub fn reload(&self) {
        self.0.notify_one();
    }
}

impl Tls {
    /// Loads the configured files; `None` when serve speaks plain HTTP.
    pub(super) fn from_config(server: &ServerConfig, metrics: Arc<Metrics>) -> Result<Option<Arc<Tls>>, String> {
        if server.tls_cert.as_os_str().is_empty() {
            return Ok(None);
        }
        let files = Files {
            cert: server.tls_cert.clone(),
            key: server.tls_key.clone(),
            client_ca: Some(server.tls_client_ca.clone()).filter(|p| !p.as_os_str().is_empty()),
        };
        let (current, not_after) = files.load()?;
        metrics.tls_not_after.set(not_after.timestamp());
        if not_after <= Utc::now() {
            tracing::warn!(cert = %files.cert.display(), not_after = %aiwg_contract::clock::format(not_after), "the TLS certificate has expired: clients refuse it until it is renewed (a renewal is read without a restart)");
        }
        tracing::info!(cert = %files.cert.display(), not_after = %aiwg_contract::clock::format(not_after), client_certificates = files.client_ca.is_some(), "TLS on");
        Ok(Some(Arc::new(Tls { files, current: RwLock::new(current), metrics })))
    }

    /// What a new connection's handshake uses.
    pub(super) fn acceptor(&self) -> TlsAcceptor {
        self.current.read().expect("tls lock").acceptor.clone()
    }

    /// Reads the files again when `forced` or when they changed; a failure, or a certificate that has
    /// expired, leaves the current ones.
    fn reload(&self, forced: bool) {
        if !forced && self.current.read().expect("tls lock").stamp == self.files.stamp() {
            return;
        }
        let loaded = self.files.load().and_then(|(current, not_after)| match not_after > Utc::now() {
            true => Ok((current, not_after)),
            false => Err(format!(
                "server.tls_cert {}: the certificate expired at {}",
                self.files.cert.display(),
                aiwg_contract::clock::format(not_after)
            )),
        });
        match loaded {
            Ok((current, not_after)) => {
                *self.current.write().expect("tls lock") = current;
                self.metrics.tls_not_after.set(not_after.timestamp());
                tracing::info!(cert = %self.files.cert.display(), not_after = %aiwg_contract::clock::format(not_after), "TLS certificate reloaded");
            }
            Err(e) => {
                // Remembered as seen, so that a broken file is reported once, not at every look.
                self.current.write().expect("tls lock").stamp = self.files.stamp();
                tracing::warn!(error = %e, "TLS certificate not reloaded; the previous one stays in use");
            }
        }
    }

    /// Reloads on `reload`, and when the files change (looked at every `every`; never when zero), until
    /// `stop`.
    pub(super) async fn watch(self: Arc<Self>, reload: Reload, every: Duration, mut stop: watch::Receiver<bool>) {
        let mut tick = (!every.is_zero()).then(|| tokio::time::interval(every));
        loop {
            let changed = async {
                match &mut tick {
                    Some(tick) => {
                        tick.tick().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                () = reload.0.notified() => self.reload(true),
                () = changed => self.reload(false),
            }
        }
    }
}

impl Files {
    fn stamp(&self) -> Vec<Option<(u64, SystemTime)>> {
        let paths = [Some(&self.cert), Some(&self.key), self.client_ca.as_ref()];
        paths
            .into_iter()
            .flatten()
            .map(|p| std::fs::metadata(p).ok().and_then(|m| Some((m.len(), m.modified().ok()?))))
            .collect()
    }

    /// The rustls configuration from the files, and when the certificate expires.
    fn load(&self) -> Result<(Current, DateTime<Utc>), String> {
        // The stamp before the read: a change during it is seen at the next look.
        let stamp = self.stamp();
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(&self.cert)?)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("server.tls_cert {}: {e}", self.cert.display()))?;
        let Some(leaf) = chain.first() else {
            return Err(format!("server.tls_cert {} holds no certificate", self.cert.display()));
        };
        let not_after = not_after(leaf).ok_or_else(|| {
            format!("server.tls_cert {}: cannot read the certificate's validity", self.cert.display())
        })?;
        let key = PrivateKeyDer::from_pem_slice(&read(&self.key)?)
            .map_err(|e| format!("server.tls_key {}: no private key ({e})", self.key.display()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(path) => {
                let mut roots = rustls::RootCertStore::empty();
                for ca in CertificateDer::pem_slice_iter(&read(path)?) {
                    let ca = ca.map_err(|e| format!("server.tls_client_ca {}: {e}", path.display()))?;
                    roots.add(ca).map_err(|e| format!("server.tls_client_ca {}: {e}", path.display()))?;
                }
                // Operators, dashboards and probes present no certificate; an executor must (checked
                // where it authenticates), and one presented must chain to this CA or the handshake fails.
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| format!("server.tls_client_ca {}: {e}", path.display()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(|e| format!("server.tls_cert and server.tls_key do not make a pair: {e}"))?;
        // Serve speaks HTTP/1.1 only (WebSocket upgrades are HTTP/1.1).
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok((Current { acceptor: TlsAcceptor::from(Arc::new(config)), stamp }, not_after))
    }
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// The end of a certificate's validity: `tbsCertificate.validity.notAfter` of RFC 5280, read from the
/// DER directly. One field at a fixed place in the structure; a full X.509 parser (x509-parser and its
/// ASN.1 stack) would be the largest dependency serve has, for this.
fn not_after(cert: &[u8]) -> Option<DateTime<Utc>> {
    let (certificate, _) = der(cert, Some(0x30))?;
    let (tbs, _) = der(certificate, Some(0x30))?;
    let mut fields = tbs;
    if fields.first() == Some(&0xa0) {
        fields = der(fields, None)?.1; // version
    }
    for _serial_signature_issuer in 0..3 {
        fields = der(fields, None)?.1;
    }
    let (validity, _) = der(fields, Some(0x30))?;
    let not_after = der(validity, None)?.1;
    let tag = *not_after.first()?;
    let (time, _) = der(not_after, Some(tag))?;
    let time = std::str::from_utf8(time).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tag {
        // UTCTime: two-digit years, 1950 to 2049 (RFC 5280, 4.1.2.5.1).
        0x17 => {
            let yy: i32 = time.get(..2)?.parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, time.get(2..)?)
        }
        0x18 => (time.get(..4)?.parse().ok()?, time.get(4..)?),
        _ => return None,
    };
    let part = |i: usize| -> Option<u32> { rest.get(i..i + 2)?.parse().ok() };
    if rest.len() != 10 {
        return None;
    }
    Utc.with_ymd_and_hms(year, part(0)?, part(2)?, part(4)?, part(6)?, part(8)?).single()
}

/// One DER element at the start of `input` (of tag `tag`, when given): its content and what follows it.
fn der(input: &[u8], tag: Option<u8>) -> Option<(&[u8], &[u8])> {
    let (&found, rest) = input.split_first()?;
    if tag.is_some_and(|t| t != found) {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        (rest[..n].iter().fold(0usize, |len, b| (len << 8) | *b as usize), &rest[n..])
    };
    (rest.len() >= len).then(|| rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Datelike;

    fn cert_expiring(not_after: DateTime<Utc>) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        let t = not_after;
        params.not_after = rcgen::date_time_ymd(t.year_ce().1 as i32, t.month() as u8, t.day() as u8);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    /// Both encodings of a time: UTCTime up to 2049, GeneralizedTime from 2050 (as RFC 5280 says and
    /// rcgen writes them).
    #[test]
    fn a_certificates_expiry_is_read_in_both_time_encodings() {
        for day in ["2027-03-01T00:00:00Z", "2049-12-31T00:00:00Z", "2051-06-15T00:00:00Z"] {
            let when: DateTime<Utc> = day.parse().unwrap();
            assert_eq!(not_after(&cert_expiring(when)), Some(when), "{day}");
        }
    }

    #[test]
    fn what_is_not_a_certificate_has_no_expiry() {
        let cert = cert_expiring("2030-01-01T00:00:00Z".parse().unwrap());
        for broken in
            [&b""[..], &b"\x30"[..], &b"\x30\x84\xff\xff\xff\xff"[..], &cert[..cert.len() / 2], &b"\x04\x00"[..]]
        {
            assert_eq!(not_after(broken), None, "{broken:?}");
        }
    }
}
