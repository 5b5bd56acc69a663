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
    /// Where the config file is when none is named.
    pub default_config: PathBuf,
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
        let default_config = match &dirs {
            Some(dirs) => dirs.config_dir().join("config.toml"),
            None => data_dir.join("config.toml"),
        };
        let (config, config_named) = match config {
            Some(file) => (absolute(file)?, true),
            None => (default_config.clone(), false),
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
            default_config,
        })
    }
}

impl Paths {
    /// Steward's own configuration, which file tools ask about every time: the
    /// config file in use, the one a run without `--config` would load, and the
    /// directory that one lies in (Steward's own).
    pub fn settings(&self) -> Vec<PathBuf> {
        let mut settings = vec![self.config.clone(), self.default_config.clone()];
        if let Some(dir) = self.default_config.parent()
            && dir != self.data_dir
        {
            settings.push(dir.to_path_buf());
        }
        settings.dedup();
        settings
    }
}

fn absolute(path: PathBuf) -> Result<PathBuf> {
    std::path::absolute(&path).with_context(|| format!("cannot resolve {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r4_13_the_default_config_is_guarded_when_another_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let named = dir.path().join("project/cfg.toml");
        let paths = Paths::resolve(Some(dir.path().join("data")), Some(named.clone())).unwrap();
        let settings = paths.settings();
        assert!(settings.contains(&named), "{settings:?}");
        assert!(
            settings.contains(&paths.default_config),
            "a later run without --config loads it: {settings:?}"
        );
        assert!(settings.contains(&paths.default_config.parent().unwrap().to_path_buf()));
    }
}
