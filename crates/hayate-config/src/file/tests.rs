use super::*;
use crate::app::Instances;

fn load(text: &str) -> Result<Config, ConfigErrors> {
    load_file("h.toml".as_ref(), text, &Overrides::default())
}

#[test]
fn every_error_of_a_file_is_reported_at_once_in_file_order() {
    let text = "workers = \"many\"\nheader_timeout = \"5 fortnights\"\nroot = \".\"\n\
                [[site]]\nroot = \".\"\nlistng = true\n\
                [[site.route]]\nprefix = \"/a/\"\nbogus = 1\n";
    let errors = load(text).expect_err("should fail").0;
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(lines.len(), 4, "{lines:#?}");
    assert!(lines[0].starts_with("h.toml:1: workers:"), "{lines:#?}");
    assert!(
        lines[1].starts_with("h.toml:2: header_timeout:"),
        "{lines:#?}"
    );
    assert!(
        lines[2].starts_with("h.toml:6: listng: unknown key (did you mean \"listing\"?)"),
        "{lines:#?}"
    );
    assert!(
        lines[3].starts_with("h.toml:9: bogus: unknown key"),
        "{lines:#?}"
    );
}

#[test]
fn a_toml_syntax_error_gives_the_reason_and_a_caret_under_the_spot() {
    let e = err("root = \".\"\nworkers = [1, \nlisten = \"x\"\n");
    let mut lines = e.lines();
    let first = lines.next().unwrap_or_default();
    assert!(first.starts_with("h.toml:3: "), "{e}");
    assert!(first.len() > "h.toml:3: ".len(), "a reason: {e}");
    let shown: Vec<&str> = lines.collect();
    assert_eq!(shown.len(), 3, "{e}");
    assert_eq!(shown[1], " 3 | listen = \"x\"", "{e}");
    let caret = shown[2].find('^').expect("a caret");
    assert_eq!(caret, " 3 | ".len() + 7, "under the spot: {e}");
}

fn err(text: &str) -> String {
    load(text).expect_err("should fail").to_string()
}

#[test]
fn fastcgi_routes_need_a_root_and_no_other_upstream() {
    let cfg = load(
        "root = \"/srv/app\"\nfastcgi = \"unix:/run/php.sock\"\n\
         fastcgi_extensions = [\".php\", \".phtml\"]\nfastcgi_max_conns = 12\n",
    )
    .expect("valid");
    let o = &cfg.sites[0].routes[0].options;
    assert_eq!(
        o.fastcgi.as_ref().expect("fastcgi")[0].members,
        ["unix:/run/php.sock"]
    );
    assert_eq!(o.fastcgi_index, "index.php");
    assert_eq!(o.fastcgi_extensions, [".php", ".phtml"]);
    assert_eq!(cfg.global.fastcgi_max_conns, 12);
    let d = crate::GlobalLayer::default().resolve();
    assert_eq!(d.fastcgi_max_conns, 5);
    assert!(
        err("[[site]]\n[[site.route]]\nprefix = \"/\"\nfastcgi = \"127.0.0.1:9000\"\n")
            .contains("fastcgi needs root")
    );
    assert!(
        err("root = \"/x\"\nfastcgi = \"127.0.0.1:9000\"\nproxy = \"http://127.0.0.1:1\"\n")
            .contains("one of proxy, app or fastcgi")
    );
    assert!(err("root = \"/x\"\nfastcgi = \"/blog=127.0.0.1:9000\"\n").contains("PREFIX="));
}

