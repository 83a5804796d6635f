//! Approval prompts of a running batch: opening a prompt once its details
//! are ready, answering it (Confirm), and re-deciding the other open prompts
//! of the wave after an "always" answer.
//!
//! Owns: the AwaitingApproval side of [`Batch`] (synchronous, like the rest
//! of the engine: inputs in, [`Effect`]s out). Not here: which outcomes a
//! prompt offers and what an "always" answer does to the session's mode
//! (policy rules: `policy::outcomes`), recording the session rule and mode
//! (`session.rs`, from [`Confirmed::always`]), building the prompt's
//! details (off the runtime, by the session).

use std::time::SystemTime;

use super::ConfirmError;
use super::batch::{Batch, Decider, Effect};
use super::call::{CallState, Prompt};
use super::events::{ConfirmRequest, ConfirmationOutcome};
use crate::policy::{AlwaysScope, Decision, DecisionSource, outcomes};
use crate::tools::{ConfirmationDetails, Registry, Subject, ToolError, ToolKind};

/// What an accepted answer did.
pub(crate) struct Confirmed {
    pub effects: Vec<Effect>,
    /// An "always" answer: the session records this rule, may switch mode
    /// ([`outcomes::mode_after_always`]), then calls
    /// [`Batch::approve_open_prompts`].
    pub always: Option<AlwaysGrant>,
}

/// The session rule an "always" answer asks for.
pub(crate) struct AlwaysGrant {
    pub tool_name: String,
    pub subject: Subject,
    pub scope: AlwaysScope,
    /// The kind of the approved call's tool.
    pub kind: ToolKind,
}

/// An answer to an open prompt, checked ([`Batch::vet`]).
enum Vetted {
    /// Cancel (nothing more is checked for it).
    Cancel,
    /// The invocation to run or re-prompt with (built again from inline
    /// new content), the new arguments, and the "always" rule asked for.
    Proceed {
        invocation: std::sync::Arc<dyn crate::tools::Invocation>,
        new_args: Option<crate::tools::Args>,
        always: Option<AlwaysGrant>,
    },
}

/// Who applied an answer the store recorded (the audit line's principal:
/// the person who gave it was named on the replica that stopped).
const RECORDED_ANSWER_BY: &str = "(recorded answer)";

impl Batch {
    /// What [`Batch::on_confirm`] would do with `req`, without doing it:
    /// the error it would give, or the "always" rule it would ask for.
    /// With a durable store the answer is recorded between the two.
    pub fn check_confirm(
        &self,
        index: usize,
        req: &ConfirmRequest,
        registry: &Registry,
    ) -> Result<Option<AlwaysGrant>, ConfirmError> {
        Ok(match self.vet(index, req, registry)? {
            Vetted::Cancel => None,
            Vetted::Proceed { always, .. } => always,
        })
    }

    /// Checks `req` against call `index`'s open prompt (the one check of
    /// [`Batch::check_confirm`] and [`Batch::on_confirm`]): the prompt is
    /// open under this correlation id, the outcome offered, new content
    /// accepted by the tool and its arguments valid. Changes nothing.
    fn vet(
        &self,
        index: usize,
        req: &ConfirmRequest,
        registry: &Registry,
    ) -> Result<Vetted, ConfirmError> {
        let slot = &self.calls[index];
        let CallState::AwaitingApproval {
            invocation,
            correlation_id,
            outcomes,
        } = &slot.state
        else {
            return Err(ConfirmError::NotAwaitingApproval {
                call_id: req.call_id.clone(),
            });
        };
        if *correlation_id != req.correlation_id {
            return Err(ConfirmError::StaleCorrelation {
                call_id: req.call_id.clone(),
                given: req.correlation_id.clone(),
            });
        }
        if !outcomes.contains(&req.outcome) {
            return Err(ConfirmError::OutcomeNotOffered {
                outcome: req.outcome,
                offered: outcomes.clone(),
            });
        }
        if req.outcome == ConfirmationOutcome::Cancel {
            return Ok(Vetted::Cancel);
        }
        let mut invocation = invocation.clone();
        let mut new_args = None;
        if let Some(content) = &req.new_content {
            let cannot = || ConfirmError::CannotModify {
                tool: slot.request.name.clone(),
            };
            let tool = slot.tool.clone().ok_or_else(cannot)?;
            let args = tool
                .with_new_content(&slot.request.args, content)
                .ok_or_else(cannot)?;
            invocation = registry
                .build(&slot.request.name, &args)
                .map_err(|e| ConfirmError::InvalidNewContent { message: e.message })?;
            new_args = Some(args);
        }
        let always = match req.outcome {
            // A re-prompt asks for no rule.
            ConfirmationOutcome::ModifyWithEditor => None,
            outcome => outcome.always_scope().map(|scope| AlwaysGrant {
                tool_name: slot.request.name.clone(),
                subject: invocation.subject(),
                scope,
                kind: slot
                    .tool
                    .as_ref()
                    .map_or(ToolKind::Other, |t| t.declaration().kind),
            }),
        };
        Ok(Vetted::Proceed {
            invocation,
            new_args,
            always,
        })
    }

