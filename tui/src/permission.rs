//! Tool permission through the screen: the engine's [`Permission`] for the TUI. A
//! request waits for the user's answer in the permission modal; "always" answers are
//! remembered for the rest of the run. A request nobody can answer any more (the
//! screen is gone: the user quit) is never answered — it is not the user's denial —
//! and the execution stops with the engine's shutdown, writing nothing.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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
    always: Arc<Mutex<BTreeSet<String>>>,
    next: Arc<AtomicU64>,
}

/// The screen's side: questions to show, and the "always allow" memory.
#[derive(Debug)]
pub struct Asks {
    pub receiver: mpsc::UnboundedReceiver<Ask>,
    always: Arc<Mutex<BTreeSet<String>>>,
    pending: HashMap<u64, oneshot::Sender<Decision>>,
}

/// A connected pair.
pub fn channel() -> (ScreenPermission, Asks) {
    let (asks, receiver) = mpsc::unbounded_channel();
    let always = Arc::new(Mutex::new(BTreeSet::new()));
    (
        ScreenPermission {
            asks,
            always: always.clone(),
            next: Arc::new(AtomicU64::new(1)),
        },
        Asks {
            receiver,
            always,
            pending: HashMap::new(),
        },
    )
}

impl Permission for ScreenPermission {
    fn decide(&self, request: PermissionRequest) -> BoxFuture<Decision> {
        // "Always" covers the tool; a path outside the session asks every time.
        let remembered = request.outside.is_none()
            && self
                .always
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&request.tool);
        if remembered {
            return Box::pin(async { Decision::Allow });
        }
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

    /// Answers question `id`.
    pub fn answer(&mut self, id: u64, allow: bool) {
        if let Some(answer) = self.pending.remove(&id) {
            let _ = answer.send(if allow {
                Decision::Allow
            } else {
                Decision::Deny("Permission denied by the user".into())
            });
        }
    }

    /// Allows `tool` without asking for the rest of the run.
    pub fn allow_always(&self, tool: &str) {
        self.always
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(tool.to_string());
    }
}
