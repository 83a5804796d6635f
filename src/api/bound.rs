//! Every message the server sends fits what a client receives: a gRPC
//! client accepts 4 MiB messages unless told otherwise, and a message over
//! its limit ends the whole stream for it (the client never learns the
//! result nor sees BatchCompleted). So each event is measured as encoded,
//! and when it is over [`super::ServerOptions::max_event_bytes`] its
//! largest strings (a prompt's diff and new content, an MCP result, a
//! progress message, echoed arguments, …) are cut, each with a note saying
//! how much was left out. The domain event is untouched: the full content
//! stays on the server (the write still writes all of it).
//!
//! Tools bound their own output first (output_cap_bytes, MCP results);
//! this is the one backstop for every event kind, whatever a tool returns.

use prost::Message;
use prost_types::{Struct, Value as PbValue, value::Kind};

use super::pb;

/// Default of [`super::ServerOptions::max_event_bytes`]: gRPC's default
/// receive limit (4 MiB), so a client built with default settings gets
/// every message.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;

/// Bytes a cut string keeps at least: a reader still sees how it began.
const MIN_KEPT_BYTES: usize = 1024;

/// Room for the note appended to a cut string.
const NOTE_BYTES: usize = 200;

/// Cuts the largest strings of `msg` until it encodes within `max_bytes`.
/// Returns how many bytes were left out (0 when it already fitted).
pub fn fit(msg: &mut pb::ScheduleCallsResponse, max_bytes: usize) -> usize {
    let mut omitted = 0;
    // Each round cuts enough for the excess it measured; the notes are
    // accounted for, so a second round is rare and a third never needed.
    for _ in 0..4 {
        let len = msg.encoded_len();
        if len <= max_bytes {
            break;
        }
        let mut excess = len - max_bytes;
        let mut strings = Vec::new();
        if let Some(event) = msg.event.as_mut() {
            event_strings(event, &mut strings);
        }
        strings.sort_by_key(|s| std::cmp::Reverse(s.len()));
        for s in strings {
            if excess == 0 || s.len() <= MIN_KEPT_BYTES + NOTE_BYTES {
                break;
            }
            let cut = (excess + NOTE_BYTES).min(s.len() - MIN_KEPT_BYTES);
            let removed = truncate_with_note(s, s.len() - cut, max_bytes);
            omitted += removed;
            excess = excess.saturating_sub(removed.saturating_sub(NOTE_BYTES));
        }
    }
    omitted
}

/// Keeps about `keep` bytes of `s` (on a character boundary) and appends a
/// note with the counts; returns the bytes removed.
fn truncate_with_note(s: &mut String, keep: usize, max_bytes: usize) -> usize {
    let total = s.len();
    let mut end = keep.min(total);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let removed = total - end;
    s.truncate(end);
    s.push_str(&format!(
        "\n… [{removed} of {total} bytes left out here so that the message fits max_event_bytes = {max_bytes}; the server keeps the full content]"
    ));
    removed
}

fn event_strings<'a>(
    event: &'a mut pb::schedule_calls_response::Event,
    out: &mut Vec<&'a mut String>,
) {
    use pb::schedule_calls_response::Event as E;
    match event {
        E::BatchAccepted(_) | E::BatchStarted(_) => {}
        E::CallUpdate(u) => {
            if let Some(state) = u.state.as_mut() {
                state_strings(state, out);
            }
        }
        E::BatchCompleted(c) => {
            for r in &mut c.responses {
                response_strings(r, out);
            }
        }
    }
}

