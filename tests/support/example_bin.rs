//! Shared by the examples' tests (`#[path]`-included): an example run as a user runs it, its
//! binary built by `cargo build --example NAME` (the same target folder and profile as the
//! tests), started as a process, its exit code and stderr returned. Command-line errors are
//! clap's and end the process (status 2), so only the binary shows what a user sees.

#![allow(dead_code)] // each test file uses some of these

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// What a run of an example gave.
#[derive(Debug)]
pub struct Ran {
    /// The exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// A refused input: exit code 1 or 2 (never 0, never a panic's 101), `error: ` on stderr, no
    /// panic, and `words` in the message.
    pub fn assert_refused(&self, words: &[&str]) {
        assert!(matches!(self.code, Some(1 | 2)), "{self:#?}");
        assert!(!self.stderr.contains("panicked"), "{self:#?}");
        let at = self
            .stderr
            .find("error: ")
            .unwrap_or_else(|| panic!("{self:#?}"));
        for w in words {
            assert!(self.stderr[at..].contains(w), "{w:?} not in {self:#?}");
        }
    }
}

/// The path of example `name`'s binary, built once per test process.
pub fn example_binary(name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap();
    if let Some(p) = built.get(name) {
        return p.clone();
    }
    // The GPU machine has no cargo: tools/gpu/run points MOE_EXAMPLES_DIR at the packed examples.
    if let Some(dir) = std::env::var_os("MOE_EXAMPLES_DIR") {
        let p = PathBuf::from(dir).join(name);
        assert!(p.is_file(), "MOE_EXAMPLES_DIR has no {}", p.display());
        built.insert(name.to_string(), p.clone());
        return p;
    }
    let mut cargo = Command::new(env!("CARGO"));
    // `cargo test` put its own folders in front of LD_LIBRARY_PATH for this process; the runtime's
    // build script reruns when that variable changes, so hand cargo the reader's own value (else
    // every test run and every `cargo run` after it would rebuild the workspace).
    match users_library_path() {
        Some(v) => cargo.env("LD_LIBRARY_PATH", v),
        None => cargo.env_remove("LD_LIBRARY_PATH"),
    };
    let out = cargo
        .args(["build", "--example", name, "--message-format=json"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(Stdio::inherit())
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "cargo build --example {name} failed");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let exe = stdout
        .lines()
        .filter(|l| l.contains("\"compiler-artifact\"") && l.contains("\"example\""))
        .find_map(|l| {
            let name_field = format!("\"name\":\"{name}\"");
            if !l.contains(&name_field) {
                return None;
            }
            let at = l.find("\"executable\":\"")? + "\"executable\":\"".len();
            Some(PathBuf::from(&l[at..at + l[at..].find('"')?]))
        })
        .unwrap_or_else(|| panic!("no executable for example {name} in cargo's messages"));
    built.insert(name.to_string(), exe.clone());
    exe
}

/// LD_LIBRARY_PATH without what `cargo test` added to it: the target folder's `deps` and
/// profile folders, and the toolchain's `rustlib` folders (`None`: nothing is left). What
/// rustup's proxy added (the toolchain's `lib`) stays: a `cargo build` from a shell sees it too.
fn users_library_path() -> Option<String> {
    let exe = std::env::current_exe().ok()?;
    let profile = exe.parent()?.parent()?.to_path_buf(); // target/debug/deps/<test> → target/debug
    let target = profile.parent()?.to_path_buf();
    let v = std::env::var("LD_LIBRARY_PATH").ok()?;
    let kept: Vec<&str> = v
        .split(':')
        .filter(|p| {
            let p = std::path::Path::new(p);
            !(p.starts_with(&target) || p.components().any(|c| c.as_os_str() == "rustlib"))
        })
        .collect();
    (!kept.is_empty()).then(|| kept.join(":"))
}

/// Runs example `name` with `args` from the system's temporary folder (never the source tree),
/// `env` added to the environment.
pub fn run_example(name: &str, args: &[&str], env: &[(&str, &str)]) -> Ran {
    let out = Command::new(example_binary(name))
        .args(args)
        .envs(env.iter().copied())
        .env_remove("RUST_BACKTRACE")
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .output()
        .expect("the example starts");
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// An example that takes no options (a fixed tour): `--help` and `-h` print its usage and
/// `title` with status 0 and do not run the tour (`tour` is a line only the tour prints), and each
/// of `bad` is clap's usage error, status 2, naming its first argument, with nothing on stdout.
pub fn assert_no_options(name: &str, title: &str, tour: &str, bad: &[&[&str]]) {
    for help in ["--help", "-h"] {
        let ran = run_example(name, &[help], &[]);
        assert_eq!(ran.code, Some(0), "{ran:#?}");
        assert!(ran.stdout.contains(&format!("Usage: {name}")), "{ran:#?}");
        assert!(ran.stdout.contains(title), "{ran:#?}");
        assert!(!ran.stdout.contains(tour), "it ran: {ran:#?}");
    }
    for args in bad {
        let ran = run_example(name, args, &[]);
        ran.assert_refused(&[&format!("unexpected argument '{}'", args[0])]);
        assert_eq!(ran.code, Some(2), "{ran:#?}");
        assert!(ran.stdout.is_empty(), "{ran:#?}");
    }
}
