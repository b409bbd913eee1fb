//! Executors' client certificates (`server.tls_client_ca`): a second factor beside the token. The edge
//! (`serve::accept`) puts what vouches for a connection's peer on each of its requests: the certificate
//! a TLS connection presented (its chain to the configured CA was checked in the handshake), or, for a
//! socket serve opened itself (`serve::dial`), that serve chose the peer. The executor's routes ask here
//! whether that names the executor.

use std::sync::Arc;

use tokio_rustls::rustls::client::verify_server_name;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::server::ParsedCertificate;

use crate::app::App;
use crate::error::Error;

/// What vouches for the peer of a request's connection, beside the token it carries.
#[derive(Clone, Debug)]
pub enum Vouched {
    /// The client certificate it presented, chained to `server.tls_client_ca`.
    Certificate(Arc<CertificateDer<'static>>),
    /// Serve opened the socket, to the endpoint the executor registered (with its certificate, when
    /// one is required).
    Dialled,
}

/// `Ok` when serve asks executors for no certificate, when serve dialled the socket, or when the
/// certificate names the executor `name`: a DNS name of its subjectAltName equal to it (a certificate
/// for one executor does not serve another).
pub(crate) fn vouches(app: &App, vouched: Option<&Vouched>, name: &str) -> Result<(), Error> {
    if app.config.server.tls_client_ca.as_os_str().is_empty() {
        return Ok(());
    }
    let der = match vouched {
        Some(Vouched::Dialled) => return Ok(()),
        Some(Vouched::Certificate(der)) => der,
        None => {
            return Err(Error::Unauthorized(
                "this serve requires executors to present a client certificate from its CA (server.tls_client_ca)",
            ))
        }
    };
    let named = ServerName::try_from(name).ok().zip(ParsedCertificate::try_from(der.as_ref()).ok());
    match named {
        Some((name, parsed)) if verify_server_name(&parsed, &name).is_ok() => Ok(()),
        _ => Err(Error::Unauthorized(
            "the client certificate does not name this executor (a subjectAltName DNS name equal to its name)",
        )),
    }
}
