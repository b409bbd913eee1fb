//! Addresses: what URL serve will call.

/// A URL serve may call (an executor's REST endpoint, a runtime's base URL, a webhook): http or https,
/// with a host. `Err` says what is wrong, naming the URL.
pub(crate) fn http_url(s: &str) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(s).map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("{s:?}: only http:// and https:// endpoints are called"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{s:?} names no host"));
    }
    Ok(url)
}

/// A URL of any scheme whose host is one of the `allowed` hosts, when the list names any (`setting`
/// names the list in the refusal); anything when it names none.
pub(crate) fn allowed_host(s: &str, allowed: &[String], setting: &str) -> Result<(), String> {
    if allowed.is_empty() {
        return Ok(());
    }
    let url = reqwest::Url::parse(s).map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    let host = url.host_str().filter(|h| !h.is_empty()).ok_or_else(|| format!("{s:?} names no host"))?;
    match listed(host, allowed) {
        true => Ok(()),
        false => Err(format!("host {host} is not in {setting}")),
    }
}

/// Whether `host` (a URL's, IPv6 in brackets) is one of `allowed`.
fn listed(host: &str, allowed: &[String]) -> bool {
    allowed.iter().any(|a| a.eq_ignore_ascii_case(host.trim_matches(['[', ']'])))
}

/// [`http_url`], on one of the `allowed` hosts when the list names any (`setting` names the list in
/// the refusal).
pub(crate) fn allowed_url(s: &str, allowed: &[String], setting: &str) -> Result<reqwest::Url, String> {
    let url = http_url(s)?;
    let host = url.host_str().unwrap_or_default();
    if !allowed.is_empty() && !listed(host, allowed) {
        return Err(format!("host {host} is not in {setting}"));
    }
    Ok(url)
}

/// A webhook's target: [`http_url`] on one of the `allowed` hosts when the list names any (whatever
/// address it has: the operator chose it). With none listed, neither an address inside a network
/// (`aiwg_domain::net::is_internal`: loopback, private, link-local, ...) nor a name of this host
/// (`localhost`): a subscription must not turn serve into a way to reach its own network. Every
/// spelling of an address is read as the URL parser reads it (`2130706433`, `0x7f.1`, `0177.0.0.1` and
/// `127.1` are all 127.0.0.1; `[::ffff:127.0.0.1]` is judged as 127.0.0.1). A name's addresses are
/// judged where it is resolved ([`PublicResolver`]).
pub(crate) fn webhook_url(s: &str, allowed: &[String]) -> Result<reqwest::Url, String> {
    let setting = "notify.webhook_hosts";
    let url = allowed_url(s, allowed, setting)?;
    if !allowed.is_empty() {
        return Ok(url);
    }
    let host = url.host_str().unwrap_or_default().trim_matches(['[', ']']);
    let internal = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => aiwg_domain::net::is_internal(ip),
        Err(_) => aiwg_domain::net::is_local_name(host),
    };
    match internal {
        true => {
            Err(format!("host {host} is inside the network (loopback, private or link-local): list it in {setting}"))
        }
        false => Ok(url),
    }
}

/// Resolves names for webhook deliveries, keeping only public addresses (with an empty
/// `notify.webhook_hosts`): the check is made on the addresses the connection then uses, so a name
/// that resolves elsewhere at delivery than when it was added (DNS rebinding) reaches nothing inside.
pub(crate) struct PublicResolver;

impl reqwest::dns::Resolve for PublicResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let all: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let public: Vec<std::net::SocketAddr> =
                all.iter().copied().filter(|a| !aiwg_domain::net::is_internal(a.ip())).collect();
            if public.is_empty() && !all.is_empty() {
                let why =
                    format!("{host} resolves only to addresses inside the network: list it in notify.webhook_hosts");
                return Err(why.into());
            }
            Ok(Box::new(public.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Whether `host` (a name) resolves to an address inside the network, when it resolves within a
/// second: a subscription is refused at once rather than failing at each delivery. A name that does not
/// resolve now is judged at delivery.
pub(crate) async fn resolves_inside(host: &str) -> Option<std::net::IpAddr> {
    let lookup = tokio::net::lookup_host((host, 0));
    let addrs = tokio::time::timeout(std::time::Duration::from_secs(1), lookup).await.ok()?.ok()?;
    addrs.map(|a| a.ip()).find(|ip| aiwg_domain::net::is_internal(*ip))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::dns::Resolve;

    /// What the name rule does not catch is caught where the name is resolved for a delivery: a name
    /// whose addresses are all inside resolves to nothing serve connects to.
    #[tokio::test]
    async fn delivery_names_resolve_to_public_addresses_only() {
        let resolved = PublicResolver.resolve("localhost".parse().unwrap()).await;
        let why = resolved.err().expect("localhost resolves only inside").to_string();
        assert!(why.contains("notify.webhook_hosts"), "{why}");
        assert_eq!(resolves_inside("localhost").await.map(|ip| ip.is_loopback()), Some(true));
        let public: Vec<_> = PublicResolver.resolve("8.8.8.8".parse().unwrap()).await.unwrap().collect();
        assert_eq!(public, ["8.8.8.8:0".parse::<std::net::SocketAddr>().unwrap()]);
    }

    #[test]
    fn a_listed_host_is_called_whatever_its_address_and_others_only_outside() {
        assert!(webhook_url("http://127.0.0.1:9/", &["127.0.0.1".into()]).is_ok());
        assert!(webhook_url("http://10.0.0.1/", &["127.0.0.1".into()]).unwrap_err().contains("not in"));
        assert!(webhook_url("http://127.0.0.1:9/", &[]).unwrap_err().contains("inside the network"));
        assert!(webhook_url("https://hooks.slack.com/services/x", &[]).is_ok());
    }
}
