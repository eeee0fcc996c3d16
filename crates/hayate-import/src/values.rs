//! nginx values in hayate's spelling: sizes, durations, variables in
//! templates, addresses.

/// `10m` (nginx: MiB) -> `10MiB`; `0` is None (nginx: no limit).
pub fn size(s: &str) -> Result<Option<String>, String> {
    let (digits, unit) = s.split_at(s.trim_end_matches(|c: char| c.is_ascii_alphabetic()).len());
    let n: u64 = digits.parse().map_err(|_| format!("{s:?} is not a size"))?;
    if n == 0 {
        return Ok(None);
    }
    let unit = match unit.to_ascii_lowercase().as_str() {
        "" => "",
        "k" => "KiB",
        "m" => "MiB",
        "g" => "GiB",
        _ => return Err(format!("{s:?}: unknown size unit")),
    };
    Ok(Some(format!("{n}{unit}")))
}

/// nginx time (`60`, `60s`, `1m30s`, `500ms`, `1h`, `30d`) in seconds or
/// milliseconds, as hayate writes durations (`90s`, `500ms`).
pub fn duration(s: &str) -> Result<String, String> {
    let mut ms: u64 = 0;
    let mut rest = s;
    if rest.is_empty() {
        return Err("empty time".into());
    }
    while !rest.is_empty() {
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let n: u64 = rest[..end]
            .parse()
            .map_err(|_| format!("{s:?} is not a time"))?;
        rest = &rest[end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_end] {
            "ms" => 1,
            "" | "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 7 * 86_400_000,
            "M" => 30 * 86_400_000,
            "y" => 365 * 86_400_000,
            u => return Err(format!("{s:?}: unknown time unit {u:?}")),
        };
        ms += n * factor;
        rest = &rest[unit_end..];
    }
    Ok(if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    })
}

/// Seconds of an nginx time (for max-age).
pub fn seconds(s: &str) -> Result<u64, String> {
    let d = duration(s)?;
    match d.strip_suffix("ms") {
        Some(ms) => Ok(ms.parse::<u64>().unwrap_or(0) / 1000),
        None => Ok(d.trim_end_matches('s').parse().unwrap_or(0)),
    }
}

/// An nginx template (`https://$host$request_uri`) in hayate's variables;
/// an nginx variable hayate has no value for is an error naming it.
pub fn template(s: &str) -> Result<String, String> {
    // `$uri$is_args$args`: hayate keeps the query of a template without `?`.
    let s = s
        .replace("$is_args$args", "")
        .replace("?$args", "")
        .replace("?$query_string", "");
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        rest = &rest[i + 1..];
        let braced = rest.starts_with('{');
        let name_start = usize::from(braced);
        let len = rest[name_start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len() - name_start);
        let name = &rest[name_start..name_start + len];
        let consumed = name_start + len + usize::from(braced);
        rest = &rest[consumed.min(rest.len())..];
        let hayate = match name {
            n if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => n,
            "remote_addr" | "binary_remote_addr" => "client_ip",
            "host" | "http_host" | "server_name" => "host",
            "scheme" => "scheme",
            "request_uri" => "request_uri",
            "uri" | "document_uri" => "path",
            "args" | "query_string" => "query",
            "" => return Err("a $ with no variable name".into()),
            other => return Err(format!("${other} has no hayate equivalent")),
        };
        out.push('$');
        if braced {
            out.push_str(&format!("{{{hayate}}}"));
        } else {
            out.push_str(hayate);
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// An nginx upstream address (`127.0.0.1:3000`, `app:80`, `app`,
/// `unix:/run/app.sock`) as a hayate member URL.
pub fn member(addr: &str, scheme: &str) -> String {
    if let Some(path) = addr.strip_prefix("unix:") {
        return format!("unix:{}", path.trim_end_matches(':'));
    }
    let has_port = match addr.rsplit_once(':') {
        Some((h, p)) => !h.ends_with(':') && p.parse::<u16>().is_ok(),
        None => false,
    };
    let default_port = if scheme == "https" { 443 } else { 80 };
    if has_port {
        format!("{scheme}://{addr}")
    } else {
        format!("{scheme}://{addr}:{default_port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_durations_templates_members() {
        assert_eq!(size("64m").unwrap().as_deref(), Some("64MiB"));
        assert_eq!(size("512").unwrap().as_deref(), Some("512"));
        assert_eq!(size("0").unwrap(), None);
        assert!(size("5x").is_err());
        assert_eq!(duration("60").unwrap(), "60s");
        assert_eq!(duration("1m30s").unwrap(), "90s");
        assert_eq!(duration("500ms").unwrap(), "500ms");
        assert_eq!(seconds("30d").unwrap(), 2_592_000);
        assert_eq!(
            template("https://$host$request_uri").unwrap(),
            "https://$host$request_uri"
        );
        assert_eq!(template("/index.php$is_args$args").unwrap(), "/index.php");
        assert_eq!(template("/p/$1?x=${args}").unwrap(), "/p/$1?x=${query}");
        assert_eq!(template("$remote_addr").unwrap(), "$client_ip");
        assert!(template("$cookie_a").unwrap_err().contains("$cookie_a"));
        assert_eq!(member("127.0.0.1:3000", "http"), "http://127.0.0.1:3000");
        assert_eq!(member("app", "http"), "http://app:80");
        assert_eq!(member("unix:/run/a.sock", "http"), "unix:/run/a.sock");
        assert_eq!(member("[::1]:3000", "http"), "http://[::1]:3000");
    }
}
