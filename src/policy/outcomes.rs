//! The answers an approval prompt offers and what an "always" answer does to
//! the session: policy rules, decided here and applied by the scheduler.
//!
//! Owns: [`ConfirmationOutcome`], which outcomes a prompt offers
//! ([`offered`]), the "always" narrowing an outcome asks for
//! ([`ConfirmationOutcome::always_scope`]) and the mode switch after an
//! "always" answer ([`mode_after_always`]). Not here: the prompt's state
//! (the scheduler's `approval`), recording the session rule
//! ([`super::SessionRules::allow_always`]).

use super::{AlwaysScope, ApprovalMode, can_always_allow};
use crate::tools::{ConfirmationDetails, ToolKind};

/// The answer to an approval prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfirmationOutcome {
    ProceedOnce,
    ProceedAlways,
    ProceedAlwaysTool,
    ProceedAlwaysServer,
    ModifyWithEditor,
    Cancel,
}

impl ConfirmationOutcome {
    /// The outcome's name: the wire value without its prefix, in snake case
    /// (`CONFIRMATION_OUTCOME_PROCEED_ONCE` is `proceed_once`), for messages
    /// and trace attributes.
    pub fn name(self) -> &'static str {
        match self {
            Self::ProceedOnce => "proceed_once",
            Self::ProceedAlways => "proceed_always",
            Self::ProceedAlwaysTool => "proceed_always_tool",
            Self::ProceedAlwaysServer => "proceed_always_server",
            Self::ModifyWithEditor => "modify_with_editor",
            Self::Cancel => "cancel",
        }
    }

    /// The session rule an answer adds, if it is an "always" answer: the
    /// call's own subject (root command, path, MCP tool) or its whole MCP
    /// server.
    pub fn always_scope(self) -> Option<AlwaysScope> {
        match self {
            Self::ProceedAlways | Self::ProceedAlwaysTool => Some(AlwaysScope::Narrow),
            Self::ProceedAlwaysServer => Some(AlwaysScope::Server),
            Self::ProceedOnce | Self::ModifyWithEditor | Self::Cancel => None,
        }
    }
}

/// The outcomes a prompt offers, by what it asks about (as Gemini CLI):
/// always `proceed_once` and `cancel`; MCP tools offer "always" per tool and
/// per server; a shell command offers "always" only when one of its root
/// commands may be allowed as a whole ([`can_always_allow`]); anything else
/// offers `proceed_always`. `modifiable` (the tool accepts new content)
/// adds `modify_with_editor`.
pub fn offered(details: &ConfirmationDetails, modifiable: bool) -> Vec<ConfirmationOutcome> {
    use ConfirmationOutcome as O;
    let mut outcomes = vec![O::ProceedOnce];
    match details {
        ConfirmationDetails::Mcp { .. } => {
            outcomes.extend([O::ProceedAlwaysTool, O::ProceedAlwaysServer]);
        }
        ConfirmationDetails::Exec { root_commands, .. } => {
            if root_commands.iter().any(|r| can_always_allow(r)) {
                outcomes.push(O::ProceedAlways);
            }
        }
        _ => outcomes.push(O::ProceedAlways),
    }
    if modifiable {
        outcomes.push(O::ModifyWithEditor);
    }
    outcomes.push(O::Cancel);
    outcomes
}

/// The session's mode after an "always" answer to a call of a tool of
/// `kind`: "always" on a file edit switches a `default` session to
/// `auto_edit` (Gemini CLI's behaviour); every other case keeps the mode.
pub fn mode_after_always(mode: ApprovalMode, kind: ToolKind) -> ApprovalMode {
    if kind == ToolKind::Edit && mode == ApprovalMode::Default {
        ApprovalMode::AutoEdit
    } else {
        mode
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConfirmationOutcome as O;

    #[test]
    fn offered_outcomes_by_prompt_kind() {
        let exec = |roots: &[&str]| ConfirmationDetails::Exec {
            command: String::new(),
            root_commands: roots.iter().map(|r| r.to_string()).collect(),
            dir_path: ".".into(),
            write_targets: vec![],
        };
        let mcp = ConfirmationDetails::Mcp {
            server_name: "s".into(),
            tool_name: "t".into(),
            args: Default::default(),
            description: String::new(),
        };
        let info = ConfirmationDetails::Info {
            prompt: String::new(),
        };
        let table: Vec<(ConfirmationDetails, bool, Vec<O>)> = vec![
            (
                exec(&["ls"]),
                false,
                vec![O::ProceedOnce, O::ProceedAlways, O::Cancel],
            ),
            (exec(&["bash"]), false, vec![O::ProceedOnce, O::Cancel]),
            (
                mcp,
                false,
                vec![
                    O::ProceedOnce,
                    O::ProceedAlwaysTool,
                    O::ProceedAlwaysServer,
                    O::Cancel,
                ],
            ),
            (
                info,
                true,
                vec![
                    O::ProceedOnce,
                    O::ProceedAlways,
                    O::ModifyWithEditor,
                    O::Cancel,
                ],
            ),
        ];
        for (details, modifiable, want) in table {
            assert_eq!(offered(&details, modifiable), want, "{details:?}");
        }
    }

    #[test]
    fn always_on_an_edit_switches_default_to_auto_edit_only() {
        use ApprovalMode as M;
        let table = [
            (M::Default, ToolKind::Edit, M::AutoEdit),
            (M::Default, ToolKind::Execute, M::Default),
            (M::Yolo, ToolKind::Edit, M::Yolo),
            (M::Plan, ToolKind::Edit, M::Plan),
            (M::AutoEdit, ToolKind::Edit, M::AutoEdit),
        ];
        for (mode, kind, want) in table {
            assert_eq!(mode_after_always(mode, kind), want, "{mode:?} {kind:?}");
        }
    }
}
