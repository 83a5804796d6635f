//! Shell command analysis with a real bash parser (tree-sitter-bash), as
//! codex-rs does: what commands a script runs and whether it redirects to a
//! file. Text in quotes is data; anything the parser cannot resolve leaves
//! `root_commands` unset so that policy asks.

use tree_sitter::{Node, Parser};

/// What a script does, as far as the parser can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellAnalysis {
    /// Names of every simple command, in order of appearance, deduplicated
    /// (`git`, `rm`, …); `None` when the script has a parse error or a command
    /// whose name is not a literal word (`$cmd args`).
    pub root_commands: Option<Vec<String>>,
    /// The script redirects output to a file (`>`, `>>`, `&>`, …), which is a
    /// write. Redirection to `/dev/null` is not counted.
    pub redirects: bool,
}

/// Analyses `script`.
pub fn analyze(script: &str) -> ShellAnalysis {
    let mut parser = Parser::new();
    if parser
        .set_language(&tree_sitter_bash::LANGUAGE.into())
        .is_err()
    {
        return unresolved();
    }
    let Some(tree) = parser.parse(script, None) else {
        return unresolved();
    };
    let root = tree.root_node();
    if root.has_error() {
        return ShellAnalysis {
            root_commands: None,
            redirects: true,
        };
    }
    let mut walk = Walk {
        src: script.as_bytes(),
        names: Vec::new(),
        resolved: true,
        redirects: false,
    };
    walk.visit(root);
    ShellAnalysis {
        root_commands: walk.resolved.then_some(walk.names),
        redirects: walk.redirects,
    }
}

fn unresolved() -> ShellAnalysis {
    ShellAnalysis {
        root_commands: None,
        redirects: true,
    }
}

struct Walk<'a> {
    src: &'a [u8],
    names: Vec<String>,
    resolved: bool,
    redirects: bool,
}

impl Walk<'_> {
    fn visit(&mut self, node: Node<'_>) {
        match node.kind() {
            "command" => {
                if let Some(name) = node.child_by_field_name("name") {
                    self.command_name(name);
                }
            }
            "file_redirect" => {
                let mut cursor = node.walk();
                let op = node
                    .children(&mut cursor)
                    .find(|c| !c.is_named())
                    .map(|c| c.kind())
                    .unwrap_or("");
                let target = node
                    .child_by_field_name("destination")
                    .and_then(|d| d.utf8_text(self.src).ok())
                    .unwrap_or("");
                let is_input = matches!(op, "<" | "<&" | "<<<" | "<&-");
                // `2>&1`, `>&-`: duplicating or closing a descriptor writes no file.
                let fd_dup = matches!(op, ">&" | "<&" | ">&-")
                    && (target.is_empty()
                        || target == "-"
                        || target.bytes().all(|b| b.is_ascii_digit()));
                if !is_input && !fd_dup && target != "/dev/null" {
                    self.redirects = true;
                }
            }
            _ => {}
        }
        let mut cursor = node.walk();
        for child in node.children(&mut cursor) {
            self.visit(child);
        }
    }

    fn command_name(&mut self, name: Node<'_>) {
        // A literal word only: `$x`, `$(…)` or a quoted name with expansions
        // could be anything.
        let literal = name.kind() == "command_name"
            && name.named_child_count() <= 1
            && name
                .named_child(0)
                .is_none_or(|w| matches!(w.kind(), "word" | "raw_string"));
        match name.utf8_text(self.src) {
            Ok(text) if literal => {
                let text = text.trim_matches(|c| c == '\'' || c == '"').to_string();
                if !self.names.contains(&text) {
                    self.names.push(text);
                }
            }
            _ => self.resolved = false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compound_commands_and_substitutions() {
        let a = analyze("ls -la && echo \"$(whoami)\" | wc -l; git status");
        assert_eq!(
            a.root_commands,
            Some(vec![
                "ls".into(),
                "echo".into(),
                "whoami".into(),
                "wc".into(),
                "git".into()
            ])
        );
        assert!(!a.redirects);
    }

    #[test]
    fn redirection_is_a_write_but_dev_null_is_not() {
        assert!(analyze("wc -l > out.txt").redirects);
        assert!(!analyze("ls 2>/dev/null").redirects);
        assert!(!analyze("ls 2>&1").redirects);
    }

    #[test]
    fn dynamic_command_name_is_unresolved() {
        assert_eq!(analyze("$cmd arg").root_commands, None);
        assert_eq!(analyze("echo 'unterminated").root_commands, None);
    }
}
