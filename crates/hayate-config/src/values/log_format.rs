//! `access_log_format`: a preset's name or a template of `$variables`,
//! parsed once at load into pieces the access log renders without looking
//! names up again (an unknown variable is a config error, with file:line).

use std::sync::Arc;

use super::OptValue;
use crate::dollar::Token;

/// Access log line format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogFormat {
    /// NCSA combined, as nginx and Apache write it (GoAccess's COMBINED),
    /// with ` cache=STATUS` after it on routes that cache.
    Combined,
    /// NCSA common: combined without referer and user agent.
    Common,
    /// One JSON object per line, hayate's own field names.
    Json,
    /// One JSON object per line in Elastic Common Schema field names.
    Ecs,
    /// A template of text and `$variables`.
    Template(Arc<LogTemplate>),
}

/// A parsed template: text and variables in line order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogTemplate {
    /// The pieces of a line, a newline after the last.
    pub pieces: Vec<LogPiece>,
}

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogPiece {
    /// Text written as it is.
    Text(String),
    /// A variable's value, escaped.
    Var(LogVariable),
    /// `$http_NAME`: a request field's value (NAME lower-case, `_` as `-`).
    Field(String),
}

/// The variables a template may name; nginx's names where nginx has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogVariable {
    /// `$client_ip` (nginx `$remote_addr`): the client, as trusted_proxies
    /// decide it.
    ClientIp,
    /// `$remote_user`: the user name of a Basic Authorization.
    RemoteUser,
    /// `$time_local`: `27/Nov/2026:11:20:50 +0000`.
    TimeLocal,
    /// `$time_iso8601`.
    TimeIso8601,
    /// `$request`: method, target as sent, protocol.
    Request,
    /// `$request_method`.
    RequestMethod,
    /// `$request_uri`: the target as the client sent it.
    RequestUri,
    /// `$host`: the request's Host (or :authority).
    Host,
    /// `$status`.
    Status,
    /// `$body_bytes_sent`.
    BodyBytesSent,
    /// `$request_id`: the X-Request-Id the upstream was sent.
    RequestId,
    /// `$trace_id`: the W3C trace id of a traced request (`otel_endpoint`).
    TraceId,
    /// `$route`: the route's site and prefix.
    Route,
    /// `$protocol` (nginx `$server_protocol`).
    Protocol,
    /// `$tls_version` (nginx `$ssl_protocol`).
    TlsVersion,
    /// `$cache` (nginx `$upstream_cache_status`).
    Cache,
    /// `$request_time`: seconds with milliseconds.
    RequestTime,
    /// `$upstream_connect_time`.
    UpstreamConnectTime,
    /// `$upstream_header_time`.
    UpstreamHeaderTime,
}

/// Every variable by name (`$http_NAME` aside).
const VARIABLES: [(&str, LogVariable); 21] = [
    ("client_ip", LogVariable::ClientIp),
    ("remote_addr", LogVariable::ClientIp),
    ("remote_user", LogVariable::RemoteUser),
    ("time_local", LogVariable::TimeLocal),
    ("time_iso8601", LogVariable::TimeIso8601),
    ("request", LogVariable::Request),
    ("request_method", LogVariable::RequestMethod),
    ("request_uri", LogVariable::RequestUri),
    ("host", LogVariable::Host),
    ("status", LogVariable::Status),
    ("body_bytes_sent", LogVariable::BodyBytesSent),
    ("request_id", LogVariable::RequestId),
    ("trace_id", LogVariable::TraceId),
    ("route", LogVariable::Route),
    ("protocol", LogVariable::Protocol),
    ("tls_version", LogVariable::TlsVersion),
    ("cache", LogVariable::Cache),
    ("request_time", LogVariable::RequestTime),
    ("upstream_connect_time", LogVariable::UpstreamConnectTime),
    ("upstream_header_time", LogVariable::UpstreamHeaderTime),
    ("server_protocol", LogVariable::Protocol),
];

impl LogTemplate {
    /// Parses `$name` and `${name}` (`$$` is a `$`); `$http_referer` and
    /// `$http_user_agent` are request fields like any `$http_NAME`.
    pub fn parse(s: &str) -> Result<LogTemplate, String> {
        let mut pieces = Vec::new();
        for token in crate::dollar::tokens(s)? {
            pieces.push(match token {
                Token::Text(text) => LogPiece::Text(text),
                Token::Name(name) => match name.strip_prefix("http_") {
                    Some(field) if !field.is_empty() => {
                        LogPiece::Field(field.to_ascii_lowercase().replace('_', "-"))
                    }
                    _ => LogPiece::Var(
                        VARIABLES
                            .iter()
                            .find(|(n, _)| *n == name)
                            .map(|(_, v)| *v)
                            .ok_or_else(|| {
                                format!(
                                    "unknown variable ${name} (known: {}, $http_NAME)",
                                    VARIABLES.map(|(n, _)| format!("${n}")).join(", ")
                                )
                            })?,
                    ),
                },
            });
        }
        Ok(LogTemplate { pieces })
    }

    /// Whether a piece names `v`.
    pub fn uses(&self, v: LogVariable) -> bool {
        self.pieces.contains(&LogPiece::Var(v))
    }
}

impl OptValue for LogFormat {
    fn parse_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "combined" => Ok(LogFormat::Combined),
            "common" => Ok(LogFormat::Common),
            "json" => Ok(LogFormat::Json),
            "ecs" => Ok(LogFormat::Ecs),
            t if t.contains('$') => {
                if s.bytes().any(|b| b.is_ascii_control()) {
                    return Err("a template must not hold control characters (CR, LF, tab…)".into());
                }
                Ok(LogFormat::Template(Arc::new(LogTemplate::parse(s)?)))
            }
            _ => Err(format!(
                "expected combined, common, json, ecs or a template with $variables, got {s:?}"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_parse_into_text_variables_and_fields() {
        let LogFormat::Template(t) =
            LogFormat::parse_str("$client_ip [${status}] $http_X_Forwarded_Host $$ end").unwrap()
        else {
            panic!("a template")
        };
        assert_eq!(
            t.pieces,
            vec![
                LogPiece::Var(LogVariable::ClientIp),
                LogPiece::Text(" [".into()),
                LogPiece::Var(LogVariable::Status),
                LogPiece::Text("] ".into()),
                LogPiece::Field("x-forwarded-host".into()),
                LogPiece::Text(" $ end".into()),
            ]
        );
        assert_eq!(LogFormat::parse_str(" ecs ").unwrap(), LogFormat::Ecs);
        assert_eq!(LogFormat::parse_str("common").unwrap(), LogFormat::Common);
    }

    #[test]
    fn bad_templates_name_the_problem() {
        let e = LogFormat::parse_str("$client_ip $bogus").unwrap_err();
        assert!(
            e.starts_with("unknown variable $bogus (known: $client_ip"),
            "{e}"
        );
        let e = LogFormat::parse_str("$status ${status").unwrap_err();
        assert!(e.contains("without its }"), "{e}");
        let e = LogFormat::parse_str("$ $status").unwrap_err();
        assert!(e.contains("names nothing"), "{e}");
        let e = LogFormat::parse_str("$status\t$status").unwrap_err();
        assert!(e.contains("control"), "{e}");
        let e = LogFormat::parse_str("fancy").unwrap_err();
        assert!(e.starts_with("expected combined, common"), "{e}");
    }
}
