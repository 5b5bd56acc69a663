//! What every command gets: resolved paths, the config, the clock — and, for the
//! commands that run sessions, a started engine.

use std::sync::Arc;

use anyhow::{Context as _, Result, anyhow};
use steward_engine::clock::SharedClock;
use steward_engine::config::Config;
use steward_engine::db::Db;
use steward_engine::store::Store;
use steward_engine::tools::{Permission, ToolRegistry};
use steward_engine::{Engine, EngineOptions};

use crate::paths::Paths;

#[derive(Debug)]
pub struct Context {
    pub paths: Paths,
    pub config: Config,
    pub clock: SharedClock,
    /// `--provider` or `--model` was given: the user chose them, for a session
    /// named too (protocol §4.17).
    pub model_chosen: bool,
}

impl Context {
    /// Starts an engine over `store`: registers this process as an owner.
    pub async fn start_engine(
        &self,
        store: Store,
        permission: Arc<dyn Permission>,
    ) -> Result<Engine> {
        let provider =
            steward_engine::provider::from_config(&self.config.provider).map_err(|e| anyhow!(e))?;
        let engine = Engine::start(EngineOptions {
            db: Db::start(store),
            owners_dir: self.paths.owners.clone(),
            clock: self.clock.clone(),
            config: self.config.clone(),
            provider,
            tools: ToolRegistry::standard(),
            permission,
        })
        .await?;
        Ok(engine)
    }
}

impl Context {
    /// Starts an engine over `store`, runs `body` with it, and shuts the engine down
    /// however `body` ended — a failure included, so that a failed start leaves no
    /// owner row or lock file behind and nothing it started runs on unreconciled.
    /// `body`'s error comes first; otherwise the shutdown's.
    pub async fn with_engine<T>(
        &self,
        store: Store,
        permission: Arc<dyn Permission>,
        body: impl AsyncFnOnce(&Arc<Engine>) -> Result<T>,
    ) -> Result<T> {
        let engine = Arc::new(self.start_engine(store, permission).await?);
        let result = body(&engine).await;
        let shutdown = engine.shutdown().await;
        let value = result?;
        shutdown.context("shutting down")?;
        Ok(value)
    }
}

/// A runtime for the commands that run sessions.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}
