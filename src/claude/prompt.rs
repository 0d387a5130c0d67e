//! `prompt` handlers (`type: "prompt"`): one question to a model [`Provider`], with Claude
//! Code's prompt and answer schema.
//!
//! * The handler's text with `$ARGUMENTS` replaced by the hook input JSON (appended after
//!   `ARGUMENTS:` when the text has none; `\$` is a literal `$`) is the user message, after a
//!   system message that asks for the answer schema.
//! * The answer `{"ok": true}` lets the event proceed; `{"ok": false, "reason": "..."}` blocks
//!   it with the reason (see [`prompt_answer`](super::output::prompt_answer) for each event).
//! * A timeout (30 s unless the handler sets one), a provider error, an answer that is not
//!   that schema, or no provider at all is a non-blocking error: the event proceeds (fail
//!   open), unless the handler says `onFailure: "block"`.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::output::{prompt_answer, prompt_failure, HandlerOutcome, HandlerReport};
use crate::agent::provider::{Message, ModelRequest, Provider};
use crate::model::event::EventKind;

/// The system message of a prompt handler's model call: the answer schema.
pub const PROMPT_SYSTEM: &str = "You are a hook of an AI agent's runtime. The user message \
states a condition and gives the data of one lifecycle event of the agent as JSON. Decide \
whether the condition holds for that event. Answer with one JSON object and nothing else: \
{\"ok\": true} when it holds, or {\"ok\": false, \"reason\": \"...\"} when it does not, the \
reason written for the agent, which reads it.";

/// One prompt handler's call.
pub(crate) struct PromptCall<'a> {
    /// The handler's text.
    pub prompt: &'a str,
    /// The hook input, as JSON text.
    pub input: &'a str,
    /// The event it runs on.
    pub event: EventKind,
    /// The session it runs in.
    pub session_id: &'a str,
    /// `continueOnBlock`.
    pub continue_on_block: bool,
    /// `onFailure: "block"`.
    pub on_failure_block: bool,
    /// Its timeout.
    pub timeout: Duration,
    /// The hook call's token (timeout, cancelled turn).
    pub cancel: &'a CancellationToken,
}

/// The prompt text with `$ARGUMENTS` replaced by `input` (or `input` appended when there is
/// none); `\$` is a literal `$`.
pub fn with_arguments(prompt: &str, input: &str) -> String {
    let mut out = String::with_capacity(prompt.len() + input.len());
    let mut rest = prompt;
    let mut found = false;
    while let Some(at) = rest.find(['\\', '$']) {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("\\$") {
            out.push('$');
            rest = after;
        } else if let Some(after) = tail.strip_prefix("$ARGUMENTS") {
            out.push_str(input);
            found = true;
            rest = after;
        } else {
            // A lone `\` or `$`: kept as written.
            out.push_str(&tail[..1]);
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    if !found {
        out.push_str("\n\nARGUMENTS: ");
        out.push_str(input);
    }
    out
}

/// Asks `provider` (none: a non-blocking error) and reads its answer.
pub(crate) async fn evaluate(
    provider: Option<Arc<dyn Provider>>,
    call: PromptCall<'_>,
) -> HandlerReport {
    let fail = |outcome, message: String| {
        prompt_failure(call.event, outcome, call.on_failure_block, message)
    };
    let Some(provider) = provider else {
        return fail(
            HandlerOutcome::NonBlockingError,
            "no model provider answers prompt hooks here (give one with \
             `ClaudeSettings::with_provider`, or `--provider` to replay)"
                .into(),
        );
    };
    let messages = [
        Message::system(PROMPT_SYSTEM),
        Message::user(with_arguments(call.prompt, call.input)),
    ];
    let request = ModelRequest {
        session_id: call.session_id,
        agent_type: None,
        messages: &messages,
        tools: &[],
    };
    let own = call.cancel.child_token();
    let answer = tokio::select! {
        biased;
        _ = call.cancel.cancelled() => {
            return HandlerReport::with_outcome(HandlerOutcome::Cancelled, None);
        }
        answer = tokio::time::timeout(call.timeout, provider.complete(request, &own)) => answer,
    };
    match answer {
        Err(_) => {
            own.cancel();
            fail(
                HandlerOutcome::Timeout,
                format!(
                    "the model did not answer within {} s",
                    call.timeout.as_secs_f64()
                ),
            )
        }
        Ok(Err(e)) => fail(
            HandlerOutcome::NonBlockingError,
            format!("the model call failed: {e}"),
        ),
        Ok(Ok(response)) => prompt_answer(
            call.event,
            &response.text,
            call.continue_on_block,
            call.on_failure_block,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_substituted_escaped_or_appended() {
        assert_eq!(with_arguments("Check $ARGUMENTS.", "{}"), "Check {}.");
        assert_eq!(with_arguments("a $ARGUMENTS b $ARGUMENTS", "X"), "a X b X");
        assert_eq!(
            with_arguments("Costs \\$5, see \\$ARGUMENTS", "{}"),
            "Costs $5, see $ARGUMENTS\n\nARGUMENTS: {}"
        );
        assert_eq!(
            with_arguments("Is it safe?", "{}"),
            "Is it safe?\n\nARGUMENTS: {}"
        );
        assert_eq!(
            with_arguments("$HOME \\n €$", "I"),
            "$HOME \\n €$\n\nARGUMENTS: I"
        );
    }
}