fn state_strings<'a>(state: &'a mut pb::tool_call_update::State, out: &mut Vec<&'a mut String>) {
    use pb::awaiting_approval::Details;
    use pb::tool_call_update::State;
    match state {
        State::Validating(v) => opt_struct_strings(v.args.as_mut(), out),
        State::Scheduled(s) => opt_struct_strings(s.args.as_mut(), out),
        State::AwaitingApproval(a) => {
            out.push(&mut a.reason);
            match a.details.as_mut() {
                Some(Details::Edit(e)) => {
                    out.push(&mut e.diff);
                    out.push(&mut e.new_content);
                }
                Some(Details::Exec(e)) => out.push(&mut e.command),
                Some(Details::Mcp(m)) => {
                    out.push(&mut m.description);
                    opt_struct_strings(m.args.as_mut(), out);
                }
                Some(Details::Info(i)) => out.push(&mut i.prompt),
                None => {}
            }
        }
        State::Executing(x) => {
            out.push(&mut x.output_chunk);
            out.push(&mut x.message);
        }
        State::Success(s) => {
            if let Some(r) = s.response.as_mut() {
                response_strings(r, out);
            }
            opt_struct_strings(s.result.as_mut(), out);
        }
        State::Error(e) => {
            out.push(&mut e.message);
            if let Some(r) = e.response.as_mut() {
                response_strings(r, out);
            }
        }
        State::Cancelled(c) => {
            out.push(&mut c.reason);
            if let Some(r) = c.response.as_mut() {
                response_strings(r, out);
            }
        }
    }
}

fn response_strings<'a>(r: &'a mut pb::FunctionResponse, out: &mut Vec<&'a mut String>) {
    opt_struct_strings(r.response.as_mut(), out);
}

fn opt_struct_strings<'a>(s: Option<&'a mut Struct>, out: &mut Vec<&'a mut String>) {
    if let Some(s) = s {
        for v in s.fields.values_mut() {
            value_strings(v, out);
        }
    }
}

fn value_strings<'a>(v: &'a mut PbValue, out: &mut Vec<&'a mut String>) {
    match v.kind.as_mut() {
        Some(Kind::StringValue(s)) => out.push(s),
        Some(Kind::ListValue(l)) => {
            for v in &mut l.values {
                value_strings(v, out);
            }
        }
        Some(Kind::StructValue(s)) => opt_struct_strings(Some(s), out),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(diff: usize, content: usize) -> pb::ScheduleCallsResponse {
        pb::ScheduleCallsResponse {
            sequence: 3,
            time: None,
            event: Some(pb::schedule_calls_response::Event::CallUpdate(
                pb::ToolCallUpdate {
                    call_id: "w".into(),
                    tool_name: "write_file".into(),
                    state: Some(pb::tool_call_update::State::AwaitingApproval(
                        pb::AwaitingApproval {
                            details: Some(pb::awaiting_approval::Details::Edit(
                                pb::EditConfirmation {
                                    file_path: "big.txt".into(),
                                    diff: "d".repeat(diff),
                                    is_new_file: true,
                                    new_content: "é".repeat(content / 2),
                                },
                            )),
                            ..Default::default()
                        },
                    )),
                },
            )),
        }
    }

    #[test]
    fn an_event_over_the_limit_is_cut_to_fit_and_one_under_is_untouched() {
        for (diff, content, max) in [
            (3 << 20, 3 << 20, DEFAULT_MAX_EVENT_BYTES),
            (5 << 20, 10, DEFAULT_MAX_EVENT_BYTES),
            (100_000, 100_000, 64 * 1024),
        ] {
            let mut msg = prompt(diff, content);
            let omitted = fit(&mut msg, max);
            assert!(omitted > 0);
            assert!(msg.encoded_len() <= max, "{} > {max}", msg.encoded_len());
        }
        // The arguments a person changed at the prompt (Scheduled.args) are
        // cut like every other string.
        let mut args = prost_types::Struct::default();
        args.fields.insert(
            "content".into(),
            prost_types::Value {
                kind: Some(prost_types::value::Kind::StringValue("x".repeat(5 << 20))),
            },
        );
        let mut scheduled = pb::ScheduleCallsResponse {
            sequence: 4,
            time: None,
            event: Some(pb::schedule_calls_response::Event::CallUpdate(
                pb::ToolCallUpdate {
                    call_id: "w".into(),
                    tool_name: "write_file".into(),
                    state: Some(pb::tool_call_update::State::Scheduled(pb::Scheduled {
                        args: Some(args),
                    })),
                },
            )),
        };
        assert!(fit(&mut scheduled, DEFAULT_MAX_EVENT_BYTES) > 0);
        assert!(scheduled.encoded_len() <= DEFAULT_MAX_EVENT_BYTES);
        let mut small = prompt(1000, 1000);
        let before = small.clone();
        assert_eq!(fit(&mut small, DEFAULT_MAX_EVENT_BYTES), 0);
        assert_eq!(small, before);
    }
}
