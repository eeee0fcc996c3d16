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
        .long(o.flag_name())
        .value_name(o.value_name)
        .env(o.env_name())
        .help(help)
        .action(if o.repeated {
            ArgAction::Append
        } else {
            ArgAction::Set
        });
    if o.flag {
        arg = arg
            .num_args(0..=1)
            .default_missing_value("true")
            .require_equals(true);
    }
    arg
}

/// Reads the option values given on the CLI or in the environment.
pub fn overrides_from(matches: &ArgMatches) -> Result<Overrides, ConfigError> {
    let mut o = Overrides::default();
    for def in GLOBAL_OPTIONS.iter().chain(ROUTE_OPTIONS) {
        let Some(values) = matches.get_many::<String>(def.key) else {
            continue;
        };
        let values: Vec<String> = values.cloned().collect();
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
    Ok(o)
}
