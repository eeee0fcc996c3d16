//! CLI flags from the option table: every option becomes `--key-name VALUE`
//! with its `HAYATE_KEY_NAME` environment variable.

use clap::{Arg, ArgAction, ArgMatches, Command};

use crate::table::{OptDef, GLOBAL_OPTIONS, ROUTE_OPTIONS};
use crate::{ConfigError, Overrides};

/// Adds one argument per option to `cmd`.
pub fn add_option_args(mut cmd: Command) -> Command {
    for o in GLOBAL_OPTIONS.iter().chain(ROUTE_OPTIONS) {
        cmd = cmd.arg(option_arg(o));
    }
    cmd
}

fn option_arg(o: &OptDef) -> Arg {
    let help = match o.default {
        Some(d) => format!("{} [default: {d}]", o.help),
        None => o.help.to_string(),
    };
    let mut arg = Arg::new(o.key)
        .help_heading(heading(o.key))
        .long(o.flag_name())
        .value_name(o.value_name)
        .env(o.env_name())
        .help(help)
        .action(if o.repeated || o.key == "root" {
            ArgAction::Append
        } else {
            ArgAction::Set
        });
    if o.flag {
        // `--x` and `--x=false` here; `--x false` is joined into
        // `--x=false` before clap sees it ([`join_bool_values`]), so that
        // clap never takes a DIR after `--listing` for its value.
        arg = arg
            .num_args(0..=1)
            .default_missing_value("true")
            .require_equals(true);
    }
    arg
}

/// The words a boolean option's value may be (`bool`'s `parse_str`).
const BOOL_WORDS: &[&str] = &["true", "false", "on", "off", "yes", "no", "1", "0"];

/// Rewrites `--x WORD` into `--x=WORD` for every boolean option `x` when
/// WORD is one of true/false/on/off/yes/no/1/0 (any case); any other word
/// after `--x` stays an argument of its own (`hayate --listing ./public`
/// serves ./public with listings). Clap alone cannot decide this: with an
/// optional value it takes whatever word follows. So a directory named
/// `true` is given as `./true`. Nothing after `--` (the app's command) is
/// touched.
pub fn join_bool_values<I>(args: I) -> Vec<std::ffi::OsString>
where
    I: IntoIterator,
    I::Item: Into<std::ffi::OsString>,
{
    let bool_flags: Vec<String> = GLOBAL_OPTIONS
        .iter()
        .chain(ROUTE_OPTIONS)
        .filter(|o| o.flag)
        .map(|o| format!("--{}", o.flag_name()))
        .collect();
    let mut out: Vec<std::ffi::OsString> = Vec::new();
    let mut args = args.into_iter().map(Into::into).peekable();
    while let Some(arg) = args.next() {
        if arg == "--" {
            out.push(arg);
            out.extend(args);
            break;
        }
        let is_bool_flag = arg
            .to_str()
            .is_some_and(|a| bool_flags.iter().any(|f| f == a));
        let value = args
            .peek()
            .and_then(|v| v.to_str())
            .filter(|v| BOOL_WORDS.contains(&v.to_ascii_lowercase().as_str()));
        match value {
            Some(value) if is_bool_flag => {
                let mut joined = arg;
                joined.push("=");
                joined.push(value);
                out.push(joined);
                args.next();
            }
            _ => out.push(arg),
        }
    }
    out
}

/// The `--help` section of an option, by what it is about.
pub fn heading(key: &str) -> &'static str {
    const LIMITS: &[&str] = &[
        "grace_period",
        "max_connections",
        "header_timeout",
        "keepalive_timeout",
        "body_timeout",
        "send_timeout",
        "http2_goaway_timeout",
        "max_request_line",
        "max_header_bytes",
        "max_headers",
        "max_body_size",
    ];
    const LISTEN: &[&str] = &[
        "listen",
        "http2",
        "http3",
        "http3_early_data",
        "http3_gso",
        "http3_retry_above",
        "https_redirect",
        "admin",
    ];
    const PROCESS: &[&str] = &["workers", "user", "group", "control"];
    const LOGS: &[&str] = &[
        "access_log",
        "access_log_format",
        "access_log_size",
        "access_log_age",
        "access_log_keep",
        "slow_request",
        "error_log",
        "log_level",
    ];
    let starts = |p: &str| key == p.trim_end_matches('_') || key.starts_with(p);
    match key {
        k if LISTEN.contains(&k) => "Listen",
        k if PROCESS.contains(&k) => "Process",
        k if LIMITS.contains(&k) => "Limits and timeouts",
        k if LOGS.contains(&k) => "Logs",
        "hsts" | "state_dir" => "TLS",
        "trusted_proxies" | "allow" | "deny" => "Site policy",
        _ if starts("otel_") => "Tracing",
        _ if starts("basic_auth")
            || starts("rate_limit")
            || starts("conn_limit")
            || starts("forward_auth") =>
        {
            "Site policy"
        }
        "response_headers" | "request_headers" | "security_headers" => "Headers",
        "error_pages" | "intercept_errors" => "Headers",
        "internal" | "x_sendfile" | "grpc_web" => "Proxy",
        _ if starts("cors_") => "Headers",
        // The Cache-Control header of files, not the response cache.
        "cache_control" => "Files",
        _ if starts("tls_") || starts("acme_") => "TLS",
        _ if starts("proxy_") => "Proxy",
        _ if starts("fastcgi_") => "FastCGI (PHP)",
        _ if starts("cache_") => "Response cache",
        _ if starts("shared_") => "Response cache",
        _ if starts("compress_") || key == "precompressed" => "Compression",
        _ if starts("app_") => "App",
        _ => "Files",
    }
}

