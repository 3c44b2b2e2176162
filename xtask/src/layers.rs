//! The host's layer check: each module of `host/src` may use only the
//! modules above it in the order that `host/src/lib.rs`'s doc lists them
//! (its `- [`name`]` lines, top to bottom). That list is the one table of
//! the order; this check reads it, so it cannot drift from the code.
//!
//! A use is any `crate::name` path in a file's tokens, in `use` trees
//! (`crate::{a, b::C}`), expressions, attributes and macro arguments alike;
//! comments are not tokens and do not count.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{Context, Result, bail};
use proc_macro2::{Delimiter, TokenStream, TokenTree};

/// One use of a module from a module below it.
#[derive(Debug, PartialEq, Eq)]
pub struct Violation {
    pub file: PathBuf,
    pub line: usize,
    pub module: String,
    pub uses: String,
}

/// The modules in layer order, read from the crate root's doc, checked
/// against the modules it declares.
pub fn order(lib: &str) -> Result<Vec<String>> {
    let mut listed = Vec::new();
    for line in lib.lines() {
        let Some(doc) = line.trim_start().strip_prefix("//!") else {
            continue;
        };
        if let Some(rest) = doc.trim_start().strip_prefix("- [`")
            && let Some((name, _)) = rest.split_once("`]")
        {
            listed.push(name.to_string());
        }
    }
    let declared: BTreeSet<String> = lib
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let rest = line
                .strip_prefix("pub mod ")
                .or_else(|| line.strip_prefix("pub(crate) mod "))
                .or_else(|| line.strip_prefix("mod "))?;
            Some(rest.trim_end_matches(';').trim().to_string())
        })
        .collect();
    let mut seen = BTreeSet::new();
    for name in &listed {
        if !seen.insert(name.clone()) {
            bail!("lib.rs lists `{name}` twice in its layer order");
        }
        if !declared.contains(name) {
            bail!("lib.rs lists `{name}` in its layer order but declares no such module");
        }
    }
    if let Some(missing) = declared.iter().find(|name| !seen.contains(*name)) {
        bail!("lib.rs declares `mod {missing}` but its doc does not place it in the layer order");
    }
    Ok(listed)
}

/// The `crate::name` uses in a file's text, with their lines.
pub fn uses(text: &str) -> Result<Vec<(String, usize)>> {
    let tokens = TokenStream::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut found = Vec::new();
    walk(tokens, &mut found);
    Ok(found)
}

fn walk(tokens: TokenStream, found: &mut Vec<(String, usize)>) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    for (i, token) in tokens.iter().enumerate() {
        match token {
            TokenTree::Group(group) => walk(group.stream(), found),
            TokenTree::Ident(ident) if ident == "crate" => {
                if let Some(rest) = after_path_sep(&tokens[i + 1..]) {
                    match rest {
                        TokenTree::Ident(name) => {
                            found.push((name.to_string(), name.span().start().line));
                        }
                        TokenTree::Group(group) if group.delimiter() == Delimiter::Brace => {
                            firsts(group.stream(), found);
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
}

/// The token after a `::` at the start of `tokens`.
fn after_path_sep(tokens: &[TokenTree]) -> Option<&TokenTree> {
    match tokens {
        [TokenTree::Punct(a), TokenTree::Punct(b), next, ..]
            if a.as_char() == ':' && b.as_char() == ':' =>
        {
            Some(next)
        }
        _ => None,
    }
}

/// The first name of each comma-separated path of a `use crate::{…}` group.
fn firsts(group: TokenStream, found: &mut Vec<(String, usize)>) {
    let mut at_start = true;
    for token in group {
        match &token {
            TokenTree::Punct(p) if p.as_char() == ',' => at_start = true,
            TokenTree::Ident(name) if at_start => {
                if name != "self" {
                    found.push((name.to_string(), name.span().start().line));
                }
                at_start = false;
            }
            _ => at_start = false,
        }
    }
}

/// Every use, in the host's sources, of a module from one below it.
pub fn check(src: &Path) -> Result<Vec<Violation>> {
    let lib = std::fs::read_to_string(src.join("lib.rs")).context("reading lib.rs")?;
    let order = order(&lib)?;
    let rank = |name: &str| order.iter().position(|m| m == name);
    let mut violations = Vec::new();
    for file in rust_files(src)? {
        let relative = file.strip_prefix(src).unwrap_or(&file);
        let first = relative
            .components()
            .next()
            .map(|c| {
                c.as_os_str()
                    .to_string_lossy()
                    .trim_end_matches(".rs")
                    .to_string()
            })
            .unwrap_or_default();
        // The crate root and the binary are not layers.
        let Some(own) = rank(&first) else { continue };
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let found = uses(&text).with_context(|| format!("tokenizing {}", file.display()))?;
        for (name, line) in found {
            if let Some(theirs) = rank(&name)
                && theirs > own
            {
                violations.push(Violation {
                    file: relative.to_path_buf(),
                    line,
                    module: first.clone(),
                    uses: name,
                });
            }
        }
    }
    Ok(violations)
}

fn rust_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uses_are_found_in_paths_groups_and_macros_but_not_comments() {
        let text = "use crate::time::now;\nuse crate::{events::Events, tasks};\n// crate::http\nfn f() { tracing::info!(x = ?crate::observe::X); }\n#[utoipa::path(body = crate::failover::View)]\nfn g() {}\n";
        let names: Vec<_> = uses(text).unwrap();
        assert_eq!(
            names,
            [
                ("time".to_string(), 1),
                ("events".to_string(), 2),
                ("tasks".to_string(), 2),
                ("observe".to_string(), 4),
                ("failover".to_string(), 5),
            ]
        );
    }

    #[test]
    fn the_order_comes_from_the_doc_and_covers_every_module() {
        let lib = "//! - [`time`]: times\n//! - [`http`]: the edge\npub mod time;\npub mod http;\n";
        assert_eq!(order(lib).unwrap(), ["time", "http"]);
        let unlisted = "//! - [`time`]: times\npub mod time;\nmod http;\n";
        assert!(
            order(unlisted)
                .unwrap_err()
                .to_string()
                .contains("`mod http`")
        );
        let undeclared = "//! - [`time`]: times\n//! - [`gone`]: x\npub mod time;\n";
        assert!(
            order(undeclared)
                .unwrap_err()
                .to_string()
                .contains("`gone`")
        );
    }
}
