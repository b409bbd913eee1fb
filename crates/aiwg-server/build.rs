//! Records the git commit being built (`AIWG_BUILD_COMMIT`, shown by `aiwg_build_info` in
//! `/metrics`) when the source is a git checkout; a build from a source archive simply has none.
//! `AIWG_BUILD_COMMIT` set in the build's environment wins (for packagers).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok().filter(|o| o.status.success())?;
    Some(String::from_utf8_lossy(&output.stdout).trim().to_owned()).filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=AIWG_BUILD_COMMIT");
    if std::env::var_os("AIWG_BUILD_COMMIT").is_some() {
        return;
    }
    // Rebuilt when HEAD moves: HEAD itself (a detached checkout) and the branch it names (a commit).
    let mut watched = vec!["HEAD".to_owned()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    watched.push("packed-refs".to_owned());
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name]) {
            if std::path::Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    if let Some(commit) = git(&["rev-parse", "--short=12", "HEAD"]) {
        println!("cargo:rustc-env=AIWG_BUILD_COMMIT={commit}");
    }
}
