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
    pub mcp: McpConfig,
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
        let provider = &self.provider;
        for (key, value) in [
            ("max_event_bytes", provider.max_event_bytes),
            ("max_answer_bytes", provider.max_answer_bytes),
            (
                "max_tool_arguments_bytes",
                provider.max_tool_arguments_bytes,
            ),
            ("max_error_body_bytes", provider.max_error_body_bytes),
        ] {
            if value < 1024 {
                return Err(format!(
                    "provider.{key} = {value} is too small: it must be at least 1024 bytes"
                ));
            }
        }
        if provider.request_timeout_ms == 0 {
            return Err("provider.request_timeout_ms must be at least 1".into());
        }
        if provider.max_tokens == 0 {
            return Err("provider.max_tokens must be at least 1".into());
        }
        if let Some(budget) = provider.thinking_budget
            && (budget < 1024 || budget >= provider.max_tokens)
        {
            return Err(format!(
                "provider.thinking_budget = {budget} must be at least 1024 and below provider.max_tokens ({})",
                provider.max_tokens
            ));
        }
        if let Some(num_ctx) = provider.num_ctx
            && num_ctx < 512
        {
            return Err(format!(
                "provider.num_ctx = {num_ctx} is too small: it must be at least 512 tokens"
            ));
        }
        for (name, server) in &self.mcp.servers {
            server.validate(name)?;
        }
        Ok(())
    }
}

/// `text` (a config file) with `tool` added to `tools.allow`, keeping everything
/// else — comments, layout, line endings — as it was. The list extended is the
/// file's own (however it is written: a `[tools]` table, a dotted `tools.allow`, one
/// line or several), or the default one when the file sets none. Errors when the
/// file does not parse, or the result would not load.
pub fn with_allowed_tool(text: &str, tool: &str) -> Result<String, String> {
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e| format!("the config file does not parse: {e}"))?;
    let tools = doc
        .entry("tools")
        .or_insert_with(|| toml_edit::Item::Table(toml_edit::Table::new()));
    let Some(tools) = tools.as_table_like_mut() else {
        return Err("`tools` in the config file is not a table".into());
    };
    match tools.get_mut("allow") {
        Some(item) => {
            let Some(allow) = item.as_array_mut() else {
                return Err("tools.allow in the config file is not a list".into());
            };
            if !allow.iter().any(|t| t.as_str() == Some(tool)) {
                allow.push(tool);
            }
        }
        None => {
            let mut allow = toml_edit::Array::new();
            for t in ToolsConfig::default().allow {
                allow.push(t);
            }
            if !allow.iter().any(|t| t.as_str() == Some(tool)) {
                allow.push(tool);
            }
            tools.insert("allow", toml_edit::value(allow));
        }
    }
    let mut out = doc.to_string();
    if text.contains("\r\n") {
        out = out.replace("\r\n", "\n").replace('\n', "\r\n");
    }
    let check = Config::from_toml(&out)?;
    if !check.tools.allow.iter().any(|t| t == tool) {
        return Err("the edited config file would not allow the tool".into());
    }
    Ok(out)
}

