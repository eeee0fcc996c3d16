//! The command line: `hayate check`, help and the generated reference,
//! serving the current directory with no arguments, precedence of file,
//! environment and flags, bad values, listeners (in use, Unix sockets,
//! several addresses).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use hayate_testkit::{site, unix_get, Client, Hayate, WAIT};

const BIN: &str = env!("CARGO_BIN_EXE_hayate");

/// What a finished run of the binary left.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs the binary to completion (bounded by [`WAIT`]), with no `HAYATE_*`
/// variables but `envs`.
fn run(args: &[&str], envs: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("HAYATE_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(envs.iter().copied());
    let child = cmd.spawn().expect("spawn hayate");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(WAIT) {
        Ok(out) => {
            let out = out.expect("wait");
            Run {
                code: out.status.code(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            }
        }
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("hayate {args:?} did not exit within {WAIT:?}");
        }
    }
}

fn write(path: impl AsRef<Path>, data: impl AsRef<[u8]>) {
    std::fs::write(path, data).expect("write fixture");
}

fn utf8(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

#[test]
fn check_accepts_a_valid_file() {
    let dir = site();
    let file = dir.path().join("ok.toml");
    write(
        &file,
        format!(
            "listen = [\"127.0.0.1:0\", \"unix:/tmp/x.sock\"]\nworkers = 2\n\
             [[site]]\nhosts = [\"a.test\"]\nroot = \"{0}\"\n\
             [[site.route]]\nprefix = \"/docs/\"\nroot = \"{0}/docs\"\nstrip_prefix = true\n\
             [[site]]\nroot = \"{0}\"\nfallback = \"index.html\"\n",
            utf8(dir.path())
        ),
    );
    let r = run(&["check", utf8(&file)], &[]);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(r.stdout.contains("ok"), "{r:?}");
    assert!(r.stderr.is_empty(), "{r:?}");
}

#[test]
fn check_names_file_line_and_key_of_every_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = utf8(dir.path());
    // (file text, what stderr must contain after "FILE:")
    let table: Vec<(String, &str)> = vec![
        (
            format!("root = \"{root}\"\nworkers = \"lots\"\n"),
            "2: workers: expected auto or a number",
        ),
        (
            format!("root = \"{root}\"\nheader_timeout = \"5 fortnights\"\n"),
            "2: header_timeout:",
        ),
        (
            format!("root = \"{root}\"\nlisting = \"maybe\"\n"),
            "2: listing:",
        ),
        (
            format!("root = \"{root}\"\n\nlistne = \"127.0.0.1:1\"\n"),
            "3: listne: unknown key (did you mean \"listen\"?)",
        ),
        (
            format!("root = \"{root}\"\n[[site]]\nroot = \"{root}\"\nindx = \"a.html\"\n"),
            "4: indx: unknown key (did you mean \"index\"?)",
        ),
        (
            "workers = 2\n[[site]]\nhosts = [\"a.test\"]\n".to_string(),
            "2: root:",
        ),
        (
            "[[site]]\nhosts = [\"a.test\"]\n[[site.route]]\nprefix = \"/x/\"\nindex = \"i.html\"\n"
                .to_string(),
            "3: root: route \"/x/\" has neither root nor proxy",
        ),
        (
            format!("root = \"{root}\"\n[[site]]\nroot = \"{root}\"\n[[site.route]]\nroot = \"{root}\"\n"),
            "4: prefix:",
        ),
        (
            format!("root = \"{root}\"\napp_reload_parallel = 0\n"),
            "2: app_reload_parallel: expected a whole number from 1",
        ),
        (
            "[app]\ncommand = \"node app.js\"\nreload_parallel = 0\n".to_string(),
            "3: reload_parallel: expected a whole number from 1",
        ),
        (
            format!("root = \"{root}\"\notel_sample = 1.5\n"),
            "2: otel_sample: expected a ratio from 0 to 1",
        ),
        (
            format!("root = \"{root}\"\n\notel_endpoint = \"collector:4317\"\n"),
            "3: otel_endpoint: \"collector:4317\": expected http(s)://HOST:PORT",
        ),
        (
            format!("root = \"{root}\"\notel_protocol = \"http/json\"\n"),
            "2: otel_protocol: expected grpc or http/protobuf",
        ),
        (format!("root = \"{root}\"\nworkers = \n"), "2:"),
        (format!("root = \"{root}\"\n[site\n"), "2:"),
    ];
    for (text, want) in &table {
        let file = dir.path().join("bad.toml");
        write(&file, text);
        let r = run(&["check", utf8(&file)], &[]);
        assert_eq!(r.code, Some(1), "{text:?}: {r:?}");
        let want = format!("{}:{want}", file.display());
        assert!(
            r.stderr.contains(&want),
            "{text:?}: want {want:?} in {:?}",
            r.stderr
        );
        assert!(r.stdout.is_empty(), "{r:?}");
    }
    // A file that is not there.
    let r = run(&["check", "/nonexistent/hayate.toml"], &[]);
    assert_eq!(r.code, Some(1));
    assert!(r.stderr.contains("/nonexistent/hayate.toml"), "{r:?}");
}

#[test]

fn check_names_the_line_of_a_root_that_does_not_exist() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("h.toml");
    write(&file, "workers = 2\nroot = \"/nonexistent/www\"\n");
    let r = run(&["check", utf8(&file)], &[]);
    assert_eq!(r.code, Some(1), "{r:?}");
    let want = format!("{}:2: root:", file.display());
    assert!(r.stderr.contains(&want), "want {want:?} in {:?}", r.stderr);
}