#[test]
fn cache_as_string_or_table() {
    let cfg = load(
        "proxy = [\"http://127.0.0.1:9\"]\ncache = \"5s\"\n\
         [[site]]\n[[site.route]]\nprefix = \"/api\"\nproxy = [\"http://127.0.0.1:9\"]\n\
         cache = { ttl = \"1s\", stale_if_error = \"30s\", set_cookie = true }\n",
    )
    .expect("valid");
    let routes: Vec<_> = cfg.sites.iter().flat_map(|s| &s.routes).collect();
    let api = routes
        .iter()
        .find(|r| r.prefix == "/api")
        .expect("api route");
    assert_eq!(
        api.options.cache.ttl,
        Some(std::time::Duration::from_secs(1))
    );
    assert_eq!(
        api.options.cache.stale_if_error,
        std::time::Duration::from_secs(30)
    );
    assert!(api.options.cache.set_cookie && api.options.cache.enabled);
    let e = err("cache = { ttl = \"1s\", cookies = true }\n");
    assert!(e.contains("h.toml:1") && e.contains("cookies"), "{e}");
}

#[test]
fn errors_name_file_line_and_key() {
    assert_eq!(
        err("root = \".\"\nworkers = \"lots\"\n"),
        "h.toml:2: workers: expected auto or a number from 1 to 1024, got \"lots\""
    );
    assert_eq!(
        err("root = \".\"\n\nlistne = \"1\"\n"),
        "h.toml:3: listne: unknown key (did you mean \"listen\"?)"
    );
    assert_eq!(
        err("root = \".\"\n[[site]]\nroot = \".\"\notel_sample = 0.5\n"),
        "h.toml:4: otel_sample: a server-wide option: set it at the top of the file, before any table"
    );
    assert!(
        err("root = \".\"\n[[site]]\nroot = \"x\"\n[[site.route]]\nprefix = \"a\"\n")
            .starts_with("h.toml:5: prefix:")
    );
    assert!(err("[[site]]\nhosts = \"a\"\n").starts_with("h.toml:1: root:"));
    assert!(
        err("root = \n").starts_with("h.toml:1:"),
        "{}",
        err("root = \n")
    );
    assert!(err("root = \".\"\n[[site]]\nroot=\".\"\nbogus = 1\n")
        .contains("h.toml:4: bogus: unknown key"));
    assert!(err("header_timeout = \"5 fortnights\"\nroot=\".\"")
        .starts_with("h.toml:1: header_timeout:"));
}

#[test]
fn merges_top_site_route() {
    let cfg = load(
        "cache_control = \"no-cache\"\nroot = \"/top\"\n\
         [[site]]\nhosts = [\"A.example\"]\nlisting = true\n\
         [[site.route]]\nprefix = \"/x/\"\nroot = \"/x\"\ncache_control = \"max-age=5\"\n",
    )
    .expect("valid");
    let site = &cfg.sites[0];
    assert_eq!(site.hosts, vec!["a.example"]);
    let x = &site.routes[0];
    assert_eq!(
        (x.prefix.as_str(), x.options.cache_control.as_deref()),
        ("/x/", Some("max-age=5"))
    );
    assert!(x.options.listing);
    let slash = &site.routes[1];
    assert_eq!(slash.options.root.as_deref(), Some(Path::new("/top")));
    assert_eq!(slash.options.cache_control.as_deref(), Some("no-cache"));
}

#[test]
fn named_upstream_groups() {
    let cfg = load(
        "[[upstream]]\nname = \"api\"\nmembers = [\"http://127.0.0.1:3000 weight=2\", \"unix:/run/a.sock\"]\n\
         [[site]]\n[[site.route]]\nprefix = \"/api/\"\nproxy = \"api\"\n",
    )
    .expect("valid");
    let spec = &cfg.sites[0].routes[0]
        .options
        .proxy
        .as_ref()
        .expect("proxy")[0];
    assert_eq!(
        spec.members,
        vec!["http://127.0.0.1:3000 weight=2", "unix:/run/a.sock"]
    );
    assert!(spec.group.is_none());
    assert!(
        err("[[site]]\n[[site.route]]\nprefix = \"/\"\nproxy = \"nope\"\n")
            .contains("no [[upstream]] named \"nope\"")
    );
    assert!(
        err("[[upstream]]\nname = \"a\"\nmembers = [\"bad\"]\n").starts_with("h.toml:3: members:")
    );
    assert!(err("[[upstream]]\nmembers = [\"http://a:1\"]\n").starts_with("h.toml:1: name:"));
}

