//! `hayate service unit|install`: a systemd unit that runs hayate as a
//! service, hardened (a read-only system, no new privileges, only the
//! capabilities hayate uses), with `systemctl reload` mapped to
//! `hayate reload` (which fails when the new config is refused).

use std::path::{Path, PathBuf};

use anyhow::Context;

/// What a unit is made from.
pub struct UnitSpec<'a> {
    /// The hayate binary the service runs.
    pub binary: &'a Path,
    /// Its config file.
    pub config: &'a Path,
    /// The service's name (`NAME.service`; its control socket is
    /// `/run/NAME/control.sock`).
    pub name: &'a str,
}

/// The unit file's text.
pub fn unit(spec: &UnitSpec<'_>) -> String {
    let (bin, config, name) = (spec.binary.display(), spec.config.display(), spec.name);
    let control = format!("/run/{name}/control.sock");
    format!(
        "\
[Unit]
Description=hayate web front ({name})
After=network-online.target
Wants=network-online.target

[Service]
Type=exec
ExecStartPre={bin} check {config}
ExecStart={bin} --config {config} --control {control}
# Fails (and systemctl reload with it) when the new config is refused;
# the running one stays.
ExecReload={bin} reload --control {control}
# SIGTERM to hayate alone: it drains its connections and stops its app
# itself; whatever is left after the timeout is killed.
KillMode=mixed
TimeoutStopSec=30
Restart=on-failure
RestartSec=1
# One descriptor per connection (max_connections defaults to 16384).
LimitNOFILE=65536
# Directories systemd makes (owned by the service): the control socket,
# the state (local CA, ACME certificates) and the logs.
RuntimeDirectory={name}
StateDirectory={name}
LogsDirectory={name}
Environment=HAYATE_STATE_DIR=/var/lib/{name}

# Hardening. hayate binds ports below 1024, then runs as `user` (config)
# and starts its app as that user; nothing else needs privileges.
CapabilityBoundingSet=CAP_NET_BIND_SERVICE CAP_SETUID CAP_SETGID CAP_CHOWN CAP_KILL
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=read-only
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
SystemCallArchitectures=native

[Install]
WantedBy=multi-user.target
"
    )
}

/// Writes the unit into `dir` (refusing to replace a different one unless
/// `force`), and says what to run next.
pub fn install(spec: &UnitSpec<'_>, dir: &Path, force: bool) -> anyhow::Result<PathBuf> {
    let path = dir.join(format!("{}.service", spec.name));
    let text = unit(spec);
    match std::fs::read_to_string(&path) {
        Ok(old) if old == text => return Ok(path),
        Ok(_) if !force => anyhow::bail!(
            "{} exists and differs; pass --force to replace it",
            path.display()
        ),
        _ => {}
    }
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_names_the_binary_config_and_control_socket() {
        let text = unit(&UnitSpec {
            binary: Path::new("/usr/local/bin/hayate"),
            config: Path::new("/etc/hayate/hayate.toml"),
            name: "web",
        });
        assert!(text.contains(
            "ExecStart=/usr/local/bin/hayate --config /etc/hayate/hayate.toml \
             --control /run/web/control.sock\n"
        ));
        assert!(text
            .contains("ExecReload=/usr/local/bin/hayate reload --control /run/web/control.sock\n"));
        assert!(text.contains("ExecStartPre=/usr/local/bin/hayate check /etc/hayate/hayate.toml\n"));
        assert!(text.contains("RuntimeDirectory=web\n"));
    }
}