#[test]
fn purge_refuses_a_url_or_tag_that_is_not_one_word_before_connecting() {
    for what in [&["/a b"][..], &["/a\nstop"], &["--tag", "a b"], &[""]] {
        let mut args = vec!["purge", "--control", "/nonexistent/hayate.sock"];
        args.extend_from_slice(what);
        let r = run(&args, &[]);
        assert_eq!(r.code, Some(1), "{what:?}: {r:?}");
        assert!(r.stderr.contains("without spaces"), "{what:?}: {r:?}");
    }
}

/// The option rows of `help-config`: (flag, env var).
fn documented_options() -> Vec<(String, String)> {
    let r = run(&["help-config"], &[]);
    assert_eq!(r.code, Some(0));
    let rows: Vec<(String, String)> = r
        .stdout
        .lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| {
            // | `key` | `--flag VALUE` / `HAYATE_X` | default | meaning |
            let cell = l.split(" | ").nth(1)?;
            let (flag, env) = cell.split_once(" / ")?;
            let flag = flag.trim_matches('`').split(' ').next()?.to_string();
            Some((flag, env.trim_matches('`').to_string()))
        })
        .collect();
    assert!(rows.len() >= 25, "too few options documented: {rows:?}");
    rows
}

#[test]
fn serve_help_lists_every_option_with_its_env_var() {
    let r = run(&["serve", "--help"], &[]);
    assert_eq!(r.code, Some(0), "{r:?}");
    for (flag, env) in documented_options() {
        assert!(
            r.stdout.contains(&format!("{flag} ")) || r.stdout.contains(&format!("{flag}[")),
            "{flag} missing from serve --help"
        );
        assert!(
            r.stdout.contains(&format!("[env: {env}=]")),
            "{env} missing from serve --help"
        );
    }
    assert!(r.stdout.contains("[env: HAYATE_CONFIG=]"));
}

#[test]

fn top_level_help_lists_every_option_with_its_env_var() {
    let r = run(&["--help"], &[]);
    assert_eq!(r.code, Some(0), "{r:?}");
    for (flag, env) in documented_options() {
        assert!(r.stdout.contains(&flag), "{flag} missing from --help");
        assert!(r.stdout.contains(&env), "{env} missing from --help");
    }
}

#[test]
fn help_config_is_docs_config_md() {
    let r = run(&["help-config"], &[]);
    assert_eq!(r.code, Some(0));
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/config.md");
    let docs = std::fs::read_to_string(path).expect("docs/config.md");
    assert!(
        r.stdout == docs,
        "docs/config.md differs from `hayate help-config` ({} vs {} bytes)",
        docs.len(),
        r.stdout.len()
    );
}

#[test]
fn no_arguments_serve_the_current_directory() {
    let dir = site();
    let h = Hayate::start_in(
        BIN,
        &[],
        &[("HAYATE_LISTEN", "127.0.0.1:0")],
        Some(dir.path()),
    );
    // start_in returned: hayate printed an http:// URL with the bound port.
    assert_eq!(h.addr.ip().to_string(), "127.0.0.1");
    assert_ne!(h.addr.port(), 0);
    let mut c = h.client();
    assert_eq!(c.get("/hello.txt", &[]).text(), "hello world\n");
    assert_eq!(c.get("/", &[]).status, 200);
    h.assert_no_errors();
}

