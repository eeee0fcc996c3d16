//! The Caddyfile's global options block: how each option the table
//! carries is carried over, the functions `caddy_table::GLOBAL_ROWS` names.

use crate::caddy_apply::{block, duration_global, trusted};
use crate::caddy_translate::{Applied, Caddy};
use crate::caddy_values as values;
use crate::hayate_toml::Value;
use crate::nginx_parse::Directive;
use crate::report::Kind;

/// `email <address>`.
pub fn email(t: &mut Caddy, d: &Directive) -> Applied {
    t.global("acme_email", Value::Str(d.arg(0).into()))?;
    Ok(None)
}

/// A global option that is one string setting.
pub fn global_str(t: &mut Caddy, key: &str, d: &Directive) -> Applied {
    t.global(key, Value::Str(d.arg(0).into()))?;
    Ok(None)
}

/// A global option that is one duration setting.
pub fn global_duration(t: &mut Caddy, key: &str, d: &Directive) -> Applied {
    duration_global(t, key, d)?;
    Ok(None)
}

/// `http_port` and `https_port`.
pub fn port(t: &mut Caddy, d: &Directive) -> Applied {
    let port: u16 = d.arg(0).parse().map_err(|_| format!("port {}", d.arg(0)))?;
    match d.name.as_str() {
        "http_port" => t.http_port = port,
        _ => t.https_port = port,
    }
    Ok(None)
}

/// `auto_https off|disable_redirects|disable_certs|ignore_loaded_certs`.
pub fn auto_https(t: &mut Caddy, d: &Directive) -> Applied {
    match d.arg(0) {
        "off" => {
            t.auto_certs = false;
            t.auto_redirects = false;
        }
        "disable_redirects" => t.auto_redirects = false,
        "disable_certs" => t.auto_certs = false,
        "ignore_loaded_certs" | "prefer_wildcard" => {}
        other => return Err(format!("auto_https {other}")),
    }
    Ok(None)
}

/// `local_certs`.
pub fn local_certs(t: &mut Caddy, _: &Directive) -> Applied {
    t.local_certs = true;
    Ok(None)
}

/// `debug`.
pub fn debug(t: &mut Caddy, _: &Directive) -> Applied {
    t.global("log_level", Value::Str("debug".into()))?;
    Ok(None)
}

/// `on_demand_tls { ask <url> }`.
pub fn on_demand_tls(t: &mut Caddy, d: &Directive) -> Applied {
    for sub in block(d) {
        match sub.name.as_str() {
            "ask" => t.global("tls_on_demand_ask", Value::Str(sub.arg(0).into()))?,
            _ => t.note(
                sub,
                Kind::Differs,
                "hayate limits orders with tls_on_demand_rate (10 a minute)",
            ),
        }
    }
    Ok(None)
}

/// `servers [<listener>] { ... }`.
pub fn servers(t: &mut Caddy, d: &Directive) -> Applied {
    for sub in block(d) {
        let r: Result<(), String> = match sub.name.as_str() {
            "trusted_proxies" => trusted(t, &sub.args),
            "trusted_proxies_strict" | "metrics" | "log_credentials" | "strict_sni_host" => Ok(()),
            "protocols" => {
                t.no_http3 = !sub.args.iter().any(|p| p == "h3");
                if !sub.args.iter().any(|p| p == "h2") {
                    t.global("http2", Value::Bool(false))?;
                }
                Ok(())
            }
            "max_header_size" => {
                values::size(sub.arg(0)).and_then(|s| t.global("max_header_bytes", Value::Str(s)))
            }
            "timeouts" => {
                for o in block(sub) {
                    let key = match o.name.as_str() {
                        "read_header" => "header_timeout",
                        "read_body" => "body_timeout",
                        "write" => "send_timeout",
                        "idle" => "keepalive_timeout",
                        other => {
                            t.note(o, Kind::NotCarried, format!("{other} is not carried"));
                            continue;
                        }
                    };
                    if let Err(e) = duration_global(t, key, o) {
                        t.note(o, Kind::NotCarried, e);
                    }
                }
                Ok(())
            }
            "client_ip_headers" => match &sub.args[..] {
                [h] if h.eq_ignore_ascii_case("x-forwarded-for") => Ok(()),
                _ => Err("client_ip_headers: hayate reads X-Forwarded-For (then Forwarded)".into()),
            },
            "listener_wrappers" => {
                if block(sub).iter().any(|w| w.name == "proxy_protocol") {
                    Err("proxy_protocol: add proxy_protocol to the listen addresses".into())
                } else {
                    Ok(())
                }
            }
            other => Err(format!("{other} is not carried")),
        };
        if let Err(e) = r {
            t.note(sub, Kind::NotCarried, e);
        }
    }
    Ok(None)
}

/// The global `log`: hayate's own log.
pub fn global_log(t: &mut Caddy, d: &Directive) -> Applied {
    for sub in block(d) {
        match (sub.name.as_str(), sub.arg(0)) {
            ("output", "file") => t.global("error_log", Value::Str(sub.arg(1).into()))?,
            ("output", _) => {}
            ("level", level) => {
                let level = match level.to_ascii_lowercase().as_str() {
                    "debug" => "debug",
                    "info" => "info",
                    "warn" => "warn",
                    _ => "error",
                };
                t.global("log_level", Value::Str(level.into()))?;
            }
            _ => {}
        }
    }
    Ok(None)
}