    /// Applies a final answer the store recorded to call `index` (still
    /// Validating, policy asking) of a batch taken over: cancel rejects it,
    /// new content replaces its arguments, a proceed schedules it (an
    /// "always" one also gives [`Effect::Always`]). An answer that no longer
    /// applies (new content the tool refuses now) leaves it to be prompted.
    pub(super) fn apply_recorded(
        &mut self,
        index: usize,
        invocation: std::sync::Arc<dyn crate::tools::Invocation>,
        outcome: ConfirmationOutcome,
        new_content: Option<String>,
        effects: &mut Vec<Effect>,
    ) {
        let by: std::sync::Arc<str> = RECORDED_ANSWER_BY.into();
        if outcome == ConfirmationOutcome::Cancel {
            self.calls[index].note_approval(outcome, &by);
            effects.extend(self.reject(index));
            return;
        }
        let mut invocation = invocation;
        if let Some(content) = &new_content {
            let slot = &self.calls[index];
            let built = slot.tool.clone().and_then(|tool| {
                let args = tool.with_new_content(&slot.request.args, content)?;
                let invocation = tool.build(&args).ok()?;
                Some((args, invocation))
            });
            let Some((args, built)) = built else {
                self.prompt_instead(index, invocation, effects);
                return;
            };
            invocation = built;
            self.calls[index].modify(args);
        }
        let slot = &mut self.calls[index];
        slot.note_approval(outcome, &by);
        if let Some(scope) = outcome.always_scope() {
            effects.push(Effect::Always(AlwaysGrant {
                tool_name: slot.request.name.clone(),
                subject: invocation.subject(),
                scope,
                kind: slot
                    .tool
                    .as_ref()
                    .map_or(ToolKind::Other, |t| t.declaration().kind),
            }));
        }
        let update = slot.schedule(invocation);
        self.emit(index, update, effects);
    }

    /// Call `index` is prompted after all (see [`Batch::apply_recorded`]).
    fn prompt_instead(
        &mut self,
        index: usize,
        invocation: std::sync::Arc<dyn crate::tools::Invocation>,
        effects: &mut Vec<Effect>,
    ) {
        if self.calls[index].prepare_prompt(invocation.clone()) {
            effects.push(Effect::PreparePrompt {
                index,
                invocation,
                reason: None,
            });
        }
    }

    /// Answers the prompt of call `index`. On an error nothing changed.
    pub fn on_confirm(
        &mut self,
        index: usize,
        req: ConfirmRequest,
        registry: &Registry,
    ) -> Result<Confirmed, ConfirmError> {
        let Vetted::Proceed {
            invocation,
            new_args,
            always,
        } = self.vet(index, &req, registry)?
        else {
            self.calls[index].note_approval(req.outcome, &req.principal);
            return Ok(Confirmed {
                effects: self.reject(index),
                always: None,
            });
        };
        // Inline new content is applied only now: on any error above
        // nothing changed.
        if let Some(args) = new_args {
            self.calls[index].modify(args);
        }
        let slot = &mut self.calls[index];
        slot.note_approval(req.outcome, &req.principal);
        let mut effects = Vec::new();
        if req.outcome == ConfirmationOutcome::ModifyWithEditor {
            // Re-prompt with the (possibly modified) call: a new
            // correlation id once its details are ready.
            if slot.prepare_prompt(invocation.clone()) {
                effects.push(Effect::PreparePrompt {
                    index,
                    invocation,
                    reason: None,
                });
            }
            return Ok(Confirmed {
                effects,
                always: None,
            });
        }
        let update = slot.schedule(invocation);
        self.emit(index, update, &mut effects);
        Ok(Confirmed { effects, always })
    }

    /// After an "always" answer, the other open prompts of the wave that the
    /// new rule (or mode) now allows proceed, as Gemini CLI does.
    pub fn approve_open_prompts(&mut self, decider: &Decider<'_>) -> Vec<Effect> {
        let mut effects = Vec::new();
        for index in self.phase.members().to_vec() {
            let slot = &self.calls[index];
            let CallState::AwaitingApproval { invocation, .. } = &slot.state else {
                continue;
            };
            let invocation = invocation.clone();
            if decider.decide(slot, invocation.as_ref()) == Some(Decision::Allow) {
                let update = self.calls[index].schedule(invocation);
                self.emit(index, update, &mut effects);
            }
        }
        effects
    }

    /// Call `index`'s prompt details are built: the call awaits approval
    /// under a fresh correlation id, with the outcomes policy offers and the
    /// confirmation deadline. `reason` is the policy's; `None` (a re-prompt)
    /// gives a generic one. A call cancelled meanwhile stays as it is.
    pub fn on_prompt_ready(
        &mut self,
        decider: &Decider<'_>,
        index: usize,
        result: Result<ConfirmationDetails, ToolError>,
        reason: Option<(String, DecisionSource)>,
    ) -> Vec<Effect> {
        let mut effects = Vec::new();
        let timeout = self.confirmation_timeout;
        let Some(slot) = self.calls.get_mut(index) else {
            return effects;
        };
        if !matches!(slot.state, CallState::PreparingPrompt { .. }) {
            return effects; // cancelled meanwhile
        }
        let details = match result {
            Ok(d) => d,
            Err(e) => {
                let update = slot.fail(e.kind, &e.message, None);
                self.emit(index, update, &mut effects);
                return effects;
            }
        };
        let (reason, policy_rule) = match reason {
            Some((reason, source)) => (reason, Some(source)),
            None => (
                format!(
                    "Approval required: '{}' has side effects and the session is in {} mode.",
                    slot.request.name,
                    crate::policy::mode_name(decider.mode)
                ),
                None,
            ),
        };
        let modifiable = slot
            .tool
            .as_ref()
            .is_some_and(|t| t.with_new_content(&slot.request.args, "").is_some());
        let correlation_id = uuid::Uuid::new_v4().to_string();
        let update = slot.await_approval(Prompt {
            correlation_id: correlation_id.clone(),
            outcomes: outcomes::offered(&details, modifiable),
            details,
            deadline: timeout.map(|t| SystemTime::now() + t),
            reason,
            policy_rule,
        });
        let opened = update.is_some();
        self.emit(index, update, &mut effects);
        if let (true, Some(after)) = (opened, timeout) {
            effects.push(Effect::ArmConfirmTimeout {
                index,
                correlation_id,
                after,
            });
        }
        effects
    }
}