#[test]
fn app_section() {
    let cfg = load_file(
        "/srv/app/h.toml".as_ref(),
        "root = \"public\"\n[app]\ncommand = [\"node\", \"server.js\"]\ninstances = 3\n\
         max_memory = \"200MiB\"\nlisten = \"tcp\"\nreload_parallel = 2\n\
         [app.env]\nNODE_ENV = \"production\"\nWORKERS = 2\n",
        &Overrides::default(),
    )
    .expect("valid");
    let app = cfg.apps.first().cloned().expect("app");
    assert_eq!(app.command, vec!["node", "server.js"]);
    assert_eq!(app.instances, Some(Instances::Count(3)));
    assert_eq!(app.cwd.as_deref(), Some(Path::new("/srv/app")));
    assert_eq!(
        app.env,
        vec![
            ("NODE_ENV".to_string(), "production".to_string()),
            ("WORKERS".to_string(), "2".to_string())
        ]
    );
    assert_eq!(cfg.global.app_max_memory.map(|s| s.0), Some(200 << 20));
    assert_eq!(cfg.global.app_listen, Some(crate::app::AppListen::Tcp));
    assert_eq!(cfg.global.app_reload_parallel.get(), 2);
    let slash = &cfg.sites[0].routes[0];
    assert!(
        slash.options.app.is_on(),
        "files first, the app for the rest"
    );
    assert_eq!(
        slash.options.root.as_deref(),
        Some(Path::new("/srv/app/public"))
    );

    let cfg = load("[app]\ncommand = \"node server.js\"\ncwd = \"srv\"\n").expect("valid");
    let app = cfg.apps.first().cloned().expect("app");
    assert_eq!(app.command, vec!["node", "server.js"]);
    assert_eq!(app.cwd.as_deref(), Some(Path::new("./srv")));
    assert!(cfg.sites[0].routes[0].options.app.is_on());
}

#[test]
fn several_apps() {
    assert!(load("root = \"public\"\n").expect("valid").apps.is_empty());
    let text = "root = \"public\"\n\
        [[app]]\nname = \"api\"\ncommand = \"node api.js\"\nmax_memory = \"100MiB\"\nenv_file = \"api.env\"\n\
        [[app]]\nname = \"worker\"\ncommand = \"node worker.js\"\n\
        [[site]]\nroot = \"public\"\n\
        [[site.route]]\nprefix = \"/api/\"\napp = \"api\"\n";
    let cfg = load_file("/srv/h.toml".as_ref(), text, &Overrides::default()).expect("valid");
    let names: Vec<(&str, bool)> = cfg
        .apps
        .iter()
        .map(|a| (a.name.as_str(), a.served))
        .collect();
    assert_eq!(names, vec![("api", true), ("worker", false)]);
    let api = &cfg.apps[0];
    assert_eq!(
        api.options(&cfg.global).max_memory.map(|s| s.0),
        Some(100 << 20)
    );
    assert_eq!(
        cfg.global.app_max_memory, None,
        "an [[app]]'s options are its own"
    );
    assert_eq!(api.env_file.as_deref(), Some(Path::new("/srv/api.env")));
    let route = |p: &str| {
        cfg.sites[0]
            .routes
            .iter()
            .find(|r| r.prefix == p)
            .expect("route")
    };
    assert_eq!(route("/api/").options.app, AppRef::Named("api".into()));
    assert_eq!(
        route("/").options.app,
        AppRef::Off,
        "[[app]]s are served only where named"
    );
}

