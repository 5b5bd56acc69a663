//! `steward`: parses the command line, resolves paths once, holds the log guard,
//! opens the store and dispatches to one file per subcommand.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod acp;
mod commands;
mod context;
mod logging;
mod output;
mod paths;

use output::say;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand};
use steward_engine::clock::{SharedClock, SystemClock};
use steward_engine::config::Config;
use steward_engine::store::Store;

use paths::Paths;

/// Exit codes (README, "Run").
mod exit {
    pub const FAILURE: u8 = 1;
    pub const REFUSED: u8 = 3;
    pub const BUSY: u8 = 4;
    pub const INTERRUPTED: u8 = 130;
}

/// Steward: a crash-safe local agent runtime.
///
/// Every session execution holds a lease in one SQLite file. After a crash, the next
/// launch reconciles what was interrupted, never runs a tool or provider call twice,
/// and carries the agent on. With no command, Steward opens its terminal interface:
/// sessions, the transcript, a prompt, and the inspector (press ? for the keys).
///
/// The options below go before or after the command; `--continue` and `--session`
/// are for the terminal interface (no command).
#[derive(Debug, Parser)]
#[command(name = "steward", version)]
struct Cli {
    /// Where the database, owner locks and (with this flag) logs live.
    #[arg(long, env = "STEWARD_DATA_DIR", value_name = "DIR", global = true)]
    data_dir: Option<PathBuf>,
    /// The TOML config file (also `STEWARD_CONFIG`). A file named here must exist; when
    /// none is named, <config dir>/config.toml is read, and its absence means defaults.
    #[arg(long, env = "STEWARD_CONFIG", value_name = "FILE", global = true)]
    config: Option<PathBuf>,
    /// The provider: `scripted` (built in, offline), `openai`, `anthropic` or
    /// `ollama`. Another than the config's `[provider]` runs with its own defaults
    /// (its default address, no key, `--model`'s model): the config's `base_url`,
    /// `api_key_env` and `model` are for the provider it names.
    #[arg(long, value_name = "NAME", global = true)]
    provider: Option<String>,
    /// The model name sent to the provider.
    #[arg(long, value_name = "NAME", global = true)]
    model: Option<String>,
    /// The scripted provider's TOML script (default: the built-in demo).
    #[arg(long, value_name = "FILE", global = true)]
    script: Option<PathBuf>,
    /// Let the terminal interface capture the mouse (off by default, so the
    /// terminal's own selection and scrolling keep working).
    #[arg(long, global = true)]
    mouse: bool,
    /// Open the terminal interface on the most recently active session (archived
    /// ones aside).
    #[arg(short = 'c', long = "continue", conflicts_with = "session")]
    continue_last: bool,
    /// Open the terminal interface on this session (`ses_…`; `steward sessions`
    /// lists them).
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a prompt headless: admit it (to a new session unless --session), run until
    /// the session is idle, and stream the assistant's text to stdout.
    Run(commands::run::RunArgs),
    /// List sessions with their state, most recently active first: the 50 most
    /// recent (every one with --json), unless told otherwise. Never recovers or runs
    /// anything.
    Sessions {
        /// Print a JSON array (of every session, unless --limit is given).
        #[arg(long)]
        json: bool,
        /// How many sessions to list [default: 50, or all with --json].
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        limit: Option<u32>,
        /// List every session.
        #[arg(long, conflicts_with = "limit")]
        all: bool,
        /// List archived sessions too (marked `archived`; hidden otherwise).
        #[arg(long)]
        archived: bool,
    },
    /// Show a session's transcript, synthetic messages and tool states included.
    Show {
        /// The session id (`ses_…`).
        session: String,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// The inspector, read-only: owners, claims, quarantined rows, pending wakes and
    /// recoveries. Never writes, never recovers; refreshes live on a terminal.
    Inspect {
        /// Print one JSON snapshot.
        #[arg(long)]
        json: bool,
    },
    /// A recovery pass now; then (unless --no-wake) the durable wakes it finds are
    /// redriven and their sessions run until idle, and another pass takes what
    /// expired or lost its owner meanwhile, its wakes run too, until a round finds
    /// nothing. Prints the report.
    Recover {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Reconcile only; leave the wakes pending.
        #[arg(long)]
        no_wake: bool,
    },
    /// Continue a pending, parked or quarantined recovery wake (the session then runs
    /// until idle), or hand a quarantined claim back to recovery.
    Wake {
        /// The execution id (`exe_…`).
        execution_id: String,
    },
    /// Discard a recovery wake or a quarantined claim. Never runs anything.
    Discard {
        /// The execution id (`exe_…`).
        execution_id: String,
    },
    /// Give a session a new title. Refused, with the reason, while the session runs
    /// or holds a claim, a pending wake or a quarantined row (exit 1).
    Rename {
        /// The session id (`ses_…`).
        session: String,
        /// The new title (the words are joined with spaces).
        #[arg(required = true, num_args = 1..)]
        title: Vec<String>,
    },
    /// Archive a session: kept whole, but left out of `steward sessions` and the
    /// terminal's session list unless asked for (`steward sessions --archived`; `A`
    /// in the list). Refused like `rename`.
    Archive {
        /// The session id (`ses_…`).
        session: String,
        /// Bring an archived session back into the lists.
        #[arg(long)]
        undo: bool,
    },
    /// Delete a session for good: its event log and every row of it (transcript,
    /// inputs, recovery history). Refused like `rename`; asks nothing.
    Delete {
        /// The session id (`ses_…`).
        session: String,
    },
    /// An Agent Client Protocol agent on stdin/stdout, for editors and desktop shells
    /// (Zed, JetBrains IDEs, Neovim, Emacs, Tauri/Electron sidecars). Stdout carries
    /// protocol messages only; exits when stdin closes.
    Acp,
    /// Check integrity, schema version, that every projection equals a replay of its
    /// event log, and every invariant (claims, open tools, inputs, recoveries, epochs);
    /// then start each configured MCP server (in the current directory), list its
    /// tools and stop it. Never recovers or runs a session.
    Doctor {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let _failpoints = steward_engine::failpoint::setup();
    let (data_dir, config) = (cli.data_dir.clone(), cli.config.clone());
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            say!("steward: {error:#}");
            if damaged(&error) {
                let database = Paths::resolve(data_dir, config)
                    .map(|p| p.database.display().to_string())
                    .unwrap_or_else(|_| "the database".into());
                say!(
                    "steward: {database} is damaged; `steward doctor` says where, and what you can do"
                );
            }
            ExitCode::from(exit_code(&error))
        }
    }
}

