//! Settings, read from TOML by the binary (`config.toml`) and passed in whole.
//! Unknown keys are errors that name the key: a typo must never be silently ignored.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// The whole configuration. Every section and key is optional.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub provider: ProviderConfig,
    pub tools: ToolsConfig,
    pub lease: LeaseConfig,
    pub recovery: RecoveryConfig,
    pub compaction: CompactionConfig,
    pub agent: AgentConfig,
    pub store: StoreConfig,
}

impl Config {
    /// Parses TOML text and checks it ([`Config::validate`]); errors name the
    /// offending key.
    pub fn from_toml(text: &str) -> Result<Config, String> {
        let config: Config =
            toml::from_str(text).map_err(|e| e.to_string().trim_end().replace('\n', " "))?;
        config.validate()?;
        Ok(config)
    }

    /// Rejects settings no execution could work under, naming the key: a lease
    /// shorter than [`LeaseConfig::MIN_LEASE_MS`], or a heartbeat that would not renew
    /// the lease at least twice per lease (every execution would then "lose" its
    /// claim, or stop dispatching at its own deadline, protocol §4.4a).
    pub fn validate(&self) -> Result<(), String> {
        let lease = &self.lease;
        if lease.lease_ms < LeaseConfig::MIN_LEASE_MS {
            return Err(format!(
                "lease.lease_ms = {} is too short: it must be at least {} ms",
                lease.lease_ms,
                LeaseConfig::MIN_LEASE_MS
            ));
        }
        if let Some(beat) = lease.heartbeat_ms
            && (beat == 0 || beat > lease.lease_ms / 2)
        {
            return Err(format!(
                "lease.heartbeat_ms = {beat} must be between 1 and half of lease.lease_ms ({} ms), \
                 so that every lease is renewed at least twice before it runs out",
                lease.lease_ms / 2
            ));
        }
        if lease.lease_ms > LeaseConfig::MAX_LEASE_MS {
            return Err(format!(
                "lease.lease_ms = {} is too long: it must be at most {} ms (a day)",
                lease.lease_ms,
                LeaseConfig::MAX_LEASE_MS
            ));
        }
        if self.agent.max_steps == 0 {
            return Err("agent.max_steps must be at least 1".into());
        }
        Ok(())
    }
}