#[test]
fn several_apps_errors() {
    let two = "[[app]]\nname = \"a\"\ncommand = \"x\"\n[[app]]\nname = \"b\"\ncommand = \"y\"\n";
    assert_eq!(
        err(&format!("{two}[[app]]\nname = \"a\"\ncommand = \"z\"\n")),
        "h.toml:7: name: two [[app]] tables named \"a\": each app needs a name of its own"
    );
    assert_eq!(
        err(&format!(
            "{two}[[site]]\n[[site.route]]\nprefix = \"/\"\napp = \"c\"\n"
        )),
        "h.toml:10: app: route \"/\": no [[app]] named \"c\" (declared: a, b)"
    );
    assert!(err(&format!("{two}[[site]]\napp = true\n"))
        .starts_with("h.toml:8: app: route \"/\": app = true sends to the only app, but 2"));
    assert_eq!(
        err("[[app]]\ncommand = \"x\"\n"),
        "h.toml:1: name: every [[app]] needs a name, as in name = \"api\""
    );
    assert!(err("[[app]]\nname = \"A b\"\ncommand = \"x\"\n").starts_with("h.toml:2: name:"));
    assert_eq!(
        err("root = \".\"\n[[app]]\nname = \"a\"\ncommand = \"x\"\nuser = \"www\"\n"),
        "h.toml:5: user: app_user is for every app: set it at the top level of the file"
    );
    let bad_name =
        err("[[app]]\nname = \"a\"\ncommand = \"x\"\n[[site]]\nroot = \".\"\napp = \"B\"\n");
    assert!(bad_name.starts_with("h.toml:6: app:"), "{bad_name}");
}

#[test]
fn app_section_errors() {
    assert_eq!(
        err("[app]\ncommand = [\"node\"]\nmax_memroy = \"1G\"\n"),
        "h.toml:3: max_memroy: unknown key (did you mean \"max_memory\"?)"
    );
    assert_eq!(
        err("[app]\ninstances = 2\n"),
        "h.toml:1: command: [app] needs a command, as in command = [\"node\", \"server.js\"]"
    );
    assert!(err("[app]\ncommand = \"node\"\ninstances = 0\n").starts_with("h.toml:3: instances:"));
    assert!(err("[app]\ncommand = []\n").starts_with("h.toml:2: command: empty"));
    assert!(err("[app]\ncommand = \"node 'a b'\"\n").starts_with("h.toml:2: command: quotes"));
    assert!(err("[app]\ncommand = \"node\"\nlisten = \"udp\"\n").starts_with("h.toml:3: listen:"));
    assert!(
        err("[app]\ncommand = \"node\"\n[app.env]\n\"A-B\" = \"1\"\n")
            .starts_with("h.toml:4: env:")
    );
    assert!(
        err("app = 3\n").starts_with("h.toml:1: app:"),
        "{}",
        err("app = 3\n")
    );
}

#[test]
fn overrides_beat_the_file() {
    let mut o = Overrides::default();
    o.global.set_strs("workers", &["3".into()]).expect("valid");
    let cfg = load_file("h.toml".as_ref(), "workers = 2\nroot = \".\"\n", &o).expect("valid");
    assert_eq!(cfg.global.workers, crate::values::Workers::Count(3));
}

#[test]
fn symlinks_default_to_owner_and_the_old_spelling_still_loads() {
    use crate::values::Symlinks;
    let route = |cfg: &Config, prefix: &str| {
        let r = cfg.sites[0].routes.iter().find(|r| r.prefix == prefix);
        r.expect("route").options.symlinks
    };
    let cfg = load("root = \"/srv\"\n").expect("valid");
    assert_eq!(route(&cfg, "/"), Symlinks::Owner);
    for (text, want) in [
        ("symlinks = \"never\"", Symlinks::Never),
        ("symlinks = \"always\"", Symlinks::Always),
        ("symlinks_outside_root = true", Symlinks::Always),
        ("symlinks_outside_root = false", Symlinks::Never),
        // Both in one place: the new name wins.
        (
            "symlinks = \"owner\"\nsymlinks_outside_root = true",
            Symlinks::Owner,
        ),
    ] {
        let cfg = load(&format!("root = \"/srv\"\n{text}\n")).expect(text);
        assert_eq!(route(&cfg, "/"), want, "{text}");
    }
    // Each layer's spelling overrides its parent's, whichever it uses.
    let cfg = load(
        "symlinks = \"never\"\n[[site]]\nroot = \"/srv\"\nsymlinks_outside_root = true\n\
         [[site.route]]\nprefix = \"/a/\"\nroot = \"/a\"\nsymlinks = \"owner\"\n\
         [[site.route]]\nprefix = \"/b/\"\nroot = \"/b\"\n",
    )
    .expect("valid");
    assert_eq!(route(&cfg, "/"), Symlinks::Always);
    assert_eq!(route(&cfg, "/a/"), Symlinks::Owner);
    assert_eq!(route(&cfg, "/b/"), Symlinks::Always);
    assert!(err("root = \"/srv\"\nsymlinks = true\n").contains("owner, never or always"));
}