#[test]
fn environment_overrides_the_file_and_flags_override_the_environment() {
    let dir = site();
    for name in ["a", "b", "c"] {
        write(dir.path().join(format!("{name}.html")), name);
    }
    let file = dir.path().join("h.toml");
    write(
        &file,
        format!(
            "listen = [\"127.0.0.1:0\"]\nroot = \"{}\"\nindex = \"a.html\"\n",
            utf8(dir.path())
        ),
    );
    let config = utf8(&file);
    // (args, env, body of /)
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let table: [Case<'_>; 5] = [
        (&["--config", config], &[], "a"),
        (&["--config", config], &[("HAYATE_INDEX", "b.html")], "b"),
        (
            &["--config", config, "--index", "c.html"],
            &[("HAYATE_INDEX", "b.html")],
            "c",
        ),
        (&["--config", config, "--index", "c.html"], &[], "c"),
        // The config file itself may come from the environment.
        (
            &[],
            &[("HAYATE_CONFIG", config), ("HAYATE_INDEX", "b.html")],
            "b",
        ),
    ];
    for (args, envs, body) in table {
        let h = Hayate::start_in(BIN, args, envs, None);
        let r = h.client().get("/", &[]);
        assert_eq!(
            (r.status, r.text().as_str()),
            (200, body),
            "{args:?} {envs:?}"
        );
        h.assert_no_errors();
    }
    // A flag beats the file for a global option too: --listen replaces the
    // file's list.
    let h = Hayate::start(BIN, &["--config", config, "--listen", "127.0.0.1:0"]);
    assert_eq!(h.client().get("/", &[]).text(), "a");
}

#[test]
fn bad_flag_values_exit_1_naming_the_flag() {
    let dir = site();
    let d = utf8(dir.path());
    let table: [(&[&str], &str); 7] = [
        (&["--workers", "lots"], "--workers"),
        (&["--workers", "0"], "--workers"),
        (&["--listen", "nope"], "--listen"),
        (&["--listing=maybe"], "--listing"),
        (&["--header-timeout", "5 fortnights"], "--header-timeout"),
        (
            &["--file-cache-max-file", "12 parsecs"],
            "--file-cache-max-file",
        ),
        (&["--access-log-format", "xml"], "--access-log-format"),
    ];
    for (args, flag) in table {
        let mut all = vec![d];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--listen", "127.0.0.1:0"]);
        if flag == "--listen" {
            all.truncate(all.len() - 2);
        }
        let r = run(&all, &[]);
        assert_eq!(r.code, Some(1), "{args:?}: {r:?}");
        assert!(r.stderr.contains(flag), "{args:?}: {:?}", r.stderr);
        assert!(r.stdout.is_empty(), "{args:?} served: {r:?}");
    }
    // A root that is not there fails before anything is served.
    let r = run(&["/nonexistent/www", "--listen", "127.0.0.1:0"], &[]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("/nonexistent/www"), "{r:?}");
}

#[test]

fn bad_environment_values_name_the_variable() {
    let dir = site();
    let r = run(
        &[utf8(dir.path()), "--listen", "127.0.0.1:0"],
        &[("HAYATE_WORKERS", "lots")],
    );
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("HAYATE_WORKERS"), "{:?}", r.stderr);
}

#[test]
fn a_port_in_use_is_a_clear_error() {
    let dir = site();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let r = run(&[utf8(dir.path()), "--listen", &addr], &[]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains(&addr), "{:?}", r.stderr);
    assert!(
        r.stderr.to_ascii_lowercase().contains("in use"),
        "{:?}",
        r.stderr
    );
    assert!(!r.stderr.contains("panicked"), "{:?}", r.stderr);
    // Also when the port is taken by another hayate.
    let h = Hayate::start(BIN, &[utf8(dir.path())]);
    let addr = h.addr.to_string();
    let r = run(&[utf8(dir.path()), "--listen", &addr], &[]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.to_ascii_lowercase().contains("in use"), "{r:?}");
    // The first one is unaffected.
    assert_eq!(h.client().get("/hello.txt", &[]).status, 200);
    h.assert_no_errors();
}

