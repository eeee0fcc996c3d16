use super::*;
use std::os::unix::fs::{lchown, symlink};

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

fn nobody() -> u32 {
    nix::unistd::User::from_name("nobody")
        .expect("user db")
        .expect("a nobody user")
        .uid
        .as_raw()
}

/// A root and a directory outside it with `secret` (owned by whoever runs
/// the test: root in CI) and `dir/file`.
fn tree() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let base = tempfile::tempdir().expect("tempdir");
    let root = base.path().join("root");
    let outside = base.path().join("outside");
    std::fs::create_dir_all(root.join("sub")).expect("mkdir");
    std::fs::create_dir_all(outside.join("dir")).expect("mkdir");
    std::fs::write(root.join("sub/in.txt"), "in").expect("write");
    std::fs::write(outside.join("secret"), "secret").expect("write");
    std::fs::write(outside.join("dir/file"), "file").expect("write");
    let root = std::fs::canonicalize(root).expect("canonical");
    let outside = std::fs::canonicalize(outside).expect("canonical");
    (base, root, outside)
}

fn verdict(root: &Path, path: &str, setting: Symlinks) -> &'static str {
    match resolve(root, path.as_bytes(), setting).expect("resolve") {
        Resolved::Found { .. } => "found",
        Resolved::Missing => "missing",
        Resolved::Refused(_) => "refused",
    }
}

#[test]
fn links_out_of_the_root_follow_the_setting_when_owners_match() {
    let (_base, root, outside) = tree();
    symlink(outside.join("secret"), root.join("same")).expect("symlink");
    symlink(outside.join("dir"), root.join("dirlink")).expect("symlink");
    symlink("sub/in.txt", root.join("inside")).expect("symlink");
    symlink(root.join("nowhere"), root.join("dangling")).expect("symlink");
    symlink("loop", root.join("loop")).expect("symlink");
    let table = [
        ("/sub/in.txt", ["found", "found", "found"]),
        ("/inside", ["found", "found", "found"]),
        ("/same", ["found", "refused", "found"]),
        ("/dirlink/file", ["found", "refused", "found"]),
        ("/dirlink", ["found", "refused", "found"]),
        ("/dangling", ["missing", "missing", "missing"]),
        ("/loop", ["missing", "missing", "missing"]),
        ("/sub/in.txt/x", ["missing", "missing", "missing"]),
        (
            "/sub/../../outside/secret",
            ["missing", "missing", "missing"],
        ),
    ];
    for (path, want) in table {
        for (setting, want) in [Symlinks::Owner, Symlinks::Never, Symlinks::Always]
            .into_iter()
            .zip(want)
        {
            assert_eq!(verdict(&root, path, setting), want, "{path} {setting:?}");
        }
    }
    match resolve(&root, b"/dirlink/file", Symlinks::Owner).expect("resolve") {
        Resolved::Found { real, .. } => assert_eq!(real, outside.join("dir/file")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_link_owned_by_another_user_is_refused_wherever_it_is_on_the_path() {
    if !is_root() {
        eprintln!("skipped: lchown to another user needs root");
        return;
    }
    let (_base, root, outside) = tree();
    let nobody = nobody();
    // The uploaded link to a file of root's.
    symlink(outside.join("secret"), root.join("passwd")).expect("symlink");
    lchown(root.join("passwd"), Some(nobody), None).expect("lchown");
    // A directory link of nobody's, to root's directory: the file under it
    // is refused too (not only the last component is checked).
    symlink(outside.join("dir"), root.join("updir")).expect("symlink");
    lchown(root.join("updir"), Some(nobody), None).expect("lchown");
    // root's link to nobody's link to root's file: the second is refused.
    symlink(outside.join("secret"), outside.join("hop")).expect("symlink");
    lchown(outside.join("hop"), Some(nobody), None).expect("lchown");
    symlink(outside.join("hop"), root.join("chain")).expect("symlink");
    // A relative target that climbs out.
    symlink("../outside/secret", root.join("climb")).expect("symlink");
    lchown(root.join("climb"), Some(nobody), None).expect("lchown");
    for path in ["/passwd", "/updir/file", "/chain", "/climb"] {
        assert_eq!(verdict(&root, path, Symlinks::Owner), "refused", "{path}");
        assert_eq!(verdict(&root, path, Symlinks::Always), "found", "{path}");
    }
    let Resolved::Refused(refusal) = resolve(&root, b"/passwd", Symlinks::Owner).expect("resolve")
    else {
        panic!("refused");
    };
    assert_eq!(refusal.owners, Some((nobody, 0)));
    let line = refusal.describe("file", &root.join("passwd"));
    assert!(
        line.contains("passwd") && line.contains("symlinks = \"always\""),
        "{line}"
    );
}

#[test]
fn the_file_opened_is_the_one_checked() {
    let (_base, root, outside) = tree();
    symlink(outside.join("secret"), root.join("link")).expect("symlink");
    let Resolved::Found { real, meta } =
        resolve(&root, b"/sub/in.txt", Symlinks::Never).expect("resolve")
    else {
        panic!("found");
    };
    assert!(open_checked(&real, &meta).expect("open").is_some());
    // The checked inode stays alive, so no new file can take its number.
    std::fs::hard_link(&real, root.join("keep")).expect("link");
    // Swapped for a link after the check: not opened through it.
    std::fs::remove_file(&real).expect("rm");
    symlink(outside.join("secret"), &real).expect("symlink");
    assert!(open_checked(&real, &meta).expect("open").is_none());
    // Replaced by another file: not that one either.
    std::fs::remove_file(&real).expect("rm");
    std::fs::write(root.join("sub/new"), "new").expect("write");
    std::fs::rename(root.join("sub/new"), &real).expect("rename");
    assert!(open_checked(&real, &meta).expect("open").is_none());
}
