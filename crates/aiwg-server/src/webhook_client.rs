//! serve's HTTP client to webhook receivers: each attempt POSTed with the Standard Webhooks headers
//! (`webhook-id`, `webhook-timestamp`, `webhook-signature`), so that a receiver checks it with its
//! usual verifier, and no redirect followed.
//!
//! Signed afresh at each attempt: a receiver refuses a timestamp too far from its clock (five minutes
//! is the specification's advice), and a retry an hour later must still pass. The `webhook-id` and the
//! body stay those of the delivery, so that a receiver recognises a message it has seen.
//!
//! Redirects: none is followed, to another host or the same. A redirect to another host would send the
//! notification (and its signature) where the allow-list did not say; one to the same host would turn
//! the POST into a GET for 301 and 302. The receiver's URL is what the operator configured; a 3xx is an
//! attempt that failed, and the delivery log says where it pointed.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

use aiwg_domain::webhooks::{shortened, Attempt, Format, Topic, SECRET_PREFIX};

/// Characters of a receiver's answer kept for the delivery log: its reason, not its page. An admin reads
/// the log, and a receiver inside the network once answered with 300 bytes of its own.
const ANSWER_KEPT: usize = 64;
/// Characters of a transport error's cause kept (the resolver's or the system's words, not a receiver's).
const CAUSE_KEPT: usize = 300;

/// A new secret: `whsec_` and the base64 of 32 random bytes.
pub fn new_secret() -> String {
    let mut key = [0u8; 32];
    rand::rng().fill_bytes(&mut key);
    format!("{SECRET_PREFIX}{}", STANDARD.encode(key))
}

/// What a secret must be, for refusals.
pub(crate) const SECRET_FORM: &str = "the secret must be whsec_ and the base64 of 24 to 64 bytes";

/// The key of a `whsec_` secret, if it is one (a key of 24 to 64 bytes, as the specification asks).
pub(crate) fn secret_key(secret: &str) -> Option<Vec<u8>> {
    let key = STANDARD.decode(secret.strip_prefix(SECRET_PREFIX)?).ok()?;
    (24..=64).contains(&key.len()).then_some(key)
}

/// `v1,` and the base64 of the HMAC-SHA256 of `id.timestamp.body` under the secret's key.
pub(crate) fn signature(key: &[u8], id: &str, timestamp: i64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body.as_bytes());
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// What a subscription asks for, checked: a URL serve may POST to (http(s), on `allowed` hosts when
/// any is listed, else not inside the network: `net::webhook_url`), topics it knows (at least one, each
/// once) and a format.
pub(crate) fn check(
    url: &str,
    events: &[String],
    format: &str,
    allowed: &[String],
) -> Result<(Vec<Topic>, Format), String> {
    crate::net::webhook_url(url, allowed)?;
    if events.is_empty() {
        return Err(format!("name at least one of the events: {}", known_topics()));
    }
    let mut topics = Vec::new();
    for e in events {
        let topic = Topic::parse(e).ok_or_else(|| format!("event {e:?} is not one of {}", known_topics()))?;
        if !topics.contains(&topic) {
            topics.push(topic);
        }
    }
    let format = Format::parse(format).ok_or_else(|| format!("format {format:?} is not one of standard, slack"))?;
    Ok((topics, format))
}

fn known_topics() -> String {
    Topic::ALL.map(Topic::as_str).join(", ")
}

pub(crate) struct Sender {
    client: reqwest::Client,
    /// `notify.webhook_hosts`: each attempt's URL is judged again (a subscription stored before a rule
    /// or a list changed).
    allowed: Vec<String>,
}

impl Sender {
    /// `timeout` bounds each attempt, from connecting to the answer's end. With no host `allowed`, names
    /// resolve to public addresses only (`net::PublicResolver`).
    pub(crate) fn new(timeout: Duration, allowed: &[String]) -> Sender {
        let mut client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .user_agent(concat!("aiwg-serve/", env!("CARGO_PKG_VERSION"), " (webhooks)"));
        if allowed.is_empty() {
            client = client.dns_resolver(std::sync::Arc::new(crate::net::PublicResolver));
        }
        Sender { client: client.build().expect("a client with rustls' built-in roots"), allowed: allowed.to_vec() }
    }

    /// One attempt of a delivery: `Delivered` on a 2xx, else why not. Errors never name the URL,
    /// which may itself be a credential (a Slack webhook's is).
    pub(crate) async fn send(&self, url: &str, key: &[u8], id: &str, body: &str) -> Attempt {
        if let Err(why) = crate::net::webhook_url(url, &self.allowed) {
            // The refusal names the host, never the whole URL.
            return Attempt::Failed { status: None, error: format!("not sent: {why}") };
        }
        let timestamp = chrono::Utc::now().timestamp();
        let request = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature(key, id, timestamp, body))
            .body(body.to_owned());
        let mut response = match request.send().await {
            Ok(response) => response,
            Err(e) => return Attempt::Failed { status: None, error: transport_error(&e) },
        };
        let status = response.status();
        if status.is_success() {
            return Attempt::Delivered(status.as_u16());
        }
        let error = if status.is_redirection() {
            let to = response.headers().get("location").and_then(|l| l.to_str().ok()).unwrap_or("nowhere");
            format!("HTTP {status}: redirected to {}; webhooks follow no redirect", shortened(&origin(to), ANSWER_KEPT))
        } else {
            // The start of the answer (its first chunk), for the log: a receiver's reason, not its page.
            let answer = match tokio::time::timeout(Duration::from_secs(1), response.chunk()).await {
                Ok(Ok(Some(chunk))) => String::from_utf8_lossy(&chunk).into_owned(),
                _ => String::new(),
            };
            format!("HTTP {status}: {}", shortened(answer.trim(), ANSWER_KEPT))
        };
        Attempt::Failed { status: Some(status.as_u16()), error }
    }
}

fn transport_error(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "failed"
    };
    // The cause chain without the URL (reqwest's own message names it).
    let mut why = String::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        why = s.to_string();
        source = s.source();
    }
    if why.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}: {}", shortened(&why, CAUSE_KEPT))
    }
}

/// Where a redirect points, without its path and query (which may carry what the receiver's network
/// holds): its scheme, host and port, or the location as given when it is not an absolute URL.
fn origin(location: &str) -> String {
    match reqwest::Url::parse(location) {
        Ok(url) => url.origin().ascii_serialization(),
        Err(_) => location.split(['?', '#']).next().unwrap_or_default().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Standard Webhooks specification's own example (its README): this secret, id, timestamp and
    /// body sign to this signature, as every official library computes it.
    #[test]
    fn signs_as_the_specification_s_example() {
        let key = secret_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = r#"{"test": 2432232314}"#;
        assert_eq!(
            signature(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn secrets_are_random_and_of_the_specified_form() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert_eq!(secret_key(&a).map(|k| k.len()), Some(32));
        for bad in ["", "whsec_", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_!!!", "whsec_AAAA"] {
            assert_eq!(secret_key(bad), None, "{bad}");
        }
    }
}
