//! The repository explains itself: every protocol section cited in code, tests and
//! docs (`§5.3`, and test names like `r5_3_…` or `i6_…`) exists in
//! `docs/protocol.md`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The section numbers `docs/protocol.md` defines: its headings (`## 5.`, `### 5.3`)
/// and its invariants (`i1` … in §6).
fn defined() -> (BTreeSet<String>, BTreeSet<u32>) {
    let text = std::fs::read_to_string(root().join("docs/protocol.md")).unwrap();
    let mut sections = BTreeSet::new();
    let mut invariants = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line
            .strip_prefix("### ")
            .or_else(|| line.strip_prefix("## "))
        {
            let number: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '.')
                .collect();
            let number = number.trim_end_matches('.');
            if number.starts_with(|c: char| c.is_ascii_digit()) {
                sections.insert(number.to_string());
            }
        }
        if let Some(at) = line.find("<a id=\"i") {
            let digits: String = line[at + 8..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            invariants.insert(digits.parse().unwrap());
        }
    }
    (sections, invariants)
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        if path.is_dir() {
            files(&path, out);
        } else if ["rs", "md", "sql", "toml", "mjs"]
            .iter()
            .any(|ext| name.ends_with(&format!(".{ext}")))
        {
            out.push(path);
        }
    }
}

/// `§` citations: the number after the sign, as `5.3` or `4.4a` or `6`.
fn citations(text: &str) -> Vec<String> {
    text.match_indices('§')
        .map(|(at, _)| {
            text[at + '§'.len_utf8()..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == 'a')
                .collect::<String>()
                .trim_end_matches('.')
                .to_string()
        })
        .filter(|n| !n.is_empty())
        .collect()
}

/// Test names that cite a rule (`r5_3_…`, `r4_4a_…`) or an invariant (`i6_…`).
fn cited_by_names(text: &str) -> (Vec<String>, Vec<u32>) {
    let (mut rules, mut invariants) = (Vec::new(), Vec::new());
    for line in text.lines() {
        let Some(name) = line
            .trim_start()
            .strip_prefix("fn ")
            .or_else(|| line.trim_start().strip_prefix("async fn "))
        else {
            continue;
        };
        let parts: Vec<&str> = name.split('_').collect();
        let numeric = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
        if let Some(n) = parts[0].strip_prefix('i')
            && numeric(n)
            && parts.len() > 1
        {
            invariants.push(n.parse().unwrap());
        } else if let Some(major) = parts[0].strip_prefix('r')
            && numeric(major)
            && parts.len() > 2
        {
            let minor = parts[1].trim_end_matches('a');
            if numeric(minor) {
                rules.push(format!("{major}.{}", parts[1]));
            } else {
                rules.push(major.to_string());
            }
        }
    }
    (rules, invariants)
}

#[test]
fn every_cited_protocol_section_exists_in_docs_protocol_md() {
    let (sections, invariants) = defined();
    assert!(
        sections.contains("5.3") && invariants.len() == 16,
        "{sections:?}"
    );
    let mut paths = Vec::new();
    files(&root(), &mut paths);
    let mut missing = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let shown = path
            .strip_prefix(root())
            .unwrap_or(&path)
            .display()
            .to_string();
        for cited in citations(&text) {
            if !sections.contains(&cited) {
                missing.push(format!("{shown}: §{cited}"));
            }
        }
        if shown.ends_with(".rs") {
            let (rules, numbered) = cited_by_names(&text);
            for rule in rules {
                if !sections.contains(&rule) {
                    missing.push(format!("{shown}: test name cites rule {rule}"));
                }
            }
            for n in numbered {
                if !invariants.contains(&n) {
                    missing.push(format!("{shown}: test name cites invariant {n}"));
                }
            }
        }
    }
    assert_eq!(missing, Vec::<String>::new());
}

#[test]
fn no_document_outside_the_repository_is_cited() {
    let mut paths = Vec::new();
    files(&root(), &mut paths);
    let outside: Vec<String> = paths
        .iter()
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            // The shared documents' names, put together here so that this file does
            // not cite them itself.
            ["SPEC", "INTERFACE"].iter().any(|doc| {
                text.contains(&format!("{doc} §")) || text.contains(&format!("{doc}.md"))
            })
        })
        .map(|p| p.display().to_string())
        .collect();
    assert_eq!(outside, Vec::<String>::new());
}
