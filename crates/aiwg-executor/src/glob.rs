//! `--artifacts GLOB`: the files of a mission's working directory to upload once its agent exits. A
//! pattern is a relative path whose segments may hold `*` (any run of characters) and `?` (any one),
//! and whose segment `**` stands for any number of directories (`**` last: every file below). As in a
//! shell, a wildcard does not match a name's leading `.`, and `.git` is never looked into. Only regular
//! files match (a link is not followed out of the working directory), at most [`MAX_FILES`] of them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The most files the patterns of one mission match; past it the rest are not uploaded (and said so).
pub(crate) const MAX_FILES: usize = 1000;

/// `--artifacts`' check: a pattern inside the working directory (relative, no `..`), or why not.
pub(crate) fn pattern(value: &str) -> Result<String, String> {
    let inside = !value.is_empty() && !value.starts_with('/') && !value.split('/').any(|s| s == "..");
    match inside {
        true => Ok(value.to_owned()),
        false => Err("a pattern is a path relative to the mission's working directory, without `..`".into()),
    }
}

/// The files under `root` that `patterns` match, as paths relative to it, sorted. Reads directories:
/// call it off the async runtime's threads.
pub(crate) fn find(root: &Path, patterns: &[String]) -> Vec<PathBuf> {
    let mut found = BTreeSet::new();
    for pattern in patterns {
        let segments: Vec<&str> = pattern.split('/').filter(|s| !s.is_empty() && *s != ".").collect();
        walk(root, PathBuf::new(), &segments, &mut found);
    }
    if found.len() > MAX_FILES {
        tracing::warn!(
            matched = found.len(),
            kept = MAX_FILES,
            "--artifacts matched too many files; uploading the first"
        );
    }
    found.into_iter().take(MAX_FILES).collect()
}

fn walk(root: &Path, dir: PathBuf, segments: &[&str], found: &mut BTreeSet<PathBuf>) {
    let Some((first, rest)) = segments.split_first() else { return };
    if found.len() > MAX_FILES {
        return;
    }
    if *first == "**" {
        let rest: &[&str] = if rest.is_empty() { &["*"] } else { rest };
        walk(root, dir.clone(), rest, found);
        for name in entries(root, &dir).into_iter().filter(|(_, is_dir)| *is_dir).map(|(name, _)| name) {
            if !name.starts_with('.') {
                walk(root, dir.join(name), segments, found);
            }
        }
        return;
    }
    for (name, is_dir) in entries(root, &dir) {
        if !matches(first, &name) {
            continue;
        }
        match (rest.is_empty(), is_dir) {
            (true, false) => {
                found.insert(dir.join(&name));
            }
            (false, true) if name != ".git" => walk(root, dir.join(&name), rest, found),
            _ => {}
        }
    }
}

/// The regular files and directories in `root/dir` (links are neither), by name, whether a directory.
fn entries(root: &Path, dir: &Path) -> Vec<(String, bool)> {
    let Ok(read) = std::fs::read_dir(root.join(dir)) else { return Vec::new() };
    read.flatten()
        .filter_map(|e| {
            let kind = e.file_type().ok()?;
            let name = e.file_name().into_string().ok()?;
            (kind.is_file() || kind.is_dir()).then_some((name, kind.is_dir()))
        })
        .collect()
}

/// Whether one name matches one segment of a pattern (`*`, `?`; a leading `.` only literally).
fn matches(pattern: &str, name: &str) -> bool {
    if name.starts_with('.') && !pattern.starts_with('.') {
        return false;
    }
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut i, mut j) = (0, 0);
    // Where the last `*` was, and the name's position it was tried at, to backtrack to.
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        match p.get(i) {
            Some('*') => {
                star = Some((i, j));
                i += 1;
            }
            Some(&c) if c == '?' || c == n[j] => {
                i += 1;
                j += 1;
            }
            _ => match star {
                Some((s, tried)) => {
                    i = s + 1;
                    j = tried + 1;
                    star = Some((s, tried + 1));
                }
                None => return false,
            },
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

/// The name a matched file is uploaded as: its path relative to the working directory, each `/` as `_`
/// (an artifact's name is one path segment).
pub(crate) fn artifact_name(relative: &Path) -> String {
    relative.to_string_lossy().replace('/', "_")
}

/// The type an artifact is stored with, from its name's extension.
pub(crate) fn mime(name: &str) -> &'static str {
    let extension = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
    match extension.as_str() {
        "txt" | "log" | "md" | "csv" => "text/plain; charset=utf-8",
        "json" => "application/json",
        "html" | "htm" => "text/html",
        "patch" | "diff" => "text/x-diff",
        "png" => "image/png",
        "svg" => "image/svg+xml",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_within_a_name_and_never_a_leading_dot() {
        assert!(matches("*.txt", "report.txt") && matches("r?port.*", "report.txt") && matches("*", "x"));
        assert!(matches("a*b*c", "aXXbYYc") && matches("*a", "aaa") && !matches("a*b", "acbx"));
        assert!(!matches("*.txt", "report.txt.bak") && !matches("?", "") && !matches("x", "xy"));
        assert!(!matches("*", ".env") && matches(".*", ".env"));
    }

    #[test]
    fn patterns_find_files_below_the_directory_only() {
        let root = tempfile::tempdir().unwrap();
        for file in ["report.txt", "out/a.log", "out/deep/b.log", ".hidden/c.log", ".git/d.log", "out/e.txt"] {
            let path = root.path().join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, file).unwrap();
        }
        std::os::unix::fs::symlink("/etc/passwd", root.path().join("out/link.log")).unwrap();
        let find = |patterns: &[&str]| -> Vec<String> {
            let patterns: Vec<String> = patterns.iter().map(|p| p.to_string()).collect();
            find(root.path(), &patterns).iter().map(|p| p.display().to_string()).collect()
        };
        assert_eq!(find(&["report.txt"]), ["report.txt"]);
        assert_eq!(find(&["out/*.log"]), ["out/a.log"], "no link, no deeper file");
        assert_eq!(find(&["**/*.log"]), ["out/a.log", "out/deep/b.log"], "never .git nor a dot-directory");
        assert_eq!(find(&["out/**"]), ["out/a.log", "out/deep/b.log", "out/e.txt"]);
        assert_eq!(find(&["*.txt", "./report.txt", "missing/*"]), ["report.txt"], "each file once");
        assert_eq!(artifact_name(Path::new("out/deep/b.log")), "out_deep_b.log");
    }

    #[test]
    fn a_pattern_stays_inside_the_working_directory() {
        assert!(pattern("dist/*.tgz").is_ok() && pattern("**/report.html").is_ok());
        for outside in ["", "/etc/passwd", "../x", "a/../../b"] {
            assert!(pattern(outside).is_err(), "{outside}");
        }
    }
}
