//! The engine's permission questions, asked through `session/request_permission`.

use super::*;

/// Tool permission through the client: `session/request_permission` with allow
/// once, allow always (for the rest of the session) and reject. A cancelled
/// request, or a closed connection, denies; so does a session the client did not
/// open, which is never asked about.
#[derive(Debug, Clone)]
pub struct ClientPermission {
    pub outbox: Outbox,
    pub views: Arc<Views>,
}

impl Permission for ClientPermission {
    fn decide(&self, request: PermissionRequest) -> BoxFuture<Decision> {
        let (outbox, views) = (self.outbox.clone(), self.views.clone());
        Box::pin(async move {
            let session = request.session_id.clone();
            let denied = |why: &str| Decision::Deny(format!("Permission denied: {why}"));
            if !views.is_open(&session) {
                return denied("the session is not open in the client");
            }
            let mut fields = ToolCallUpdateFields::new()
                .title(updates::title(&request.tool, &request.input))
                .kind(updates::kind(&request.tool))
                .status(ToolCallStatus::Pending)
                .raw_input(request.input.clone());
            let mut content = Vec::new();
            if let Some(guarded) = &request.guarded {
                content.push(agent_client_protocol_schema::v1::ToolCallContent::from(
                    format!(
                        "It touches {}, {}: asked every time.",
                        guarded.path.display(),
                        guarded.guard.describe()
                    ),
                ));
            }
            // An edit is asked about with what it would change, where.
            if let Some(diff) = &request.diff {
                content.extend(updates::diff_content(diff));
                fields = fields.locations(vec![
                    agent_client_protocol_schema::v1::ToolCallLocation::new(diff.path.clone())
                        .line(diff.changed_line()),
                ]);
            } else if let Some(guarded) = &request.guarded {
                fields = fields.locations(vec![
                    agent_client_protocol_schema::v1::ToolCallLocation::new(guarded.path.clone()),
                ]);
            }
            if !content.is_empty() {
                fields = fields.content(content);
            }
            // A call that touches a guarded path asks every time: no "always" is
            // offered for it (and an "always" answer allows it once).
            let mut options = vec![PermissionOption::new(
                "allow_once",
                "Allow once",
                PermissionOptionKind::AllowOnce,
            )];
            if request.guarded.is_none() {
                options.push(PermissionOption::new(
                    "allow_always",
                    format!("Always allow {} in this session", request.tool),
                    PermissionOptionKind::AllowAlways,
                ));
            }
            options.push(PermissionOption::new(
                "reject_once",
                "Reject",
                PermissionOptionKind::RejectOnce,
            ));
            let ask = RequestPermissionRequest::new(
                session.clone(),
                ToolCallUpdate::new(request.call_id.clone(), fields),
                options,
            );
            let Ok(params) = serde_json::to_value(ask) else {
                return denied("the request could not be sent");
            };
            // The client hears of the tool call before it is asked about it.
            views.barrier().await;
            match outbox.request("session/request_permission", params).await {
                Some(Ok(answer)) => {
                    match serde_json::from_value::<RequestPermissionResponse>(answer) {
                        Ok(response) => match response.outcome {
                            RequestPermissionOutcome::Selected(selected) => {
                                match &*selected.option_id.0 {
                                    "allow_once" => Decision::Allow,
                                    "allow_always" => Decision::AllowAlways,
                                    _ => denied("the user rejected the call"),
                                }
                            }
                            RequestPermissionOutcome::Cancelled => {
                                denied("the request was cancelled")
                            }
                            _ => denied("an answer Steward does not know"),
                        },
                        Err(_) => denied("the client's answer could not be read"),
                    }
                }
                Some(Err(error)) => denied(&format!("the client answered with an error: {error}")),
                None => denied("the client went away"),
            }
        })
    }
}