#[test]
fn root_prefix_dir_makes_a_route_that_strips_its_prefix() {
    let m = crate::cli::add_option_args(clap::Command::new("t")).get_matches_from([
        "t",
        "--root",
        "/srv/app",
        "--root",
        "/wp-content/=/var/lib/wordpress/wp-content",
        "--symlinks-outside-root",
    ]);
    let o = crate::cli::overrides_from(&m).expect("valid");
    assert_eq!(o.route.root.as_deref(), Some(Path::new("/srv/app")));
    let cfg = crate::without_file(&o).expect("valid");
    let routes = &cfg.sites[0].routes;
    let wp = routes.iter().find(|r| r.prefix == "/wp-content/");
    let wp = &wp.expect("a route for the prefix").options;
    assert_eq!(
        wp.root.as_deref(),
        Some(Path::new("/var/lib/wordpress/wp-content"))
    );
    assert!(wp.strip_prefix);
    assert_eq!(wp.fastcgi_index, "", "a missing file there is a 404");
    assert_eq!(wp.symlinks, crate::values::Symlinks::Always);
    let slash = routes.iter().find(|r| r.prefix == "/").expect("/");
    assert_eq!(slash.options.root.as_deref(), Some(Path::new("/srv/app")));
    // With a file, a prefix is the file's own route.
    let e = load_file("h.toml".as_ref(), "root = \"/srv\"\n", &o).expect_err("refused");
    assert!(e.to_string().contains("[[site.route]]"), "{e}");
}

#[test]
fn client_certificates_are_set_globally_or_per_site_and_need_a_ca() {
    let cfg = load(
        "tls_client_ca = \"/etc/ca.pem\"\nroot = \"/srv\"\n\
         [[site]]\nhosts = [\"admin.test\"]\ntls_client_auth = \"require\"\n\
         tls_client_crl = [\"/etc/ca.crl\"]\n\
         [[site]]\nhosts = [\"opt.test\"]\ntls_client_auth = \"optional\"\n\
         tls_client_ca = \"/etc/other.pem\"\n\
         [[site]]\n",
    )
    .expect("valid");
    let g = &cfg.global;
    let [admin, opt, public] = [0, 1, 2].map(|i| cfg.sites[i].tls.client_certs(g));
    assert_eq!(admin.auth, ClientAuth::Require);
    assert_eq!(admin.ca.as_deref(), Some(Path::new("/etc/ca.pem")));
    assert_eq!(admin.crl, [PathBuf::from("/etc/ca.crl")]);
    assert_eq!(opt.auth, ClientAuth::Optional);
    assert_eq!(opt.ca.as_deref(), Some(Path::new("/etc/other.pem")));
    assert!(opt.crl.is_empty());
    assert_eq!(public.auth, ClientAuth::Off);

    // Asking for certificates without saying whose: refused at the line.
    let e = err("root = \"/srv\"\n[[site]]\nhosts = [\"a.test\"]\ntls_client_auth = \"require\"\n");
    assert!(e.starts_with("h.toml:4: tls_client_ca: "), "{e}");
    assert!(e.contains("needs tls_client_ca"), "{e}");
    let e = err("root = \"/srv\"\n[[site]]\ntls_client_auth = \"sometimes\"\n");
    assert!(
        e.starts_with("h.toml:3: tls_client_auth: expected off, optional or require"),
        "{e}"
    );
}
