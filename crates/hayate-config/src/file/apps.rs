//! The apps of a config file: one `[app]` section (the app named `app`,
//! served by every route that sets no other handler) or `[[app]]` tables,
//! each with a unique `name`, served where a route names it
//! (`app = "api"`). Refused at load, with the line: a name used twice, a
//! route naming an app that is not declared, `app = true` with several
//! apps (which one?). A route names one app by construction, so two apps
//! never share a route.

use std::path::{Path, PathBuf};

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::Cx;
use crate::app::{
    split_command, valid_app_name, valid_env_name, AppRef, AppSection, Instances, APP_SECTION_KEYS,
    DEFAULT_APP_NAME, PER_APP_OPTIONS,
};
use crate::app_restart::{
    check_watch_entry, parse_restart_every, CronPattern, RestartSchedule, WatchRules,
};
use crate::table::{GlobalLayer, GLOBAL_OPTIONS};
use crate::values::{Dur, OptValue};
use crate::{ConfigError, Site};

type Key<'k> = Spanned<std::borrow::Cow<'k, str>>;

impl Cx<'_> {
    /// The top-level `app` key: an `[app]` table (whose `app_*` options are
    /// set into `global`) or `[[app]]` tables (each keeping its own).
    pub(super) fn apps(
        &self,
        key: &Key<'_>,
        value: &Spanned<DeValue<'_>>,
        global: &mut GlobalLayer,
    ) -> Result<Vec<AppSection>, ConfigError> {
        match value.get_ref() {
            DeValue::Table(table) => {
                let app = self.app(table, value.span().start, Some(global))?;
                Ok(vec![app])
            }
            DeValue::Array(items) => {
                let mut apps: Vec<AppSection> = Vec::new();
                for item in items {
                    let DeValue::Table(table) = item.get_ref() else {
                        return Err(self.err(item.span().start, "app", "expected [[app]] tables".into()));
                    };
                    let app = self.app(table, item.span().start, None)?;
                    if apps.iter().any(|a| a.name == app.name) {
                        return Err(self.err(
                            item.span().start,
                            "name",
                            format!(
                                "two [[app]] tables named {:?}: each app needs a name of its own",
                                app.name
                            ),
                        ));
                    }
                    apps.push(app);
                }
                Ok(apps)
            }
            _ => Err(self.err(
                key.span().start,
                "app",
                "expected an [app] table or [[app]] tables (a route names its app with app = \"NAME\" in its [[site]] or [[site.route]])"
                    .into(),
            )),
        }
    }

    /// One app's table, starting at byte `at`. A single `[app]` sets the
    /// `app_*` options into `global`; an `[[app]]` (`global` is `None`)
    /// keeps them as its own, and needs a name.
    fn app(
        &self,
        table: &DeTable<'_>,
        at_table: usize,
        mut global: Option<&mut GlobalLayer>,
    ) -> Result<AppSection, ConfigError> {
        let mut app = AppSection {
            line: Some(self.line_of(at_table)),
            ..AppSection::default()
        };
        let mut name = None;
        let mut cwd = None;
        let mut watch = None;
        let mut ignore = Vec::new();
        let mut schedule = Vec::new();
        for (key, value) in table {
            let k = key.get_ref().as_ref();
            let at = value.span().start;
            match (k, value.get_ref()) {
                ("name", DeValue::String(s)) if valid_app_name(s) => name = Some(s.to_string()),
                ("name", _) => {
                    return Err(self.err(
                        at,
                        k,
                        "expected a name of lower-case letters, digits, '-' and '_' (up to 64)"
                            .into(),
                    ))
                }
                ("command", DeValue::String(s)) => {
                    app.command = split_command(s).map_err(|m| self.err(at, k, m))?;
                }
                ("command", DeValue::Array(items)) => {
                    app.command = items
                        .iter()
                        .map(|i| match i.get_ref() {
                            DeValue::String(s) if !s.is_empty() && !s.contains('\0') => {
                                Ok(s.to_string())
                            }
                            _ => Err(self.err(
                                i.span().start,
                                k,
                                "expected non-empty strings".into(),
                            )),
                        })
                        .collect::<Result<_, _>>()?;
                    if app.command.is_empty() {
                        return Err(self.err(at, k, "empty command".into()));
                    }
                }
                ("command", _) => {
                    return Err(self.err(at, k, "expected a list of strings or a string".into()))
                }
                ("cwd", DeValue::String(s)) if !s.is_empty() => cwd = Some(s.to_string()),
                ("cwd", _) => return Err(self.err(at, k, "expected a directory path".into())),
                ("env_file", DeValue::String(s)) if !s.is_empty() => {
                    app.env_file = Some(self.relative_to_file(s));
                }
                ("env_file", _) => return Err(self.err(at, k, "expected a file path".into())),
                ("env", DeValue::Table(vars)) => app.env = self.env(vars)?,
                ("env", _) => {
                    return Err(self.err(at, k, "expected a table of NAME = \"VALUE\"".into()))
                }
                ("watch" | "ignore", _) => {
                    let entries = self.strings(k, value, false)?;
                    for (entry, at) in &entries {
                        check_watch_entry(entry).map_err(|m| self.err(*at, k, m))?;
                    }
                    let entries = entries.into_iter().map(|(e, _)| e).collect();
                    match k {
                        "watch" => watch = Some(entries),
                        _ => ignore = entries,
                    }
                }
                ("build", DeValue::String(s)) => {
                    app.build = split_command(s).map_err(|m| self.err(at, k, m))?;
                }
                ("build", _) => {
                    app.build = self
                        .strings(k, value, true)?
                        .into_iter()
                        .map(|(e, _)| e)
                        .collect();
                }
                ("restart_cron", DeValue::String(s)) => {
                    let cron = CronPattern::parse(s).map_err(|m| self.err(at, k, m))?;
                    schedule.push((RestartSchedule::Cron(Box::new(cron)), at));
                }
                ("restart_cron", _) => {
                    return Err(self.err(
                        at,
                        k,
                        "expected a cron pattern, as in \"0 4 * * *\"".into(),
                    ))
                }
                ("restart_every", v) => {
                    let every = Dur::parse_toml(v)
                        .and_then(|d| parse_restart_every(d.0))
                        .map_err(|m| self.err(at, k, m))?;
                    schedule.push((RestartSchedule::Every(every), at));
                }
                ("instances", v) => {
                    app.instances = Some(Instances::parse_toml(v).map_err(|m| self.err(at, k, m))?);
                }
                (_, v) => {
                    let option = format!("app_{k}");
                    let set = match global.as_deref_mut() {
                        Some(global) => global.set_toml(&option, v),
                        None if PER_APP_OPTIONS.contains(&option.as_str()) => {
                            app.own.set_toml(&option, v)
                        }
                        None if GLOBAL_OPTIONS.iter().any(|o| o.key == option) => Err(format!(
                            "{option} is for every app: set it at the top level of the file"
                        )),
                        None => Ok(false),
                    };
                    match set {
                        Ok(true) => {}
                        Ok(false) => {
                            let candidates = APP_SECTION_KEYS.iter().map(|(key, ..)| *key).chain(
                                GLOBAL_OPTIONS
                                    .iter()
                                    .filter_map(|o| o.key.strip_prefix("app_")),
                            );
                            self.note(self.unknown_among(key, candidates));
                        }
                        Err(m) => self.note(self.err(at, k, m)),
                    }
                }
            }
        }
        let section = if global.is_some() { "[app]" } else { "[[app]]" };
        if let [_, (second, at), ..] = &schedule[..] {
            let key = match second {
                RestartSchedule::Cron(_) => "restart_cron",
                RestartSchedule::Every(_) => "restart_every",
            };
            return Err(self.err(
                *at,
                key,
                "restart_cron and restart_every both set: give one schedule".into(),
            ));
        }
        app.schedule = schedule.pop().map(|(s, _)| s);
        app.watch = watch.map(|paths| WatchRules {
            paths,
            ignore: ignore.clone(),
        });
        app.ignore = ignore;
        if app.command.is_empty() {
            return Err(self.err(
                at_table,
                "command",
                format!("{section} needs a command, as in command = [\"node\", \"server.js\"]"),
            ));
        }
        app.name = match (name, global.is_some()) {
            (Some(name), _) => name,
            (None, true) => DEFAULT_APP_NAME.to_string(),
            (None, false) => {
                return Err(self.err(
                    at_table,
                    "name",
                    "every [[app]] needs a name, as in name = \"api\"".into(),
                ))
            }
        };
        app.cwd = Some(match cwd {
            Some(c) => self.relative_to_file(&c),
            None => self.file_dir(),
        });
        Ok(app)
    }

    /// A list of non-empty strings (or one string) with where each is;
    /// `non_empty`: an empty list is refused.
    fn strings(
        &self,
        key: &str,
        value: &Spanned<DeValue<'_>>,
        non_empty: bool,
    ) -> Result<Vec<(String, usize)>, ConfigError> {
        let items: Vec<&Spanned<DeValue<'_>>> = match value.get_ref() {
            DeValue::Array(items) => items.iter().collect(),
            _ => vec![value],
        };
        let strings = items
            .into_iter()
            .map(|i| match i.get_ref() {
                DeValue::String(s) if !s.is_empty() && !s.contains('\0') => {
                    Ok((s.to_string(), i.span().start))
                }
                _ => Err(self.err(i.span().start, key, "expected non-empty strings".into())),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if non_empty && strings.is_empty() {
            return Err(self.err(
                value.span().start,
                key,
                "expected a command, not an empty list".into(),
            ));
        }
        Ok(strings)
    }

    /// An app's `env` table, in file order.
    fn env(&self, vars: &DeTable<'_>) -> Result<Vec<(String, String)>, ConfigError> {
        let mut env = Vec::new();
        for (name, v) in vars {
            let n = name.get_ref().as_ref();
            if !valid_env_name(n) {
                return Err(self.err(
                    name.span().start,
                    "env",
                    format!("{n:?} is not a valid variable name"),
                ));
            }
            let text = match v.get_ref() {
                DeValue::String(s) if !s.contains('\0') => s.to_string(),
                DeValue::Integer(i) => i.as_str().to_string(),
                DeValue::Boolean(b) => b.to_string(),
                _ => {
                    return Err(self.err(
                        v.span().start,
                        n,
                        "expected a string, number or boolean".into(),
                    ))
                }
            };
            env.push((n.to_string(), text));
        }
        Ok(env)
    }

    /// The config file's directory (`.` for a bare file name).
    fn file_dir(&self) -> PathBuf {
        match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// `path` as given when absolute, else under the file's directory.
    fn relative_to_file(&self, path: &str) -> PathBuf {
        if Path::new(path).is_absolute() {
            path.into()
        } else {
            self.file_dir().join(path)
        }
    }

    /// Checks every route's `app` against the declared apps, and marks the
    /// apps a route names as served (the others are workers).
    pub(super) fn serve_apps(
        &self,
        apps: &mut [AppSection],
        sites: &[Site],
    ) -> Result<(), ConfigError> {
        for route in sites.iter().flat_map(|s| &s.routes) {
            let error = |message: String| ConfigError {
                file: Some(self.path.into()),
                line: route.line_of("app"),
                key: Some("app".into()),
                message: format!("route {:?}: {message}", route.prefix),
            };
            let index = match &route.options.app {
                AppRef::Off => continue,
                // No app declared: `hayate run -- CMD` gives the one.
                AppRef::Only if apps.is_empty() => continue,
                AppRef::Only if apps.len() == 1 => 0,
                AppRef::Only => {
                    return Err(error(format!(
                        "app = true sends to the only app, but {} are declared: name one, as in app = {:?}",
                        apps.len(),
                        apps[0].name
                    )))
                }
                AppRef::Named(name) => match apps.iter().position(|a| a.name == *name) {
                    Some(i) => i,
                    None => {
                        let known: Vec<&str> = apps.iter().map(|a| a.name.as_str()).collect();
                        return Err(error(format!(
                            "no [[app]] named {name:?} (declared: {})",
                            if known.is_empty() {
                                "none".to_string()
                            } else {
                                known.join(", ")
                            }
                        )));
                    }
                },
            };
            apps[index].served = true;
        }
        Ok(())
    }
}
