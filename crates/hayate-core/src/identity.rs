//! Who hayate and its app run as: a user (and group) named in the config,
//! resolved once at start, and the switch to it once hayate's sockets are
//! bound (nginx's `user` directive: bind port 80 and 443 as root, then
//! never be root again).

use std::io;
use std::path::PathBuf;

use nix::unistd::{Gid, Group, Uid, User};

/// A user to run as, resolved from the system's user database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The user's name.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// The group: the named one, or the user's own.
    pub gid: u32,
    /// Its home directory (the app's `HOME`).
    pub home: PathBuf,
}

impl Identity {
    /// Looks `user` (a name or a uid) and `group` (a name or a gid; the
    /// user's own group when `None`) up.
    pub fn resolve(user: &str, group: Option<&str>) -> io::Result<Identity> {
        let not_found = |what: &str, name: &str| {
            io::Error::new(io::ErrorKind::NotFound, format!("no {what} named {name:?}"))
        };
        let found = match user.parse::<u32>() {
            Ok(uid) => User::from_uid(Uid::from_raw(uid)),
            Err(_) => User::from_name(user),
        }
        .map_err(io::Error::from)?
        .ok_or_else(|| not_found("user", user))?;
        let gid = match group {
            None => found.gid.as_raw(),
            Some(g) => match g.parse::<u32>() {
                Ok(gid) => gid,
                Err(_) => Group::from_name(g)
                    .map_err(io::Error::from)?
                    .ok_or_else(|| not_found("group", g))?
                    .gid
                    .as_raw(),
            },
        };
        Ok(Identity {
            name: found.name,
            uid: found.uid.as_raw(),
            gid,
            home: found.dir,
        })
    }

    /// Whether the process runs as this identity already.
    pub fn is_current(&self) -> bool {
        Uid::effective().as_raw() == self.uid && Gid::effective().as_raw() == self.gid
    }

    /// Switches the whole process (every thread: glibc's setuid applies to
    /// all) to this identity: supplementary groups, group, then user, so no
    /// root privilege is left. Refuses to go on if root could be regained.
    pub fn switch_to(&self) -> io::Result<()> {
        if self.is_current() {
            return Ok(());
        }
        if !Uid::effective().is_root() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "user: switching to {:?} needs hayate to start as root",
                    self.name
                ),
            ));
        }
        let gid = Gid::from_raw(self.gid);
        nix::unistd::setgroups(&[gid]).map_err(io::Error::from)?;
        nix::unistd::setgid(gid).map_err(io::Error::from)?;
        nix::unistd::setuid(Uid::from_raw(self.uid)).map_err(io::Error::from)?;
        if self.uid != 0 && nix::unistd::setuid(Uid::from_raw(0)).is_ok() {
            return Err(io::Error::other("root could be regained after the switch"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_resolve_by_name_and_by_uid() {
        let root = Identity::resolve("root", None).expect("root");
        assert_eq!((root.uid, root.gid), (0, 0));
        assert_eq!(Identity::resolve("0", None).expect("uid 0").name, "root");
        let e = Identity::resolve("no-such-user-here", None).expect_err("unknown");
        assert!(e.to_string().contains("no user named"), "{e}");
        let e = Identity::resolve("root", Some("no-such-group-here")).expect_err("unknown");
        assert!(e.to_string().contains("no group named"), "{e}");
    }
}