/// `text` (a config file) with `tool` added to `tools.allow`, keeping everything
/// else — comments included — as it was. `allow` is the list in effect (the
/// default one when the file sets none). Errors when the file's `tools.allow` spans
/// several lines (the user adds the tool by hand then) or the result would not load.
pub fn with_allowed_tool(text: &str, allow: &[String], tool: &str) -> Result<String, String> {
    let mut allow = allow.to_vec();
    if !allow.iter().any(|t| t == tool) {
        allow.push(tool.to_string());
    }
    let line = format!(
        "allow = [{}]",
        allow
            .iter()
            .map(|t| format!("{t:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let header = lines.iter().position(|l| l.trim() == "[tools]");
    match header {
        None => {
            if lines.last().is_some_and(|l| !l.trim().is_empty()) {
                lines.push(String::new());
            }
            lines.push("[tools]".into());
            lines.push(line);
        }
        Some(at) => {
            let end = lines[at + 1..]
                .iter()
                .position(|l| l.trim_start().starts_with('['))
                .map_or(lines.len(), |i| at + 1 + i);
            let existing = (at + 1..end).find(|i| {
                let l = lines[*i].trim_start();
                l.strip_prefix("allow")
                    .is_some_and(|rest| rest.trim_start().starts_with('='))
            });
            match existing {
                Some(i) if lines[i].contains('[') && lines[i].contains(']') => lines[i] = line,
                Some(_) => {
                    return Err(
                        "tools.allow spans several lines in the config file; add the tool there by hand"
                            .into(),
                    );
                }
                None => lines.insert(at + 1, line),
            }
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    let check = Config::from_toml(&out)?;
    if !check.tools.allow.iter().any(|t| t == tool) {
        return Err("the edited config file would not allow the tool".into());
    }
    Ok(out)
}

/// Adds `tool` to `tools.allow` in the config file at `path` (created when missing),
/// replacing the file in one rename.
pub fn save_allowed_tool(
    path: &std::path::Path,
    allow: &[String],
    tool: &str,
) -> Result<(), String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let edited = with_allowed_tool(&text, allow, tool)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let temp = path.with_extension("toml.saving");
    std::fs::write(&temp, edited).map_err(|e| format!("cannot write {}: {e}", temp.display()))?;
    std::fs::rename(&temp, path).map_err(|e| format!("cannot replace {}: {e}", path.display()))
}

/// `[provider]`: which model answers.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProviderConfig {
    /// `scripted` (built in, offline) or `openai` (any OpenAI-compatible server).
    pub name: String,
    /// The scripted provider's TOML script; the built-in demo when unset.
    pub script: Option<PathBuf>,
    /// `openai`: the API root, e.g. `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    pub model: Option<String>,
    /// `openai`: the environment variable holding the API key, if any.
    pub api_key_env: Option<String>,
    /// `openai`: attempts for 429/5xx before the step fails.
    pub max_attempts: u32,
    /// `openai`: per-request timeout for the first byte, in milliseconds.
    pub request_timeout_ms: u64,
}

impl Default for ProviderConfig {
    fn default() -> Self {
        ProviderConfig {
            name: "scripted".into(),
            script: None,
            base_url: "http://127.0.0.1:8080/v1".into(),
            model: None,
            api_key_env: None,
            max_attempts: 4,
            request_timeout_ms: 120_000,
        }
    }
}

/// `[tools]`: what tools may do without asking.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// Tools that run without asking; others ask (TUI, ACP) or are denied (headless
    /// `run` without `--yes`).
    pub allow: Vec<String>,
    /// `run_command`'s default timeout.
    pub command_timeout_ms: u64,
    /// The most output bytes a tool result keeps.
    pub output_limit_bytes: usize,
    /// Grace between SIGTERM and SIGKILL when a command is stopped.
    pub kill_grace_ms: u64,
    /// Environment variables commands never see: the provider's API key variable
    /// (set by the engine from `provider.api_key_env`, not a config key).
    #[serde(skip)]
    pub hidden_env: Vec<String>,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            allow: vec!["read_file".into(), "list_dir".into()],
            command_timeout_ms: 120_000,
            output_limit_bytes: 64 * 1024,
            kill_grace_ms: 2_000,
            hidden_env: Vec::new(),
        }
    }
}

/// `[lease]` (protocol §4.1).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LeaseConfig {
    pub lease_ms: u64,
    /// Defaults to `lease_ms / 3`.
    pub heartbeat_ms: Option<u64>,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            lease_ms: 30_000,
            heartbeat_ms: None,
        }
    }
}

impl LeaseConfig {
    /// The shortest lease a config may set.
    pub const MIN_LEASE_MS: u64 = 1_000;
    /// The longest: a day.
    pub const MAX_LEASE_MS: u64 = 86_400_000;

    /// The lease as a duration.
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    /// The heartbeat interval: `heartbeat_ms`, else a third of the lease.
    pub fn heartbeat(&self) -> Duration {
        Duration::from_millis(self.heartbeat_ms.unwrap_or(self.lease_ms / 3).max(1))
    }
}

/// `[recovery]` (protocol §5.9).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecoveryConfig {
    /// Continue recovered sessions on their own; `false` leaves the wakes for the user.
    pub auto_continue: bool,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        RecoveryConfig {
            auto_continue: true,
        }
    }
}

/// `[compaction]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompactionConfig {
    /// Estimated tokens (about four characters each) above which the transcript is
    /// summarised before the next provider step.
    pub token_budget: usize,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            token_budget: 48_000,
        }
    }
}

