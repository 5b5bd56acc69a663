//! The dispatch gate of MCP calls (protocol §4.16): a `tools/call` request is held
//! in the transport until the runner has committed `tool.started` with its request
//! id, then let out — or, if the commit failed, never sent at all.
//!
//! [`Gated`] wraps a transport. Every `tools/call` it is handed waits at the gate of
//! its request id; [`Gates::open`] lets it out, [`Gates::close`] drops it unsent.
//! Either side may arrive first: the gate is made by whichever does.
//!
//! It also bounds what a server may send Steward's way: a server's notifications
//! are dropped (Steward acts on none of them), and of its requests (`ping`,
//! `roots/list`, …) at most [`MAX_SERVER_REQUESTS`] wait for their answer at once —
//! the rest are dropped — so a server that floods Steward grows neither its memory
//! nor its log.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::RoleClient;
use rmcp::model::{ClientRequest, JsonRpcMessage, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::watch;

/// The gates of one server's calls, by request id.
#[derive(Debug, Default)]
pub(crate) struct Gates {
    gates: Mutex<HashMap<RequestId, Arc<watch::Sender<Option<bool>>>>>,
}

impl Gates {
    fn gate(&self, id: &RequestId) -> Arc<watch::Sender<Option<bool>>> {
        let mut gates = self.gates.lock().unwrap_or_else(|e| e.into_inner());
        gates
            .entry(id.clone())
            .or_insert_with(|| Arc::new(watch::channel(None).0))
            .clone()
    }

    fn forget(&self, id: &RequestId) {
        self.gates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }

    /// Lets the call `id` out.
    pub(crate) fn open(&self, id: &RequestId) {
        self.gate(id).send_replace(Some(true));
    }

    /// Drops the call `id` unsent.
    pub(crate) fn close(&self, id: &RequestId) {
        self.gate(id).send_replace(Some(false));
    }
}

/// Why a message was not sent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GateError {
    #[error("the call was never sent: its start was not recorded")]
    Held,
    #[error("{0}")]
    Transport(Box<dyn std::error::Error + Send + Sync>),
}

/// The most requests of a server's that wait for Steward's answer at once.
pub(crate) const MAX_SERVER_REQUESTS: usize = 16;

/// A transport whose `tools/call` requests wait at their gate.
#[derive(Debug)]
pub(crate) struct Gated<T> {
    inner: T,
    gates: Arc<Gates>,
    /// The server's requests taken and not answered yet.
    answering: Arc<AtomicUsize>,
}

impl<T> Gated<T> {
    pub(crate) fn new(inner: T, gates: Arc<Gates>) -> Self {
        Gated {
            inner,
            gates,
            answering: Arc::new(AtomicUsize::new(0)),
        }
    }
}

impl<T> Transport<RoleClient> for Gated<T>
where
    T: Transport<RoleClient> + 'static,
{
    type Error = GateError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let gated = match &item {
            JsonRpcMessage::Request(request)
                if matches!(request.request, ClientRequest::CallToolRequest(_)) =>
            {
                let id = request.id.clone();
                let gate = self.gates.gate(&id).subscribe();
                Some((id, gate))
            }
            _ => None,
        };
        // An answer to one of the server's requests frees its place.
        if matches!(item, JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_)) {
            let _ = self
                .answering
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        }
        // Both transports Steward uses do nothing until their send is polled.
        let send = self.inner.send(item);
        let gates = self.gates.clone();
        async move {
            if let Some((id, mut gate)) = gated {
                let open = gate
                    .wait_for(Option::is_some)
                    .await
                    .is_ok_and(|decided| *decided == Some(true));
                gates.forget(&id);
                if !open {
                    return Err(GateError::Held);
                }
                send.await.map_err(|e| GateError::Transport(Box::new(e)))?;
                crate::failpoint!("mcp.after_call_sent");
                return Ok(());
            }
            send.await.map_err(|e| GateError::Transport(Box::new(e)))
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let message = self.inner.receive().await?;
            match &message {
                JsonRpcMessage::Notification(_) => continue,
                JsonRpcMessage::Request(_) => {
                    let taken =
                        self.answering
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                                (n < MAX_SERVER_REQUESTS).then_some(n + 1)
                            });
                    if taken.is_err() {
                        continue;
                    }
                }
                _ => {}
            }
            return Some(message);
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inner
            .close()
            .await
            .map_err(|e| GateError::Transport(Box::new(e)))
    }
}