/// Whether SQLite found the database damaged somewhere on the way to `error`.
fn damaged(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<steward_engine::Error>()
            .is_some_and(steward_engine::Error::is_damage)
    })
}

fn exit_code(error: &anyhow::Error) -> u8 {
    use steward_engine::Error;
    match error.downcast_ref::<Error>() {
        Some(Error::DatabaseRefused { .. }) => exit::REFUSED,
        Some(Error::SessionBusy { .. }) => exit::BUSY,
        _ => exit::FAILURE,
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    if cli.command.is_some() && (cli.continue_last || cli.session.is_some()) {
        use clap::CommandFactory;
        Cli::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "--continue and --session open the terminal interface: give no command with them (`steward run --session ID` runs a prompt in a session)",
            )
            .exit();
    }
    let paths = Paths::resolve(cli.data_dir.clone(), cli.config.clone())?;
    let config = load_config(&paths, &cli)?;
    let clock: SharedClock = SystemClock::shared();
    if let Some(Command::Inspect { json }) = cli.command {
        // Never writes: no database is created, no log file either.
        return commands::inspect::run(&paths, &clock, json, cli.mouse);
    }
    if let Some(Command::Doctor { json }) = cli.command
        && !paths.database.exists()
    {
        // Nothing to check, and nothing created: the doctor only reads.
        return commands::doctor::no_database(&paths, json);
    }
    // The doctor runs the whole-file check in the look before opening, so a damaged
    // file is explained without ever being opened for writing (protocol §2.3).
    let whole = match cli.command {
        Some(Command::Doctor { json }) => {
            use steward_engine::store::open::{WholeFile, preflight_with};
            if let Err(e) = preflight_with(
                &paths.database,
                steward_engine::store::migrate::MIGRATIONS,
                WholeFile::Always,
            ) {
                return commands::doctor::explain_refusal(&paths, e.into(), json);
            }
            steward_engine::store::open::WholeFile::Done
        }
        _ => steward_engine::store::open::WholeFile::IfDue,
    };
    let store = match open_store(&paths, clock.as_ref(), whole) {
        Err(error) if matches!(cli.command, Some(Command::Doctor { .. })) => {
            let Some(Command::Doctor { json }) = cli.command else {
                unreachable!()
            };
            // A refused file is explained, still without writing.
            return commands::doctor::explain_refusal(&paths, error, json);
        }
        opened => opened?,
    };
    if let Some(pages) = config.store.max_pages {
        store.set_max_pages(pages)?;
    }
    let _log_guard = logging::init(&paths.logs);
    tracing::info!(version = env!("CARGO_PKG_VERSION"), data_dir = %paths.data_dir.display(), "steward started");
    let ctx = context::Context {
        paths,
        config,
        clock,
        model_chosen: cli.provider.is_some() || cli.model.is_some(),
    };
    let Some(command) = cli.command else {
        let open = match (cli.continue_last, cli.session) {
            (_, Some(id)) => commands::chat::Open::Session(id),
            (true, None) => commands::chat::Open::MostRecent,
            (false, None) => commands::chat::Open::Nothing,
        };
        return commands::chat::run(&ctx, store, cli.mouse, open);
    };
    match command {
        Command::Run(args) => commands::run::run(&ctx, store, args),
        Command::Sessions {
            json,
            limit,
            all,
            archived,
        } => {
            let limit = match (limit, all, json) {
                (_, true, _) => None,
                (Some(n), _, _) => Some(n as usize),
                (None, _, true) => None,
                (None, _, false) => Some(50),
            };
            commands::sessions::run(&store, ctx.clock.now_ms(), json, limit, archived)
        }
        Command::Show { session, json } => commands::show::run(&store, &session, json),
        Command::Recover { json, no_wake } => commands::recover::run(&ctx, store, json, no_wake),
        Command::Wake { execution_id } => commands::wake::run(&ctx, store, execution_id),
        Command::Discard { execution_id } => {
            commands::discard::run(store, ctx.clock.now_ms(), &execution_id)
        }
        Command::Doctor { json } => {
            commands::doctor::run(&store, ctx.clock.now_ms(), json, &ctx.config)
        }
        Command::Rename { session, title } => {
            commands::housekeeping::rename(store, ctx.clock.now_ms(), &session, &title.join(" "))
        }
        Command::Archive { session, undo } => {
            commands::housekeeping::archive(store, ctx.clock.now_ms(), &session, undo)
        }
        Command::Delete { session } => {
            commands::housekeeping::delete(store, ctx.clock.now_ms(), &session)
        }
        Command::Acp => acp::run(&ctx, store),
        Command::Inspect { .. } => unreachable!("handled before the store opens"),
    }
}