/// `[store]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// A ceiling on the database size, in pages (`PRAGMA max_page_count`). A write
    /// past it fails with a typed "database is full" error and changes nothing.
    pub max_pages: Option<u64>,
}

/// `[agent]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// Provider steps one prompt may take before the turn is stopped.
    pub max_steps: usize,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig { max_steps: 50 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_file_is_the_defaults() {
        assert_eq!(Config::from_toml("").unwrap(), Config::default());
    }

    #[test]
    fn keys_are_read() {
        let config = Config::from_toml(
            "[tools]\nallow = [\"run_command\"]\n[lease]\nlease_ms = 9000\n[recovery]\nauto_continue = false\n",
        )
        .unwrap();
        assert_eq!(config.tools.allow, vec!["run_command".to_string()]);
        assert_eq!(config.lease.heartbeat(), Duration::from_millis(3000));
        assert!(!config.recovery.auto_continue);
    }

    #[test]
    fn impossible_lease_settings_are_rejected_with_the_key_named() {
        for (toml, key) in [
            ("[lease]\nlease_ms = 0\n", "lease.lease_ms = 0"),
            ("[lease]\nlease_ms = 999\n", "lease.lease_ms = 999"),
            (
                "[lease]\nlease_ms = 3000\nheartbeat_ms = 3000\n",
                "lease.heartbeat_ms = 3000",
            ),
            (
                "[lease]\nlease_ms = 3000\nheartbeat_ms = 5000\n",
                "lease.heartbeat_ms = 5000",
            ),
            (
                "[lease]\nlease_ms = 3000\nheartbeat_ms = 0\n",
                "lease.heartbeat_ms = 0",
            ),
            ("[agent]\nmax_steps = 0\n", "agent.max_steps"),
            (
                "[lease]\nlease_ms = 9223372036854775807\n",
                "lease.lease_ms = 9223372036854775807 is too long",
            ),
        ] {
            let err = Config::from_toml(toml).unwrap_err();
            assert!(err.contains(key), "{toml:?}: {err}");
        }
        let ok = Config::from_toml("[lease]\nlease_ms = 1000\nheartbeat_ms = 500\n").unwrap();
        assert_eq!(ok.lease.heartbeat(), Duration::from_millis(500));
    }

    #[test]
    fn a_tool_is_added_to_tools_allow_keeping_the_rest_of_the_file() {
        let defaults = ToolsConfig::default().allow;
        let added = with_allowed_tool("", &defaults, "write_file").unwrap();
        assert_eq!(
            added,
            "[tools]\nallow = [\"read_file\", \"list_dir\", \"write_file\"]\n"
        );
        let text = "# my settings\n[tools]\n# keep this\nallow = [\"read_file\"] # mine\n\n[lease]\nlease_ms = 30000\n";
        let added = with_allowed_tool(text, &["read_file".to_string()], "run_command").unwrap();
        assert_eq!(
            added,
            "# my settings\n[tools]\n# keep this\nallow = [\"read_file\", \"run_command\"]\n\n[lease]\nlease_ms = 30000\n"
        );
        let no_allow = "[tools]\ncommand_timeout_ms = 5\n";
        assert_eq!(
            with_allowed_tool(no_allow, &defaults, "write_file").unwrap(),
            "[tools]\nallow = [\"read_file\", \"list_dir\", \"write_file\"]\ncommand_timeout_ms = 5\n"
        );
        let multi = "[tools]\nallow = [\n  \"read_file\",\n]\n";
        assert!(
            with_allowed_tool(multi, &defaults, "x")
                .unwrap_err()
                .contains("by hand")
        );
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = Config::from_toml("[tools]\nalow = []\n").unwrap_err();
        assert!(err.contains("unknown field `alow`"), "{err}");
        let err = Config::from_toml("[leases]\n").unwrap_err();
        assert!(err.contains("unknown field `leases`"), "{err}");
    }
}
