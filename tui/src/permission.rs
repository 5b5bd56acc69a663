//! Tool permission through the screen: the engine's [`Permission`] for the TUI. A
//! request waits for the user's answer in the permission modal; the engine remembers
//! "always" answers (its one rule for every front end). A request nobody can answer
//! any more (the screen is gone: the user quit) is never answered — it is not the
//! user's denial — and the execution stops with the engine's shutdown, writing
//! nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use steward_engine::tools::{BoxFuture, Decision, Permission, PermissionRequest};
use tokio::sync::{mpsc, oneshot};

/// One question for the user.
#[derive(Debug)]
pub struct Ask {
    pub id: u64,
    pub request: PermissionRequest,
    pub answer: oneshot::Sender<Decision>,
}

/// The engine's side: hand this to the engine as its permission policy.
#[derive(Debug, Clone)]
pub struct ScreenPermission {
    asks: mpsc::UnboundedSender<Ask>,
    next: Arc<AtomicU64>,
}

/// The screen's side: questions to show.
#[derive(Debug)]
pub struct Asks {
    pub receiver: mpsc::UnboundedReceiver<Ask>,
    pending: HashMap<u64, oneshot::Sender<Decision>>,
}

/// A connected pair.
pub fn channel() -> (ScreenPermission, Asks) {
    let (asks, receiver) = mpsc::unbounded_channel();
    (
        ScreenPermission {
            asks,
            next: Arc::new(AtomicU64::new(1)),
        },
        Asks {
            receiver,
            pending: HashMap::new(),
        },
    )
}

impl Permission for ScreenPermission {
    fn decide(&self, request: PermissionRequest) -> BoxFuture<Decision> {
        let (answer, answered) = oneshot::channel();
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let tool = request.tool.clone();
        let sent = self.asks.send(Ask {
            id,
            request,
            answer,
        });
        Box::pin(async move {
            if sent.is_ok()
                && let Ok(decision) = answered.await
            {
                return decision;
            }
            tracing::info!(tool = %tool, "a permission question was left unanswered: the screen closed");
            std::future::pending().await
        })
    }
}

impl Asks {
    /// Keeps the answer channel of a question being shown.
    pub fn hold(&mut self, ask: Ask) -> (u64, PermissionRequest) {
        self.pending.insert(ask.id, ask.answer);
        (ask.id, ask.request)
    }

    /// Answers question `id`: allowed once, always (in its session), or denied.
    pub fn answer(&mut self, id: u64, allow: bool, always: bool) {
        if let Some(answer) = self.pending.remove(&id) {
            let _ = answer.send(match (allow, always) {
                (true, true) => Decision::AllowAlways,
                (true, false) => Decision::Allow,
                (false, _) => Decision::Deny("Permission denied by the user".into()),
            });
        }
    }
}
