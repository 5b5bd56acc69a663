//! Where Steward keeps things (README, "Where things live"), resolved once.

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use directories::ProjectDirs;

/// Every path the binary uses.
#[derive(Debug, Clone)]
pub struct Paths {
    pub data_dir: PathBuf,
    pub database: PathBuf,
    #[allow(dead_code)] // used by the commands that run sessions
    pub owners: PathBuf,
    pub logs: PathBuf,
    pub config: PathBuf,
    /// The config file was named by `--config`/`STEWARD_CONFIG`, so it must exist.
    pub config_named: bool,
}

impl Paths {
    pub fn resolve(data_dir: Option<PathBuf>, config: Option<PathBuf>) -> Result<Paths> {
        let dirs = ProjectDirs::from("", "", "steward");
        let named_data_dir = data_dir.is_some();
        let data_dir = match (data_dir, &dirs) {
            (Some(dir), _) => absolute(dir)?,
            (None, Some(dirs)) => dirs.data_dir().to_path_buf(),
            (None, None) => bail!("no home directory to keep data in; pass --data-dir DIR"),
        };
        let logs = match dirs.as_ref().and_then(|d| d.state_dir()) {
            Some(state) if !named_data_dir => state.join("logs"),
            _ => data_dir.join("logs"),
        };
        let (config, config_named) = match (config, &dirs) {
            (Some(file), _) => (absolute(file)?, true),
            (None, Some(dirs)) => (dirs.config_dir().join("config.toml"), false),
            (None, None) => (data_dir.join("config.toml"), false),
        };
        let database = data_dir.join("steward.db");
        Ok(Paths {
            owners: steward_engine::owner::Owners::of_database(&database)
                .dir()
                .to_path_buf(),
            database,
            data_dir,
            logs,
            config,
            config_named,
        })
    }
}

impl Paths {
    /// Steward's own configuration, which file tools ask about every time: the
    /// config file, and the directory it lies in when that is Steward's own (not
    /// one named by `--config`).
    pub fn settings(&self) -> Vec<PathBuf> {
        let mut settings = vec![self.config.clone()];
        if !self.config_named
            && let Some(dir) = self.config.parent()
            && dir != self.data_dir
        {
            settings.push(dir.to_path_buf());
        }
        settings
    }
}

fn absolute(path: PathBuf) -> Result<PathBuf> {
    std::path::absolute(&path).with_context(|| format!("cannot resolve {}", path.display()))
}
