//! `update_topic`: records what the session is working on. The scheduler runs
//! calls to it first in their batch, as Gemini CLI's scheduler does, so that
//! the frontend can show the new topic before the work it names.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{
    Args, BoxFuture, ConfirmationDetails, Declaration, ExecContext, Invocation, Subject, Tool,
    ToolError, ToolKind, ToolOutcome, str_arg,
};

/// The topic tool's wire name.
pub const TOPIC_TOOL_NAME: &str = "update_topic";

/// `update_topic`.
pub struct UpdateTopicTool {
    decl: Declaration,
}

impl UpdateTopicTool {
    pub fn new() -> Self {
        Self {
            decl: Declaration {
                name: TOPIC_TOOL_NAME.into(),
                description: "Sets the topic the session is working on, shown to the user. Runs before the other calls of its batch.".into(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "topic": {"type": "string", "minLength": 1, "maxLength": 200, "description": "A short title of the current task."}
                    },
                    "required": ["topic"],
                    "additionalProperties": false
                }),
                kind: ToolKind::Think,
                parallelizable: false,
                read_only: true,
            },
        }
    }
}

impl Default for UpdateTopicTool {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for UpdateTopicTool {
    fn declaration(&self) -> &Declaration {
        &self.decl
    }

    fn build(&self, args: &Args) -> Result<Arc<dyn Invocation>, ToolError> {
        Ok(Arc::new(UpdateTopic {
            topic: str_arg(args, "topic")?.to_string(),
        }))
    }
}

struct UpdateTopic {
    topic: String,
}

impl Invocation for UpdateTopic {
    fn subject(&self) -> Subject {
        Subject::Tool
    }

    fn confirmation(&self) -> Result<ConfirmationDetails, ToolError> {
        Ok(ConfirmationDetails::Info {
            prompt: format!("Set topic to {:?}", self.topic),
        })
    }

    /// Nothing to report while it runs: the call gets no progress channel.
    fn reports_progress(&self) -> bool {
        false
    }

    fn execute(self: Arc<Self>, _ctx: ExecContext) -> BoxFuture<ToolOutcome> {
        Box::pin(async move {
            let mut result = Args::new();
            result.insert("topic".into(), json!(self.topic));
            ToolOutcome::Success {
                output: Value::String(format!("Topic set to: {}", self.topic)),
                result,
            }
        })
    }
}