/// Reads the option values given on the CLI or in the environment.
pub fn overrides_from(matches: &ArgMatches) -> Result<Overrides, ConfigError> {
    let mut o = Overrides::default();
    for def in GLOBAL_OPTIONS.iter().chain(ROUTE_OPTIONS) {
        let Some(values) = matches.get_many::<String>(def.key) else {
            continue;
        };
        let mut values: Vec<String> = values.cloned().collect();
        if def.key == "root" {
            // `--root PREFIX=DIR` (repeatable) serves PREFIX from DIR: a
            // route of its own (`without_file`); the last plain DIR is `/`'s.
            let (prefixed, plain): (Vec<_>, Vec<_>) =
                values.into_iter().partition(|v| prefixed_root(v).is_some());
            for v in &prefixed {
                let (prefix, dir) = prefixed_root(v).expect("partitioned");
                o.roots.retain(|(p, _)| *p != prefix);
                o.roots.push((prefix, dir));
            }
            if plain.is_empty() {
                continue;
            }
            values = plain;
        }
        let set = o.global.set_strs(def.key, &values).and_then(|known| {
            if known {
                Ok(true)
            } else {
                o.route.set_strs(def.key, &values)
            }
        });
        if let Err(message) = set {
            let key = match matches.value_source(def.key) {
                Some(clap::parser::ValueSource::EnvVariable) => def.env_name(),
                _ => format!("--{}", def.flag_name()),
            };
            return Err(ConfigError {
                file: None,
                line: None,
                key: Some(key),
                message,
            });
        }
    }
    o.route.take_old_spellings();
    Ok(o)
}

/// `PREFIX=DIR`: a prefix that starts with `/` and a non-empty directory.
/// (A directory whose own path holds `=` is given in a config file.)
fn prefixed_root(value: &str) -> Option<(String, std::path::PathBuf)> {
    let (prefix, dir) = value.split_once('=')?;
    (prefix.starts_with('/') && !dir.is_empty()).then(|| (prefix.to_string(), dir.into()))
}

#[cfg(test)]
mod bool_value_tests {
    use super::join_bool_values;

    fn joined(args: &[&str]) -> Vec<String> {
        join_bool_values(args.iter().copied())
            .into_iter()
            .map(|a| a.into_string().expect("utf-8"))
            .collect()
    }

    #[test]
    fn a_boolean_word_after_a_boolean_flag_is_its_value() {
        let table: &[(&[&str], &[&str])] = &[
            (
                &["hayate", "--http2", "false"],
                &["hayate", "--http2=false"],
            ),
            (
                &["hayate", "--listing", "TRUE", "d"],
                &["hayate", "--listing=TRUE", "d"],
            ),
            (
                &["hayate", "--listing", "off"],
                &["hayate", "--listing=off"],
            ),
            // A directory after a bare boolean flag stays the directory.
            (
                &["hayate", "--listing", "./public"],
                &["hayate", "--listing", "./public"],
            ),
            (
                &["hayate", "./public", "--listing"],
                &["hayate", "./public", "--listing"],
            ),
            (
                &["hayate", "--listing=no", "1"],
                &["hayate", "--listing=no", "1"],
            ),
            // Only boolean options take a word so.
            (&["hayate", "--workers", "1"], &["hayate", "--workers", "1"]),
            (
                &["hayate", "--index", "true"],
                &["hayate", "--index", "true"],
            ),
            // The app's command is the app's.
            (
                &[
                    "hayate",
                    "run",
                    "--listing",
                    "--",
                    "app",
                    "--listing",
                    "false",
                ],
                &[
                    "hayate",
                    "run",
                    "--listing",
                    "--",
                    "app",
                    "--listing",
                    "false",
                ],
            ),
        ];
        for (args, want) in table {
            assert_eq!(joined(args), *want, "{args:?}");
        }
    }
}

#[cfg(test)]
mod heading_tests {
    use super::heading;
    use crate::{GLOBAL_OPTIONS, ROUTE_OPTIONS};

    #[test]
    fn every_option_has_the_heading_of_its_subject() {
        let of = |k| heading(k);
        assert_eq!(of("listen"), "Listen");
        assert_eq!(of("user"), "Process");
        assert_eq!(of("tls"), "TLS");
        assert_eq!(of("acme_email"), "TLS");
        assert_eq!(of("proxy"), "Proxy");
        assert_eq!(of("proxy_timeout"), "Proxy");
        assert_eq!(of("fastcgi"), "FastCGI (PHP)");
        assert_eq!(of("fastcgi_max_conns"), "FastCGI (PHP)");
        assert_eq!(of("cache"), "Response cache");
        assert_eq!(of("cache_control"), "Files");
        assert_eq!(of("compress_types"), "Compression");
        assert_eq!(of("app_log"), "App");
        assert_eq!(of("header_timeout"), "Limits and timeouts");
        assert_eq!(of("root"), "Files");
        assert_eq!(of("trusted_proxies"), "Site policy");
        assert_eq!(of("basic_auth_realm"), "Site policy");
        assert_eq!(of("otel_endpoint"), "Tracing");
        let files: Vec<_> = GLOBAL_OPTIONS
            .iter()
            .chain(ROUTE_OPTIONS)
            .filter(|o| heading(o.key) == "Files")
            .map(|o| o.key)
            .collect();
        for k in &files {
            assert!(
                k.starts_with("file_cache")
                    || [
                        "root",
                        "index",
                        "listing",
                        "fallback",
                        "dotfiles",
                        "symlinks",
                        "symlinks_outside_root",
                        "immutable",
                        "strip_prefix",
                        "cache_control"
                    ]
                    .contains(k),
                "{k} is not about files: {files:?}"
            );
        }
    }
}
