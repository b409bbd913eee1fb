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