#[test]
fn unix_socket_serves_and_is_removed_at_exit() {
    let dir = site();
    let sockdir = tempfile::tempdir().expect("tempdir");
    let sock = sockdir.path().join("hayate.sock");
    let listen = format!("unix:{}", sock.display());
    let mut h = Hayate::start(BIN, &[utf8(dir.path()), "--listen", &listen]);
    assert!(sock.exists());
    let resp = unix_get(&sock, "/hello.txt");
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n"), "{resp}");
    assert!(resp.ends_with("\r\n\r\nhello world\n"), "{resp}");
    assert!(resp.contains("Content-Length: 12\r\n"), "{resp}");
    let resp = unix_get(&sock, "/missing");
    assert!(resp.starts_with("HTTP/1.1 404"), "{resp}");
    let status = h.stop();
    assert!(status.success(), "{status:?}");
    assert!(!sock.exists(), "socket file left behind");
    h.assert_no_errors();

    // A stale socket file (nobody listening) is replaced; a regular file in
    // the way is an error.
    let stale = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
    drop(stale);
    assert!(sock.exists());
    let mut h = Hayate::start(BIN, &[utf8(dir.path()), "--listen", &listen]);
    assert!(unix_get(&sock, "/hello.txt").ends_with("hello world\n"));
    // Another hayate on the same socket is refused, and does not remove it.
    let r = run(&[utf8(dir.path()), "--listen", &listen], &[]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(
        sock.exists(),
        "the second hayate removed the first one's socket"
    );
    assert!(unix_get(&sock, "/hello.txt").ends_with("hello world\n"));
    assert!(h.stop().success());
    h.assert_no_errors();
    write(&sock, "not a socket");
    let r = run(&[utf8(dir.path()), "--listen", &listen], &[]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains(&listen), "{r:?}");
    assert_eq!(
        std::fs::read_to_string(&sock).expect("kept"),
        "not a socket"
    );
}

#[test]
fn every_listen_address_serves() {
    let dir = site();
    let sockdir = tempfile::tempdir().expect("tempdir");
    let sock = sockdir.path().join("h.sock");
    let listen_unix = format!("unix:{}", sock.display());
    let h = Hayate::start(
        BIN,
        &[
            utf8(dir.path()),
            "--listen",
            "127.0.0.1:0",
            "--listen",
            "127.0.0.1:0",
            "--listen",
            &listen_unix,
            "--access-log",
            "off",
        ],
    );
    // The first URL was read by start; the others follow it.
    let rest = h.stdout_lines(Duration::from_millis(300));
    let second: std::net::SocketAddr = rest
        .iter()
        .find_map(|l| l.split("http://").nth(1))
        .and_then(|r| r.split('/').next())
        .expect("a second URL")
        .parse()
        .expect("address");
    assert_ne!(second, h.addr);
    assert!(rest.iter().any(|l| l.contains(&listen_unix)), "{rest:?}");
    for addr in [h.addr, second] {
        let r = Client::connect(addr).get("/hello.txt", &[]);
        assert_eq!(
            (r.status, r.text().as_str()),
            (200, "hello world\n"),
            "{addr}"
        );
    }
    assert!(unix_get(&sock, "/hello.txt").ends_with("hello world\n"));
    h.assert_no_errors();
}

#[test]
fn the_systemd_unit_is_valid_and_install_writes_it_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let unit = dir.path().join("web.service");
    let out = std::process::Command::new(BIN)
        .args([
            "service",
            "unit",
            "--name",
            "web",
            "--config",
            "/etc/hayate/web.toml",
        ])
        .output()
        .expect("hayate service unit");
    assert!(out.status.success(), "{out:?}");
    std::fs::write(&unit, &out.stdout).expect("write");
    // systemd's own check of the unit (`.ci/run` installs systemd).
    let verify = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("systemd-analyze (apt-get install systemd)");
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );

    let install = |config: &str, force: bool| {
        let mut cmd = std::process::Command::new(BIN);
        cmd.args([
            "service",
            "install",
            "--name",
            "web",
            "--config",
            config,
            "--unit-dir",
        ])
        .arg(dir.path().join("units"));
        if force {
            cmd.arg("--force");
        }
        cmd.output().expect("hayate service install")
    };
    std::fs::create_dir(dir.path().join("units")).expect("mkdir");
    let out = install("/etc/hayate/web.toml", false);
    assert!(out.status.success(), "{out:?}");
    let written = std::fs::read(dir.path().join("units/web.service")).expect("unit written");
    assert_eq!(written, std::fs::read(&unit).expect("read"));
    assert!(
        install("/etc/hayate/web.toml", false).status.success(),
        "same unit again"
    );
    let out = install("/etc/hayate/other.toml", false);
    assert!(
        !out.status.success(),
        "a different unit is not replaced silently"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));
    assert!(install("/etc/hayate/other.toml", true).status.success());
}