fn load_config(paths: &Paths, cli: &Cli) -> Result<Config> {
    let mut config = match std::fs::read_to_string(&paths.config) {
        Ok(text) => Config::from_toml(&text)
            .map_err(|e| anyhow::anyhow!("config {}: {e}", paths.config.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !paths.config_named => {
            Config::default()
        }
        Err(e) => bail!("cannot read config {}: {e}", paths.config.display()),
    };
    // Another provider than the config's runs with its own defaults: the config's
    // address, key and model are for the provider it names (protocol §4.17).
    if let Some(name) = &cli.provider {
        config.provider = config.provider.for_provider(name);
    }
    if let Some(model) = &cli.model {
        config.provider.model = Some(model.clone());
    }
    if let Some(script) = &cli.script {
        config.provider.script = Some(script.clone());
    }
    config.tools.settings = paths.settings();
    Ok(config)
}

/// Opens (creating and migrating when absent) the database. A data directory
/// Steward creates is private to the user (`0700`): it holds transcripts.
fn open_store(
    paths: &Paths,
    clock: &dyn steward_engine::clock::Clock,
    whole: steward_engine::store::open::WholeFile,
) -> Result<Store> {
    if !paths.data_dir.exists() {
        // Its name synced into its parent: a power cut must not take the directory,
        // and the database in it, away after a commit (protocol §2.9).
        steward_engine::store::create_dir_synced(&paths.data_dir).with_context(|| {
            format!("cannot create data directory {}", paths.data_dir.display())
        })?;
    }
    Ok(Store::open_checked(
        &paths.database,
        steward_engine::store::migrate::MIGRATIONS,
        clock,
        whole,
    )?)
}
