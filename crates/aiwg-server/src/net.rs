//! Addresses: what URL serve will call.

/// A URL serve may call (an executor's REST endpoint, a runtime's base URL): http or https, with a host.
/// `Err` says what is wrong, naming the URL.
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