#[test]
fn boolean_flags_take_their_value_with_or_without_equals() {
    let dir = site();
    let d = utf8(dir.path());
    // (args, whether /docs/ is listed); /docs/ has no index file.
    let table: [(&[&str], bool); 7] = [
        (&[d, "--listing"], true),
        // A directory after a bare boolean flag is the directory.
        (&["--listing", d], true),
        (&[d, "--listing=false"], false),
        (&[d, "--listing", "false"], false),
        (&["--listing", "true", d], true),
        (&["--listing", "off", d], false),
        (&[d, "--listing", "YES"], true),
    ];
    for (args, listed) in table {
        let h = Hayate::start(BIN, args);
        let status = h.client().get("/docs/", &[]).status;
        assert_eq!(status == 200, listed, "{args:?}: {status}");
        h.assert_no_errors();
    }
    // `--http2 false` as help-config writes it: h2c's preface is then not
    // HTTP/2 to this hayate, which answers in HTTP/1.1.
    for (args, h2) in [(&[d][..], true), (&[d, "--http2", "false"][..], false)] {
        let h = Hayate::start(BIN, args);
        let mut c = h.client();
        c.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        let mut first = [0u8; 8];
        std::io::Read::read_exact(&mut c.stream(), &mut first).expect("an answer");
        assert_eq!(&first != b"HTTP/1.1", h2, "{args:?}: {first:?}");
    }
}

#[test]
fn a_mistyped_flag_is_told_the_closest_real_one() {
    for (args, closest) in [
        (&["--listng"][..], "'--listing'"),
        (&["run", "--lisen", "x", "--", "true"][..], "'--listen'"),
        (&["status", "--contrl", "x"][..], "'--control'"),
    ] {
        let r = run(args, &[]);
        assert_eq!(r.code, Some(2), "{args:?}: {r:?}");
        assert!(r.stderr.contains(closest), "{args:?}: {}", r.stderr);
        // "use '-- --lisen'" would make it the app's command or the directory.
        assert!(!r.stderr.contains("as a value"), "{args:?}: {}", r.stderr);
    }
    let r = run(&["--xyzzy"], &[]);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(!r.stderr.contains("as a value"), "{}", r.stderr);
    assert!(r.stderr.contains("--help lists them"), "{}", r.stderr);
}

#[test]
fn the_startup_line_names_the_address_bound() {
    let dir = site();
    let mut child = Command::new(BIN)
        .args([utf8(dir.path()), "--listen", "0", "--workers", "1"])
        .env_remove("HAYATE_LISTEN")
        .env("HAYATE_CONTROL", dir.path().join("control.sock"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn hayate");
    let stdout = child.stdout.take().expect("stdout");
    let line = std::io::BufRead::lines(std::io::BufReader::new(stdout))
        .next()
        .expect("a line")
        .expect("utf-8");
    let _ = child.kill();
    let _ = child.wait();
    // A bare port binds every interface, and the line says so.
    assert!(line.contains(" on http://0.0.0.0:"), "{line}");
    assert!(line.contains("every interface"), "{line}");
    assert!(!line.contains("localhost"), "{line}");
    // The test launcher reaches such a hayate on loopback.
    let h = Hayate::start(BIN, &[utf8(dir.path()), "--listen", "0"]);
    assert!(h.addr.ip().is_loopback(), "{}", h.addr);
    assert_eq!(h.client().get("/hello.txt", &[]).status, 200);
}

#[test]
fn each_command_names_its_default_directory() {
    let help = |cmd: &str| run(&[cmd, "--help"], &[]).stdout;
    let dir_line = |text: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with("[DIR]"))
            .unwrap_or_default()
            .to_string()
    };
    // hayate run never serves the app's own directory: ./public, or none.
    let run_dir = dir_line(&help("run"));
    assert!(run_dir.contains("./public"), "{run_dir}");
    assert!(!run_dir.contains("the current directory"), "{run_dir}");
    let php_dir = dir_line(&help("php"));
    assert!(php_dir.contains("the current directory"), "{php_dir}");
    let serve_dir = dir_line(&help("serve"));
    assert!(serve_dir.contains("the current directory"), "{serve_dir}");
}