/// Adds `tool` to `tools.allow` in the config file at `path` (created when
/// missing), reading the file as it is now. The file is replaced in one rename
/// beside its real path (a symlinked config stays a symlink) and keeps its mode.
pub fn save_allowed_tool(path: &std::path::Path, tool: &str) -> Result<(), String> {
    // One save at a time in this process: each reads what the one before wrote.
    static SAVING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = SAVING.lock().unwrap_or_else(|e| e.into_inner());
    let target = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let (text, mode) = match std::fs::read_to_string(&target) {
        Ok(text) => {
            let mode = std::fs::metadata(&target).ok().map(|m| m.permissions());
            (text, mode)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let edited = with_allowed_tool(&text, tool)?;
    if let Some(dir) = target.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.exists()
    {
        crate::store::create_dir_synced(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let temp = target.with_extension(format!("toml.saving-{}", std::process::id()));
    let _ = std::fs::remove_file(&temp);
    let written = (|| {
        use std::io::Write;
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        // Created with the file's mode from the start (0600 for a new one): the
        // settings are never more open than they were, even for a moment.
        let mode = mode.map_or(0o600, |m| m.mode() & 0o7777);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temp)
            .map_err(|e| format!("cannot write {}: {e}", temp.display()))?;
        file.write_all(edited.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| format!("cannot write {}: {e}", temp.display()))?;
        std::fs::rename(&temp, &target)
            .map_err(|e| format!("cannot replace {}: {e}", target.display()))?;
        // The new name reaches the disk with its directory: without this a power
        // cut could bring back the file as it was before the choice was saved.
        match target.parent() {
            Some(dir) => crate::store::sync_dir(if dir.as_os_str().is_empty() {
                std::path::Path::new(".")
            } else {
                dir
            })
            .map_err(|e| format!("cannot sync {}: {e}", dir.display())),
            None => Ok(()),
        }
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// `[provider]`: which model answers.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProviderConfig {
    /// `scripted` (built in, offline), `openai` (any OpenAI-compatible server),
    /// `anthropic` (the Messages API) or `ollama` (Ollama's native API).
    pub name: String,
    /// The scripted provider's TOML script; the built-in demo when unset.
    pub script: Option<PathBuf>,
    /// The API root: `openai` with its `/v1` (`http://127.0.0.1:8080/v1` when
    /// unset), `anthropic` without it (`https://api.anthropic.com`), `ollama` its
    /// server (`http://127.0.0.1:11434`).
    pub base_url: Option<String>,
    pub model: Option<String>,
    /// `openai`: the environment variable holding the API key, if any.
    pub api_key_env: Option<String>,
    /// `openai`: attempts for 429/5xx before the step fails.
    pub max_attempts: u32,
    /// `openai`: per-request timeout for the first byte, and the longest wait for
    /// the next complete event of a stream, in milliseconds.
    pub request_timeout_ms: u64,
    /// The largest server-sent event (or streamed line) a provider may send, in
    /// bytes (protocol §4.15).
    pub max_event_bytes: usize,
    /// The largest answer text of one step, in bytes.
    pub max_answer_bytes: usize,
    /// The largest arguments of one tool call, in bytes.
    pub max_tool_arguments_bytes: usize,
    /// How much of an error answer's body is read, in bytes.
    pub max_error_body_bytes: usize,
    /// `anthropic`: the most tokens one answer may take (`max_tokens`).
    pub max_tokens: u32,
    /// `anthropic`: extended thinking with this budget of tokens, when set (at
    /// least 1024, below `max_tokens`).
    pub thinking_budget: Option<u32>,
    /// `ollama`: the context window (`options.num_ctx`); by default the model's
    /// own (`/api/show`), at least 8192.
    pub num_ctx: Option<u32>,
    /// `ollama`: how long the model stays loaded after a request (`keep_alive`).
    pub keep_alive: Option<String>,
    /// `openai`: the model's context window in tokens, when known: a prompt that
    /// reaches it is reported as cut.
    pub context_window: Option<u64>,
}

impl ProviderConfig {
    /// `base_url`, or the provider's own default.
    pub fn base_url(&self) -> String {
        let default = match self.name.as_str() {
            "anthropic" => "https://api.anthropic.com",
            "ollama" => "http://127.0.0.1:11434",
            _ => "http://127.0.0.1:8080/v1",
        };
        self.base_url
            .clone()
            .unwrap_or_else(|| default.to_string())
            .trim_end_matches('/')
            .to_string()
    }

    /// The settings `--provider name` runs with (protocol §4.17): these, when this
    /// `[provider]` is `name`'s; else `name`'s defaults, keeping only what every
    /// provider shares — `max_attempts`, `request_timeout_ms` and the bounds of
    /// protocol §4.15. Another provider's `base_url`, `api_key_env`, `model` and
    /// model settings are never carried over: an Anthropic key is not sent to an
    /// Ollama server, nor an Ollama model name to Anthropic.
    pub fn for_provider(&self, name: &str) -> ProviderConfig {
        if name == self.name {
            return self.clone();
        }
        // A section that names no provider (so the offline script) sets nothing
        // the script uses but `script`: its address, key and model are meant for
        // whichever provider is chosen.
        if self.name == "scripted" && name != "scripted" {
            return ProviderConfig {
                name: name.to_string(),
                script: None,
                ..self.clone()
            };
        }
        ProviderConfig {
            name: name.to_string(),
            max_attempts: self.max_attempts,
            request_timeout_ms: self.request_timeout_ms,
            max_event_bytes: self.max_event_bytes,
            max_answer_bytes: self.max_answer_bytes,
            max_tool_arguments_bytes: self.max_tool_arguments_bytes,
            max_error_body_bytes: self.max_error_body_bytes,
            ..ProviderConfig::default()
        }
    }
}

impl Default for ProviderConfig {
    fn default() -> Self {
        ProviderConfig {
            name: "scripted".into(),
            script: None,
            base_url: None,
            model: None,
            api_key_env: None,
            max_attempts: 4,
            request_timeout_ms: 120_000,
            max_event_bytes: 1 << 20,
            max_answer_bytes: 4 << 20,
            max_tool_arguments_bytes: 4 << 20,
            max_error_body_bytes: 64 << 10,
            max_tokens: 8192,
            thinking_budget: None,
            num_ctx: None,
            keep_alive: None,
            context_window: None,
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
    /// Steward's own configuration (the config file, and the directory it lies in
    /// when that is Steward's own): file tools ask every time before touching it,
    /// since it decides what runs without asking. Set by the binary, not a config key.
    #[serde(skip)]
    pub settings: Vec<std::path::PathBuf>,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            allow: vec![
                "read_file".into(),
                "list_dir".into(),
                "grep".into(),
                "glob".into(),
            ],
            command_timeout_ms: 120_000,
            output_limit_bytes: 64 * 1024,
            kill_grace_ms: 2_000,
            hidden_env: Vec::new(),
            settings: Vec::new(),
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
    /// past it fails like a full disk ("the disk is full: …") and changes nothing.
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

/// `[mcp]`: MCP tool servers (protocol §4.16).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// `[mcp.servers.NAME]`: each server's tools are offered as `NAME__TOOL`.
    pub servers: std::collections::BTreeMap<String, McpServerConfig>,
}

/// `[mcp.servers.NAME]`: a stdio server (`command`, `args`, `env`) or a Streamable
/// HTTP one (`url`, `headers`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerConfig {
    /// The program to run (looked up on `PATH`), in the session's directory.
    pub command: Option<String>,
    pub args: Vec<String>,
    /// Added to the server's environment. The provider's API key variable is never
    /// passed on, even when named here.
    pub env: std::collections::BTreeMap<String, String>,
    /// A Streamable HTTP endpoint, instead of `command`.
    pub url: Option<String>,
    /// HTTP headers sent with every request to `url` (`Authorization`, say).
    pub headers: std::collections::BTreeMap<String, String>,
    /// How long one `tools/call` may take before it is cancelled and its outcome
    /// recorded as unknown.
    pub timeout_ms: u64,
    /// How long starting the server (spawn, `initialize`, `tools/list`) may take.
    pub startup_timeout_ms: u64,
}

impl Default for McpServerConfig {
    fn default() -> Self {
        McpServerConfig {
            command: None,
            args: Vec::new(),
            env: Default::default(),
            url: None,
            headers: Default::default(),
            timeout_ms: 60_000,
            startup_timeout_ms: 30_000,
        }
    }
}

impl McpServerConfig {
    /// The longest server name: its tools' names (`NAME__TOOL`) are at most 64
    /// characters.
    pub const MAX_NAME: usize = 32;

    /// Checks one server's settings; errors name the key.
    pub fn validate(&self, name: &str) -> Result<(), String> {
        let key = format!("mcp.servers.{name}");
        // `SERVER__TOOL` must split one way only, and `SERVER__*` in tools.allow
        // must name one server: no `__` in a name, none starting or ending in `_`.
        if name.is_empty()
            || name.len() > Self::MAX_NAME
            || name.contains("__")
            || name.starts_with('_')
            || name.ends_with('_')
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(format!(
                "{key}: a server name is 1 to {} letters, digits, `_` or `-`, without `__` and not starting or ending with `_`",
                Self::MAX_NAME
            ));
        }
        match (&self.command, &self.url) {
            (Some(_), Some(_)) => {
                return Err(format!("{key}: set `command` or `url`, not both"));
            }
            (None, None) => return Err(format!("{key}: set `command` or `url`")),
            (Some(command), None) if command.trim().is_empty() => {
                return Err(format!("{key}.command is empty"));
            }
            (None, Some(url)) if !(url.starts_with("http://") || url.starts_with("https://")) => {
                return Err(format!("{key}.url must start with http:// or https://"));
            }
            _ => {}
        }
        if self.command.is_some() && !self.headers.is_empty() {
            return Err(format!(
                "{key}.headers: only an HTTP server (`url`) takes headers"
            ));
        }
        if self.url.is_some() && (!self.args.is_empty() || !self.env.is_empty()) {
            return Err(format!(
                "{key}: `args` and `env` are for a server run by `command`"
            ));
        }
        if self.timeout_ms == 0 || self.startup_timeout_ms == 0 {
            return Err(format!(
                "{key}: timeout_ms and startup_timeout_ms must be at least 1"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r4_16_a_server_name_splits_one_way_and_names_one_server() {
        let server = McpServerConfig {
            command: Some("server".into()),
            ..McpServerConfig::default()
        };
        for good in ["a", "notes", "a-b", "a_b", "web2"] {
            assert_eq!(server.validate(good), Ok(()), "{good}");
        }
        // `a_` would make `a__*` in tools.allow allow its tools (`a___x`) too.
        for bad in ["", "_", "a_", "_a", "a__b", "a b", "ü", &"x".repeat(33)] {
            assert!(server.validate(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn r4_17_another_provider_chosen_by_flag_takes_none_of_the_configs_address_key_or_model() {
        let config = Config::from_toml(
            "[provider]\nname = \"anthropic\"\nbase_url = \"https://gateway.example\"\n\
             api_key_env = \"ANTHROPIC_API_KEY\"\nmodel = \"claude-x\"\nmax_tokens = 4096\n\
             thinking_budget = 1024\nmax_attempts = 2\nrequest_timeout_ms = 9000\n\
             max_event_bytes = 2048\n",
        )
        .unwrap()
        .provider;
        let ollama = config.for_provider("ollama");
        assert_eq!(
            ollama,
            ProviderConfig {
                name: "ollama".into(),
                max_attempts: 2,
                request_timeout_ms: 9000,
                max_event_bytes: 2048,
                ..ProviderConfig::default()
            }
        );
        assert_eq!(ollama.base_url(), "http://127.0.0.1:11434");
        // The provider the config is written for keeps all of it.
        assert_eq!(config.for_provider("anthropic"), config);
        // A section that names no provider lends what it says to the one chosen.
        let unnamed = Config::from_toml(
            "[provider]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"gpt\"\napi_key_env = \"MYKEY\"\n",
        )
        .unwrap()
        .provider;
        let openai = unnamed.for_provider("openai");
        assert_eq!(openai.name, "openai");
        assert_eq!(openai.base_url.as_deref(), Some("http://127.0.0.1:9/v1"));
        assert_eq!(openai.model.as_deref(), Some("gpt"));
        assert_eq!(openai.api_key_env.as_deref(), Some("MYKEY"));
    }

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
        let added = with_allowed_tool("", "write_file").unwrap();
        assert_eq!(
            Config::from_toml(&added).unwrap().tools.allow,
            ["read_file", "list_dir", "grep", "glob", "write_file"]
        );
        // The file's own list grows; comments, trailing ones included, stay.
        let text = "# my settings\n[tools]   # the tools section\n# keep this\nallow = [\"read_file\"] # mine\n\n[lease]\nlease_ms = 30000\n";
        let added = with_allowed_tool(text, "run_command").unwrap();
        assert_eq!(
            added,
            "# my settings\n[tools]   # the tools section\n# keep this\nallow = [\"read_file\", \"run_command\"] # mine\n\n[lease]\nlease_ms = 30000\n"
        );
        // Saved twice, both stay.
        let twice = with_allowed_tool(&added, "write_file").unwrap();
        assert_eq!(
            Config::from_toml(&twice).unwrap().tools.allow,
            ["read_file", "run_command", "write_file"]
        );
        let no_allow = "[tools]\ncommand_timeout_ms = 5\n";
        let config =
            Config::from_toml(&with_allowed_tool(no_allow, "write_file").unwrap()).unwrap();
        assert_eq!(
            config.tools.allow,
            ["read_file", "list_dir", "grep", "glob", "write_file"]
        );
        assert_eq!(config.tools.command_timeout_ms, 5);
        // A list over several lines, a dotted key, CRLF line endings.
        let multi = "[tools]\nallow = [\n  \"read_file\",\n]\n";
        let multi = with_allowed_tool(multi, "list_dir").unwrap();
        assert_eq!(
            Config::from_toml(&multi).unwrap().tools.allow,
            ["read_file", "list_dir"]
        );
        let dotted = with_allowed_tool("tools.allow = [\"read_file\"]\n", "list_dir").unwrap();
        assert_eq!(dotted, "tools.allow = [\"read_file\", \"list_dir\"]\n");
        let crlf = with_allowed_tool("[lease]\r\nlease_ms = 30000\r\n", "list_dir").unwrap();
        assert!(!crlf.replace("\r\n", "").contains('\n'), "{crlf:?}");
        assert!(with_allowed_tool("[tools\n", "list_dir").is_err());
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = Config::from_toml("[tools]\nalow = []\n").unwrap_err();
        assert!(err.contains("unknown field `alow`"), "{err}");
        let err = Config::from_toml("[leases]\n").unwrap_err();
        assert!(err.contains("unknown field `leases`"), "{err}");
    }
}
